"""Read and write Medusa heads in the published layouts: FasterDecoding's and vLLM's.

**FasterDecoding** (github.com/FasterDecoding/Medusa, `MedusaModel`): `config.json` with
`medusa_num_heads`, `medusa_num_layers` (defaults 4 and 1, as its `MedusaConfig`) and
`base_model_name_or_path`; weights `medusa_lm_head.safetensors` or `medusa_lm_head.pt` (a
state dict, read with `torch.load(weights_only=True)`), keys `medusa_head.{i}.{j}.linear.weight`
/ `.bias` for residual block j of head i and `medusa_head.{i}.{L}.weight` for the lm head of
head i ([vocab, h], no bias), L = medusa_num_layers. (FasterDecoding repeats one block module
L times, so its L > 1 files hold equal copies; read here as L blocks, the same arithmetic.)

**vLLM** (`vllm/model_executor/models/medusa.py`, config `vllm/transformers_utils/configs/
medusa.py`): `config.json` with model_type "medusa", `num_heads` (default 5),
`num_hidden_layers` (default 1; vLLM renames any key holding "num" and "heads" / "layers" to
these two, so FasterDecoding's names also count), `hidden_size`, `vocab_size`,
`truncated_vocab_size` (default vocab_size), `medusa_fc_bias` (default false) and
`original_lm_head` (one lm head for every head, stored as `lm_heads.0.weight`); weights
(`model.safetensors`, `pytorch_model.bin` or their shards; a `medusa_heads.` prefix is
dropped) `blocks.{i}.layers.{j}.weight` (+ `.bias` with medusa_fc_bias), `lm_heads.{i}.weight`
and, when truncated_vocab_size < vocab_size, `token_map` (the target id of each lm-head row;
full-vocabulary lm heads are then cut to its rows, and a token map is ignored otherwise, as
vLLM does).

Every stored weight must be one the layout reads (else a SpecdecError names it) and none may be
missing; shapes are checked against the config, then against the target (hidden size and
vocabulary) before the heads are used. `save_fasterdecoding` and `export_vllm` write the two
layouts; a head with a reduced draft vocabulary has only vLLM's.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from specdec_core.control import Progress
from specdec_core.errors import SpecdecError
from specdec_core.heads.medusa.head import MedusaConfig, MedusaHeads
from specdec_core.models import hub
from specdec_core.models.checkpoint import check_weights
from specdec_core.models.loading import LoadedModel, drafting_dtype
from specdec_core.models.prepacked_linear import prepack
from specdec_core.models.weights_file import check_shapes, listed, read_weight_file

FASTERDECODING, VLLM = "fasterdecoding", "vllm"
MEDUSA_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")  # FasterDecoding's names
CARD = "specdec_card.json"
EMBEDDED = "embedded"  # the heads bundled for the embedded model (resources/medusa)


def load_medusa(spec: str, target: LoadedModel, progress: Progress | None = None) -> MedusaHeads:
    """Medusa heads from `spec` (`embedded`: the heads bundled for the embedded model; a
    directory; a hub id), checked against `target` and placed on its device, in
    `models.drafting_dtype(target)`."""
    heads = read_medusa(spec, progress)
    embedding = target.model.get_output_embeddings().weight
    check_fits(heads, target.model.config.hidden_size, embedding.shape[0])
    heads.to(device=target.device, dtype=drafting_dtype(target)).eval()
    prepack(heads)  # on a CPU: oneDNN-packed linears (prepacked_linear.py)
    return heads


def read_medusa(spec: str, progress: Progress | None = None) -> MedusaHeads:
    """The heads as stored (their weights' float dtype, on the CPU), in either layout, bound to
    no target."""
    directory = resolve(spec, progress)
    path = directory / "config.json"
    if not path.is_file():
        raise SpecdecError(f"{spec} has no config.json; is it a Medusa head directory?")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise SpecdecError(f"{path} is not valid JSON; download or copy the head again") from None
    return heads_from_state(config, read_state(directory, spec))


def check_fits(heads: MedusaHeads, hidden_size: int, vocab_size: int) -> None:
    """Refuse heads made for another target (hidden size, vocabulary)."""
    config = heads.config
    if config.hidden_size != hidden_size:
        raise SpecdecError(
            f"the Medusa heads read hidden states of {config.hidden_size} but the target's are "
            f"{hidden_size}; use heads trained for this target (specdec train medusa)"
        )
    if config.vocab_size != vocab_size:
        raise SpecdecError(
            f"the Medusa heads predict a vocabulary of {config.vocab_size} tokens but the "
            f"target has {vocab_size}; use heads trained for this target (specdec train medusa)"
        )


def layout_of(state: dict[str, torch.Tensor]) -> str:
    """FASTERDECODING (`medusa_head.*`) or VLLM (`blocks.*`, `lm_heads.*`), from the keys."""
    if any(key.startswith("medusa_head.") for key in state):
        return FASTERDECODING
    if any(key.startswith(("blocks.", "lm_heads.")) for key in state):
        return VLLM
    raise SpecdecError(
        "these are not Medusa heads: expected keys 'medusa_head.*' (FasterDecoding) or "
        f"'blocks.*' / 'lm_heads.*' (vLLM), found e.g. {', '.join(sorted(state)[:4])}"
    )


def heads_from_state(config: dict, state: dict[str, torch.Tensor]) -> MedusaHeads:
    """Build the heads from a config.json (as a dict) and a state dict in either layout."""
    state = {key.removeprefix("medusa_heads."): value for key, value in state.items()}
    if layout_of(state) == FASTERDECODING:
        return _fasterdecoding(config, state)
    return _vllm(config, state)


def _fasterdecoding(config: dict, state: dict[str, torch.Tensor]) -> MedusaHeads:
    count = int(config.get("medusa_num_heads", 4))
    layers = int(config.get("medusa_num_layers", 1))
    lm = state.get(f"medusa_head.0.{layers}.weight")
    if lm is None or lm.dim() != 2:
        raise SpecdecError(
            f"the Medusa heads lack medusa_head.0.{layers}.weight, the lm head of head 0 with "
            f"medusa_num_layers {layers}; the config and the weights belong to different heads"
        )
    vocab, hidden = lm.shape
    medusa = MedusaHeads(MedusaConfig(hidden, vocab, count, layers, bias=True))
    ours = {}
    for i in range(count):
        for j in range(layers):
            for name in ("weight", "bias"):
                ours[f"medusa_head.{i}.{j}.linear.{name}"] = f"blocks.{i}.{j}.linear.{name}"
        ours[f"medusa_head.{i}.{layers}.weight"] = f"lm_heads.{i}.weight"
    return _loaded(medusa, state, ours, "medusa_num_heads / medusa_num_layers")


def vllm_config(config: dict) -> dict:
    """config.json as vLLM's `MedusaConfig.from_pretrained` reads it: a key holding "num" and
    "heads" is num_heads, one holding "num" and "layers" num_hidden_layers; its defaults."""
    read = dict(config)
    for key in list(read):
        if "num" in key and "heads" in key:
            read["num_heads"] = read.pop(key)
        elif "num" in key and "layers" in key:
            read["num_hidden_layers"] = read.pop(key)
    vocab = int(read.get("vocab_size", 32001))
    truncated = read.get("truncated_vocab_size")
    return {
        "hidden_size": int(read.get("hidden_size", 4096)),
        "vocab_size": vocab,
        "num_heads": int(read.get("num_heads", 5)),
        "num_hidden_layers": int(read.get("num_hidden_layers", 1)),
        "truncated_vocab_size": vocab if truncated is None else int(truncated),
        "medusa_fc_bias": bool(read.get("medusa_fc_bias", False)),
        "original_lm_head": bool(read.get("original_lm_head", False)),
    }


def _vllm(config: dict, state: dict[str, torch.Tensor]) -> MedusaHeads:
    read = vllm_config(config)
    vocab, truncated = read["vocab_size"], read["truncated_vocab_size"]
    token_map = None
    if truncated < vocab:
        if "token_map" not in state:
            raise SpecdecError(
                f"config.json sets truncated_vocab_size {truncated} below vocab_size {vocab} "
                "but the weights have no token_map; the config and the weights belong to "
                "different heads"
            )
        token_map = _token_map(state["token_map"], truncated, vocab)
    state = {key: value for key, value in state.items() if key != "token_map"}
    shared = read["original_lm_head"]
    medusa = MedusaHeads(
        MedusaConfig(
            read["hidden_size"],
            vocab,
            read["num_heads"],
            read["num_hidden_layers"],
            draft_vocab=truncated if token_map is not None else 0,
            bias=read["medusa_fc_bias"],
            shared_lm_head=shared,
        ),
        token_map,
    )
    ours = {}
    for i in range(read["num_heads"]):
        for j in range(read["num_hidden_layers"]):
            ours[f"blocks.{i}.layers.{j}.weight"] = f"blocks.{i}.{j}.linear.weight"
            if read["medusa_fc_bias"]:
                ours[f"blocks.{i}.layers.{j}.bias"] = f"blocks.{i}.{j}.linear.bias"
        if i == 0 or not shared:
            ours[f"lm_heads.{i}.weight"] = f"lm_heads.{i}.weight"
    if token_map is not None:  # full-vocabulary lm heads are cut to the map's rows, as vLLM does
        state = {
            key: value[token_map] if key in ours and "lm_heads" in key and len(value) == vocab
            else value
            for key, value in state.items()
        }  # fmt: skip
    names = "num_heads / num_hidden_layers / medusa_fc_bias / original_lm_head"
    return _loaded(medusa, state, ours, names)


def _token_map(value: torch.Tensor, size: int, vocab: int) -> torch.Tensor:
    ids = value.flatten()
    if ids.is_floating_point():
        ids = ids.round()
    ids = ids.to(torch.long)
    if len(ids) != size or ids.min() < 0 or ids.max() >= vocab or len(ids.unique()) != size:
        raise SpecdecError(
            f"the Medusa heads' token_map must list {size} distinct token ids below {vocab} "
            f"(truncated_vocab_size, vocab_size); it has {len(ids)}: export the heads again"
        )
    return ids


def _loaded(
    medusa: MedusaHeads, state: dict[str, torch.Tensor], ours: dict[str, str], names: str
) -> MedusaHeads:
    """`medusa` with `state` loaded through `ours` (stored name -> the module's), every stored
    weight read and every one the module needs present, each of its shape."""
    unread = sorted(set(state) - set(ours))
    if unread:
        raise SpecdecError(
            f"the Medusa heads hold weights their config.json ({names}) does not read: "
            f"{listed(unread)}; dropping them would draft wrongly, so fix the config or convert "
            "the heads"
        )
    missing = sorted(set(ours) - set(state))
    if missing:
        raise SpecdecError(
            f"the Medusa heads lack {listed(missing)}, which their config.json ({names}) "
            "needs; the config and the weights belong to different heads"
        )
    expected = medusa.state_dict()
    check_shapes(
        ((key, state[key], expected[name].shape) for key, name in ours.items()),
        "the Medusa heads'",
        "their config.json",
        "the config and the weights belong to different heads",
    )
    loaded = {name: state[key] for key, name in ours.items()}
    if medusa.token_map is not None:
        loaded["token_map"] = medusa.token_map
    stored = next((v.dtype for v in loaded.values() if v.is_floating_point()), torch.float32)
    medusa.to(stored)
    medusa.load_state_dict(loaded)
    return medusa.eval()


def read_state(directory: Path, spec: str) -> dict[str, torch.Tensor]:
    """The weights in `directory`: FasterDecoding's `medusa_lm_head.*` (safetensors first), else
    `model.safetensors`, `pytorch_model.bin` or their shards (checked whole first)."""
    named = [directory / name for name in MEDUSA_FILES if (directory / name).is_file()]
    files = named[:1] or check_weights(directory, spec)
    state: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            state.update(read_weight_file(path))
        except (
            OSError,
            RuntimeError,
            ValueError,
            TypeError,
            EOFError,
            SafetensorError,
            pickle.UnpicklingError,
        ):
            raise SpecdecError(
                f"{path.name} in {spec} is not a readable weight file (cut off or corrupt); "
                "download or copy the heads again"
            ) from None
    return state


def resolve(spec: str, progress: Progress | None = None) -> Path:
    """The directory of `spec`: `embedded` (resources/medusa), a local directory, or the hub
    snapshot of `owner/name[@revision]` holding config.json and the Medusa weights."""
    if spec == EMBEDDED:
        from specdec_core.resources import resource_path

        path = resource_path("medusa")
        if not (path / "config.json").is_file():
            raise SpecdecError(
                "this install has no bundled Medusa heads; pass --medusa DIR (train some with "
                "specdec train medusa) or a hub id"
            )
        return path
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if path.exists() or spec.startswith((".", "/", "~")) or not hub.is_hub_spec(spec):
        raise SpecdecError(f"Medusa heads not found: {spec}; give a head directory or a hub id")
    return _snapshot(spec, progress)


def _snapshot(spec: str, progress: Progress | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, revision = hub.parse_spec(spec)
    if progress is not None:
        progress(f"fetching Medusa heads {spec} (or taking them from the local cache)", 0.05)
    patterns = ["config.json", *MEDUSA_FILES, "model.safetensors*", "pytorch_model.bin*"]
    try:
        return Path(snapshot_download(repo, revision=revision, allow_patterns=patterns))
    except LocalEntryNotFoundError:
        raise SpecdecError(
            f"Medusa heads '{spec}' are not in the local Hugging Face cache and the hub cannot "
            "be reached; connect once to download them, or give a directory"
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as error:
        raise SpecdecError(f"cannot get Medusa heads '{spec}': {error}".splitlines()[0]) from None


def _stored(value: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    value = value.detach().to("cpu")
    if dtype is not None and value.is_floating_point():
        value = value.to(dtype)
    return value.contiguous()


def save_fasterdecoding(
    heads: MedusaHeads,
    directory: str | Path,
    base_model: str = "",
    card: dict | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write FasterDecoding's layout: config.json and medusa_lm_head.safetensors (in `dtype`,
    default the heads' own), plus the model card if given. Blocks without a bias get a zero
    one (the same arithmetic); a shared lm head is written once per head."""
    config = heads.config
    if heads.token_map is not None:
        raise SpecdecError(
            "these Medusa heads draft over a reduced vocabulary (a token map), which only "
            "vLLM's layout holds; write them with export_vllm"
        )
    state = {}
    for i in range(config.num_heads):
        for j, block in enumerate(heads.blocks[i]):
            state[f"medusa_head.{i}.{j}.linear.weight"] = _stored(block.linear.weight, dtype)
            bias = block.linear.bias
            if bias is None:
                bias = torch.zeros(config.hidden_size, dtype=block.linear.weight.dtype)
            state[f"medusa_head.{i}.{j}.linear.bias"] = _stored(bias, dtype)
        weight = heads.lm_head(i).weight
        state[f"medusa_head.{i}.{config.num_layers}.weight"] = _stored(weight, dtype)
    record = {
        "medusa_num_heads": config.num_heads,
        "medusa_num_layers": config.num_layers,
        "base_model_name_or_path": base_model,
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
    }
    return _write_folder(directory, MEDUSA_FILES[0], state, record, card)


def _write_folder(
    folder: str | Path,
    weights: str,
    state: dict[str, torch.Tensor],
    record: dict,
    card: dict | None,
) -> Path:
    """`state` as `weights` (safetensors), `record` as config.json and the card if given."""
    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / weights))
    (directory / "config.json").write_text(json.dumps(record, indent=2))
    if card is not None:
        (directory / CARD).write_text(json.dumps(card, indent=2))
    return directory


def export_vllm(
    heads: MedusaHeads,
    out_dir: str | Path,
    card: dict | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write vLLM's layout (config.json with model_type "medusa", model.safetensors) so that
    vLLM's Medusa loader takes it: a reduced draft vocabulary as `truncated_vocab_size` and
    `token_map`, a shared lm head as `original_lm_head`, biases as `medusa_fc_bias`."""
    config = heads.config
    state = {}
    for i in range(config.num_heads):
        for j, block in enumerate(heads.blocks[i]):
            state[f"blocks.{i}.layers.{j}.weight"] = _stored(block.linear.weight, dtype)
            if config.bias:
                state[f"blocks.{i}.layers.{j}.bias"] = _stored(block.linear.bias, dtype)
    for i, lm_head in enumerate(heads.lm_heads):
        state[f"lm_heads.{i}.weight"] = _stored(lm_head.weight, dtype)
    if heads.token_map is not None:
        state["token_map"] = _stored(heads.token_map, None)
    record = {
        "model_type": "medusa",
        "architectures": ["MedusaModel"],
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_heads": config.num_heads,
        "num_hidden_layers": config.num_layers,
        "truncated_vocab_size": config.rows,
        "medusa_fc_bias": config.bias,
        "original_lm_head": config.shared_lm_head,
    }
    return _write_folder(out_dir, "model.safetensors", state, record, card)
