"""`specdec export --head-out DIR`: what a method drafts with, rewritten as vLLM or SGLang loads it.

`export_for_method` dispatches on the model the method reads (`export.SERVING[method].needs`):
an EAGLE head (`export_head`, below), Medusa heads (`export_medusa`) or an MLP speculator
(`export_speculator`); the last two in vLLM's layout through their families' own writers
(`specdec_core.heads.medusa.formats.export_vllm`,
`specdec_core.heads.mlp_speculator.formats.export_vllm`),
and refused for SGLang, which serves neither (the line says why). Medusa heads are read in
either published layout (FasterDecoding's `medusa_head.*` is what vLLM cannot load as it
stands) and written as `blocks.*` / `lm_heads.*` (+ `token_map`); a speculator is written
with each weight once in its dtype. Reading the folder back with the family's own reader gives
the same weights (tests/test_export_families.py).

EAGLE heads:

What each engine's loader accepts, with the source lines that decide it, is in
tests/fixtures/eagle-heads/notes/ENGINE_LOADERS.md ("Export recipes"); the key layouts are
notes/KEY_LAYOUTS.md §A (EAGLE-1) and §B (EAGLE-3). In short:

- P-EAGLE (`--method peagle`, vLLM only): speculators' peagle layout, written by
  `heads.eagle.peagle.save_peagle` (`export_peagle`).
- EAGLE-3 layout, both engines (vLLM and SGLang `llama_eagle3.py`): one directory.
  config.json: `LlamaForCausalLMEagle3`, `vocab_size` V, `draft_vocab_size` Vd, `bias` false,
  `tie_word_embeddings` false (SGLang would make lm_head the embedding), the head's flags
  written out whole (`fc_norm`, `norm_output`, ...), the target layers it reads, when not the
  default, both at the top and in `eagle_config` (vLLM reads only the latter). Weights: `fc`,
  `midlayer.*`, `norm`, `lm_head` [Vd, h], `d2t` int64 [Vd], `t2d` bool [V]; no embedding.
- EAGLE-1 layout, SGLang (`LlamaForCausalLMEagle`, llama_eagle.py): `fc` always has a bias
  (written as zeros when the head has none: the loader keeps nn.Linear's random initial bias
  otherwise) and `layers.*`; no lm_head, d2t or t2d (ignored there). A reduced draft vocabulary
  travels as the token-map file `layouts.TOKEN_MAP` for `--speculative-token-map`: SGLang then
  drafts with the target's lm_head rows at those ids, exactly the rows the head drafts with here.
- EAGLE-1 layout, vLLM (`EagleLlamaForCausalLM`, llama_eagle.py): `fc` has no bias, there is
  no draft-vocabulary path (it drafts with the target's full lm_head) and lm_head / d2t / t2d
  in the file break the load. A head with a non-zero fc bias or a reduced vocabulary is
  refused, naming what cannot be carried and the training option that gives a head vLLM loads
  (an EAGLE-3 head); a bias-free full-vocabulary head is written as `fc.weight` + `layers.*`.

Floats keep the head's stored dtype; config.json also gives `rope_theta` / `rope_scaling` and
`torch_dtype`, which engines on transformers 4 read (transformers 5 writes only
`rope_parameters` and `dtype`, kept too). Loading the directory back here (`load_head`, which
reads the token map) gives the head that was exported: tests/test_head_export.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.files import save_atomic, save_tensors_atomic, write_atomic
from specdec_core.heads.eagle.formats import read_head, variant_config
from specdec_core.heads.eagle.head import EagleHead
from specdec_core.heads.eagle.layouts import TOKEN_MAP
from specdec_core.resources import bundled_head, names_bundled_head, resource_path
from specdec_core.serving.export import ENGINES, SERVING, serving

CONFIG, WEIGHTS = "config.json", "model.safetensors"
WRITTEN = (CONFIG, WEIGHTS, TOKEN_MAP)  # everything an export may put in its directory
WRITERS = ("head", "medusa", "speculator")  # the model options --head-out writes

# the config.json keys a Llama decoder layer reads, kept from the head's config; the rest (a
# publisher's own fields, the local path it was read from) is left out
LLAMA_KEYS = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
    "max_position_embeddings", "initializer_range", "rms_norm_eps", "use_cache",
    "pad_token_id", "bos_token_id", "eos_token_id", "attention_bias", "attention_dropout",
    "mlp_bias", "pretraining_tp", "transformers_version",
)  # fmt: skip
ARCHITECTURE = {
    ("eagle3", "vllm"): "LlamaForCausalLMEagle3",
    ("eagle3", "sglang"): "LlamaForCausalLMEagle3",
    ("eagle1", "sglang"): "LlamaForCausalLMEagle",
    ("eagle1", "vllm"): "LlamaForCausalLM",  # vLLM's EAGLEConfig makes it EagleLlamaForCausalLM
}


@dataclass(frozen=True)
class HeadExport:
    """A head directory written for one engine."""

    engine: str
    layout: str  # "eagle1", "eagle3", "medusa" or "mlp_speculator"
    directory: Path
    files: tuple[str, ...]  # the names written in `directory`
    token_map: Path | None  # SGLang's --speculative-token-map file, for a reduced vocabulary
    notes: list[str] = field(default_factory=list)

    def to_record(self) -> dict:
        return {
            "engine": self.engine,
            "layout": self.layout,
            "directory": str(self.directory),
            "files": list(self.files),
            "token_map": str(self.token_map) if self.token_map else None,
            "notes": list(self.notes),
        }


def export_for_method(
    engine: str, method: str, spec: str, out: str | Path, config: DecodeConfig | None = None
) -> HeadExport:
    """Write what `method` drafts with (`spec`: `embedded`, a directory or a hub id) into `out`
    as `engine` loads it; `config.k` bounds an MLP speculator's chain. Raises `SpecdecError`
    (one line) for a method with nothing to write or an engine that cannot serve it."""
    entry = SERVING.get(method)
    needs = entry.needs if entry is not None else None
    if needs not in WRITERS:
        writers = ", ".join(name for name, found in SERVING.items() if found.needs in WRITERS)
        raise SpecdecError(
            f"--head-out writes an EAGLE head, Medusa heads or an MLP speculator, and method "
            f"'{method}' drafts with none; use it with --method {writers}"
        )
    serving(engine, method)  # an engine without the method refuses it here, in one line
    if needs == "medusa":
        return export_medusa(spec, out)
    if needs == "speculator":
        return export_speculator(spec, out, config.k if config is not None else None)
    if method == "peagle":
        return export_peagle(spec, out, config.k if config is not None else None)
    return export_head(engine, spec, out)


def export_peagle(spec: str, out: str | Path, k: int | None = None) -> HeadExport:
    """P-EAGLE head `spec` (either layout heads/eagle/peagle.py reads) written into `out` in
    speculators' peagle layout, as vLLM loads it with `parallel_drafting` (its
    `speculative_tokens` = `k`, else the head's own or 4)."""
    from specdec_core.heads.eagle.peagle import PEagleHead, save_peagle

    source = str(bundled_head(spec)) if names_bundled_head(spec) else spec
    head = read_head(source)
    if not isinstance(head, PEagleHead):
        raise SpecdecError(
            f"method 'peagle' drafts with a P-EAGLE head (an EAGLE-3 head with mask_hidden) and "
            f"{spec} is not one; pass --head with a P-EAGLE head (speculators trains one: "
            "--speculator-type peagle)"
        )
    stored = _stored_config(Path(source).expanduser())
    methods = (stored.get("speculators_config") or {}).get("proposal_methods") or [{}]
    verifier = (stored.get("speculators_config") or {}).get("verifier") or {}
    tokens = k or methods[0].get("speculative_tokens") or 4
    directory = _empty_directory(Path(out).expanduser(), Path(source).expanduser())
    save_peagle(
        head, directory, tokens, verifier.get("name_or_path"), verifier.get("architectures") or []
    )
    files = _written(directory, (CONFIG, WEIGHTS))
    notes = [
        f"wrote the P-EAGLE head ({head.decoder_layers} decoder layer(s), mask token "
        f"{head.mask_token_id}) in speculators' peagle layout; vLLM reads it as eagle3 with "
        "parallel_drafting (mask_token_id as pard_token, mask_hidden through fc)",
        f"copy {directory} to the serving machine and point the command's paths there",
    ]
    return HeadExport("vllm", "peagle", directory, files, None, notes)


def _stored_config(directory: Path) -> dict:
    """config.json of a local head directory ({} where there is none)."""
    path = directory / CONFIG
    return json.loads(path.read_text()) if path.is_file() else {}


def export_medusa(spec: str, out: str | Path) -> HeadExport:
    """Medusa heads `spec` (either published layout) written into `out` in vLLM's layout."""
    from specdec_core.heads.medusa.formats import export_vllm, read_medusa, resolve

    source = resolve(spec)
    heads = read_medusa(spec)
    directory = _empty_directory(Path(out).expanduser(), source)
    export_vllm(heads, directory)
    files = _written(directory, (CONFIG, WEIGHTS))
    config = heads.config
    notes = [
        f"wrote {config.num_heads} Medusa heads in vLLM's layout (model_type medusa, blocks.* / "
        f"lm_heads.*{', token_map' if heads.token_map is not None else ''}); vLLM builds "
        "num_speculative_tokens of them and leaves the others unread",
        f"copy {directory} to the serving machine and point the command's paths there",
    ]
    return HeadExport("vllm", "medusa", directory, files, None, notes)


def export_speculator(spec: str, out: str | Path, k: int | None = None) -> HeadExport:
    """MLP speculator `spec` written into `out` as vLLM loads it (at most n_predict drafts)."""
    from specdec_core.heads.mlp_speculator.formats import (
        BUNDLED,
        check_speculator_spec,
        export_vllm,
        read_speculator,
    )

    check_speculator_spec(spec)
    source = resource_path(BUNDLED) if spec == "embedded" else Path(spec).expanduser()
    speculator = read_speculator(spec)
    n_predict = speculator.n_predict
    if k is not None and not 1 <= k <= n_predict:  # before the folder is made
        raise SpecdecError(
            f"the speculator drafts at most {n_predict} tokens (n_predict); give --k 1 to "
            f"{n_predict}"
        )
    directory = _empty_directory(Path(out).expanduser(), source)
    written = export_vllm(speculator, directory, k)
    files = _written(directory, written.files)
    notes = [
        f"wrote the MLP speculator ({speculator.n_predict} stages, each weight once) as vLLM's "
        "MLPSpeculator loads it",
        f"copy {directory} to the serving machine and point the command's paths there",
    ]
    return HeadExport("vllm", "mlp_speculator", directory, files, None, notes)


def _written(directory: Path, files: tuple[str, ...]) -> tuple[str, ...]:
    """`files`, with what an earlier export into `directory` left and this one did not write
    removed."""
    for stale in set(WRITTEN) - set(files):
        (directory / stale).unlink(missing_ok=True)
    return tuple(files)


def export_head(engine: str, spec: str, out: str | Path) -> HeadExport:
    """Write the head `spec` (`embedded`, a directory or a hub id) into `out` as `engine`
    loads it as it stands. Raises `SpecdecError` for what the engine cannot carry."""
    if engine not in ENGINES:
        raise SpecdecError(f"unknown engine '{engine}'; choose one of: {', '.join(ENGINES)}")
    source = str(bundled_head(spec)) if names_bundled_head(spec) else spec
    head = read_head(source)
    notes: list[str] = []
    state = {key: value.detach().contiguous() for key, value in head.state_dict().items()}
    config = _config(head, engine, state["fc.weight"].dtype)
    token_ids = None
    if head.kind == "eagle3":
        config.update(draft_vocab_size=head.draft_vocab, **variant_config(head.variant))
        if head.variant.aux_layers:  # vLLM reads them only here (vllm issue #54526)
            aux = {"eagle_aux_hidden_state_layer_ids": list(head.variant.aux_layers)}
            config["eagle_config"] = aux
        notes += _eagle3_notes(head, engine)
    else:
        state.pop("d2t", None)
        state.pop("t2d", None)
        if engine == "sglang":
            token_ids = head.draft_ids()
            notes += _sglang_eagle1(head, state)
        else:
            notes += _vllm_eagle1(head, state)
        config["bias"] = "fc.bias" in state
    directory = _empty_directory(Path(out).expanduser(), Path(source).expanduser())
    files = [CONFIG, WEIGHTS]
    write_atomic(directory / CONFIG, json.dumps(config, indent=2, default=str) + "\n")
    save_tensors_atomic(directory / WEIGHTS, state)
    token_map = None
    if token_ids is not None:
        token_map = directory / TOKEN_MAP
        save_atomic(token_map, token_ids.tolist())  # as SGLang's load_token_map reads it
        files.append(TOKEN_MAP)
    for stale in set(WRITTEN) - set(files):  # left by an earlier export into the same folder
        (directory / stale).unlink(missing_ok=True)
    notes.append(f"copy {directory} to the serving machine and point the command's paths there")
    return HeadExport(engine, head.kind, directory, tuple(files), token_map, notes)


def _sglang_eagle1(head: EagleHead, state: dict[str, torch.Tensor]) -> list[str]:
    notes = []
    if "fc.bias" not in state:
        weight = state["fc.weight"]
        state["fc.bias"] = torch.zeros(weight.shape[0], dtype=weight.dtype)
        notes.append(
            "fc.bias is written as zeros: SGLang's EAGLE-1 fc always has a bias and keeps its "
            "random initial one when the file has none"
        )
    if head.draft_vocab:
        notes.append(
            f"the head's {head.draft_vocab}-token draft vocabulary is the token map {TOKEN_MAP}: "
            "SGLang drafts with the target's lm_head rows at those ids, as the head does here, "
            "only when given --speculative-token-map (the printed command does)"
        )
    return notes


def _vllm_eagle1(head: EagleHead, state: dict[str, torch.Tensor]) -> list[str]:
    bias = state.get("fc.bias")
    lost = []
    if bias is not None and bool(bias.any()):
        lost.append("an fc bias")
    if head.draft_vocab:
        lost.append(f"a draft vocabulary of {head.draft_vocab} tokens")
    if lost:
        raise SpecdecError(
            "vLLM cannot serve this EAGLE-1 head as it stands: its EAGLE-1 loader "
            "(llama_eagle.py) has an fc without bias and drafts over the target's full "
            f"vocabulary, and this head has {' and '.join(lost)}; export it with --engine "
            "sglang, or train an EAGLE-3 head, which vLLM loads: specdec train eagle --arch "
            "eagle3 --out DIR"
        )
    if bias is None:
        return []
    del state["fc.bias"]
    return ["the head's fc.bias is all zeros and is left out: vLLM's EAGLE-1 fc has no bias"]


def _eagle3_notes(head: EagleHead, engine: str) -> list[str]:
    notes = []
    if engine == "sglang" and head.variant.norm_before_residual:
        notes.append(
            "the head takes its residual after hidden_norm (norm_before_residual), which "
            "SGLang's llama_eagle3.py, as read for these notes, does not read: if yours does "
            "not either, it drafts wrongly there (output stays lossless, τ drops); vLLM reads it"
        )
    if head.variant.window:
        notes.append(
            f"the head attends over a sliding window of {head.variant.window} positions "
            "(layer_types, sliding_window in config.json): check that your engine applies it"
        )
    return notes


def _config(head: EagleHead, engine: str, dtype: torch.dtype) -> dict:
    """config.json for `engine`: the Llama keys of the head's config, the RoPE in both the
    transformers 4 and 5 spellings, and the layout's own keys."""
    values = head.config.to_dict()
    rope = dict(values.get("rope_parameters") or {})
    scaling = {key: value for key, value in rope.items() if key != "rope_theta"}
    name = str(dtype).removeprefix("torch.")
    config = {"architectures": [ARCHITECTURE[head.kind, engine]]}
    config.update({key: values[key] for key in LLAMA_KEYS if key in values})
    config.update(
        model_type="llama",
        num_hidden_layers=len(head.layers) if head.kind == "eagle1" else 1,
        tie_word_embeddings=False,
        bias=False,
        rope_theta=rope.get("rope_theta", 10000.0),
        rope_scaling=scaling if scaling.get("rope_type", "default") != "default" else None,
        torch_dtype=name,
        dtype=name,
    )
    if rope:
        config["rope_parameters"] = rope
    return config


def _empty_directory(directory: Path, source: Path) -> Path:
    """`directory`, created if needed; refused when it is the head's own (`source`) or holds
    files an export does not write (it would mix another checkpoint's weights into the head)."""
    if directory.exists() and not directory.is_dir():
        raise SpecdecError(f"{directory} is a file; give a new or empty directory for the head")
    if source.is_dir() and directory.exists() and directory.samefile(source):
        raise SpecdecError(
            f"{directory} is the head's own directory, which the export would overwrite; give "
            "a new or empty directory"
        )
    directory.mkdir(parents=True, exist_ok=True)
    foreign = sorted(path.name for path in directory.iterdir() if path.name not in WRITTEN)
    if foreign:
        raise SpecdecError(
            f"{directory} already holds {', '.join(foreign[:4])}; give a new or empty "
            "directory for the exported head"
        )
    return directory
