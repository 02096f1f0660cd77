"""Read and write MLP speculators in the layout vLLM's `MLPSpeculator` loads (fms-extras').

A speculator directory holds `config.json` (model_type `mlp_speculator`: `n_predict`,
`emb_dim`, `inner_dim`, `vocab_size`, `top_k_tokens_per_head`, `n_candidates`, `tie_weights`,
`scale_input`; an absent key takes the default of vLLM's `MLPSpeculatorConfig`) and
`model.safetensors` or `pytorch_model.bin` (sharded or not) with the weights of head.py's
docstring. fms-extras' Hugging Face wrapper stores them under `speculator.`, which is dropped
as vLLM drops it. A tied checkpoint may also hold each stage's copy of a shared weight (a
saver that writes every module path): a copy equal to the shared weight is taken, one that
differs is refused, since vLLM would silently draft with the first. Every other stored weight
must be one the layout reads (an unknown key is refused with its name), none may be missing,
and each must have its shape. `emb_dim` must be the target's hidden size and `vocab_size` its
vocabulary.

`export_vllm` writes a speculator as vLLM loads it (its weights only, once each, in their
dtype) and the `--speculative-config` JSON that serves it (method "mlp_speculator"). vLLM's
registry names the class `MLPSpeculatorPreTrainedModel`; releases whose V1 engine has no
MLP-speculator proposer list it commented out, so serving it needs a vLLM that still drafts
with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from specdec_core.control import Progress, StopFlag
from specdec_core.errors import SpecdecError
from specdec_core.heads.mlp_speculator.head import MODEL_TYPE, MLPSpeculator, SpeculatorConfig
from specdec_core.models.loading import LoadedModel, drafting_dtype
from specdec_core.models.model_folder import FolderKind, check_spec, read_config, resolve
from specdec_core.models.prepacked_linear import prepack
from specdec_core.models.weights_file import check_shapes, listed, read_weights

CONFIG, WEIGHTS, CARD = "config.json", "model.safetensors", "specdec_card.json"
BUNDLED = "mlp-speculator"  # resources/mlp-speculator: `embedded`
PREFIX = "speculator."  # fms-extras' Hugging Face wrapper's module name
# vLLM's MLPSpeculatorConfig defaults, for keys a config.json leaves out
DEFAULTS = {"vocab_size": 32000, "emb_dim": 4096, "inner_dim": 0, "n_predict": 3}


def config_from_json(values: dict, spec: str = "the MLP speculator") -> SpeculatorConfig:
    """A config.json's values as vLLM reads them; a config of another model type is refused."""
    declared = values.get("model_type")
    if declared is not None and declared != MODEL_TYPE:
        raise SpecdecError(
            f"{spec} is a '{declared}' model, not an MLP speculator (model_type "
            f"'{MODEL_TYPE}'); pass a speculator directory to --speculator"
        )
    try:
        read = {key: int(values.get(key, default)) for key, default in DEFAULTS.items()}
        top_k = tuple(int(k) for k in values.get("top_k_tokens_per_head") or [5, 4, 3])
        n_candidates = int(values.get("n_candidates", 5))
    except (TypeError, ValueError) as exc:
        raise SpecdecError(
            f"{spec}'s config.json has a value that is not a whole number ({exc}); check "
            "emb_dim, inner_dim, vocab_size, n_predict and top_k_tokens_per_head"
        ) from None
    return SpeculatorConfig(
        **read,
        tie_weights=bool(values.get("tie_weights", False)),
        scale_input=bool(values.get("scale_input", False)),
        top_k_tokens_per_head=top_k,
        n_candidates=n_candidates,
    )


def _shared_name(key: str, config: SpeculatorConfig) -> str | None:
    """The stored name of the shared weight `key` copies in a tied layout (None: not a copy)."""
    parts = key.split(".")
    if len(parts) != 3 or not parts[1].isdigit() or int(parts[1]) >= config.n_predict:
        return None
    role, stage, name = parts[0], int(parts[1]), parts[2]
    if role in ("emb", "head", "ln") and stage > 0:
        return f"{role}.0.{name}"
    if role == "proj" and stage > 1:
        return f"proj.1.{name}"
    return None


def speculator_from_state(
    config: SpeculatorConfig,
    state: dict[str, torch.Tensor],
    spec: str = "the MLP speculator",
    hint: str = "",
) -> MLPSpeculator:
    """Build a speculator from a config and its stored weights, each checked (module
    docstring); `hint` ends the message for missing weights."""
    state = {key.removeprefix(PREFIX): value for key, value in state.items()}
    model = MLPSpeculator(config)
    expected = {name: param.shape for name, param in model.weights().items()}
    unread = sorted(key for key in state if key not in expected)
    if config.tie_weights:  # a stage's copy of a shared weight is taken if it is equal
        copies, differing = [], []
        for key in unread:
            shared = _shared_name(key, config)
            if shared is not None and shared in state:
                same = torch.equal(state[key], state[shared])
                (copies if same else differing).append(key)
        if differing:
            raise SpecdecError(
                f"{spec} ties its stages' weights (tie_weights) but stores {listed(differing)} "
                "unlike the first stage's; set tie_weights false in its config.json if it was "
                "trained untied"
            )
        unread = [key for key in unread if key not in copies]
    if unread:
        raise SpecdecError(
            f"{spec} holds weights the MLP speculator layout does not read: {listed(unread)}; "
            "it is another kind of model, or its config.json (n_predict, tie_weights, "
            "scale_input) belongs to other weights"
        )
    missing = sorted(key for key in expected if key not in state)
    if missing:
        raise SpecdecError(
            f"{spec} lacks {listed(missing)}, which its config.json (n_predict "
            f"{config.n_predict}, tie_weights {str(config.tie_weights).lower()}) needs; the "
            f"config and the weights belong to different speculators{hint}"
        )
    check_shapes(
        ((key, state[key], shape) for key, shape in expected.items()),
        f"{spec}'s",
        "its config.json",
        "the config and the weights belong to different speculators",
    )
    stored = next(iter(state.values())).dtype
    model.to(stored if stored.is_floating_point else torch.float32)
    model.load_state_dict({key: state[key] for key in expected}, strict=False)
    return model.eval()


def check_fits(config: SpeculatorConfig, hidden: int, vocab: int, spec: str) -> None:
    """Refuse a speculator trained for another target (one line each)."""
    if config.emb_dim != hidden:
        raise SpecdecError(
            f"{spec} reads hidden states of width {config.emb_dim} (emb_dim) but the target's "
            f"are {hidden} wide; use a speculator trained for this target (specdec train "
            "mlp-speculator)"
        )
    if config.vocab_size != vocab:
        raise SpecdecError(
            f"{spec} drafts over {config.vocab_size} tokens (vocab_size) but the target has "
            f"{vocab}; use a speculator trained for this target"
        )


def load_speculator(
    spec: str,
    target: LoadedModel,
    progress: Progress | None = None,
    stop: StopFlag | None = None,
    dtype: torch.dtype | None = None,
) -> MLPSpeculator:
    """`--speculator SPEC`: `embedded` (the bundled one), a directory or a hub id, checked
    against `target` and placed on its device in `dtype` (default
    `models.drafting_dtype(target)`), its linears prepacked on a CPU."""
    directory, name = _resolve(spec, progress, stop)
    values = _read_json(directory, name)
    config = config_from_json(values, name)
    check_fits(config, target.model.config.hidden_size, target.vocab_size, name)
    state = read_weights(directory, name)
    speculator = speculator_from_state(config, state, name, _tie_hint(values))
    speculator.to(device=target.device, dtype=dtype or drafting_dtype(target)).eval()
    prepack(speculator)  # on a CPU: oneDNN-packed linears (prepacked_linear.py)
    return speculator


def read_speculator(spec: str, progress: Progress | None = None) -> MLPSpeculator:
    """A speculator as it is stored (its dtype, on the CPU), bound to no target."""
    directory, name = _resolve(spec, progress, None)
    values = _read_json(directory, name)
    config = config_from_json(values, name)
    return speculator_from_state(config, read_weights(directory, name), name, _tie_hint(values))


def _tie_hint(values: dict) -> str:
    """fms-extras' own name for tied weights, which vLLM does not read."""
    if values.get("tie_wts") and "tie_weights" not in values:
        return (
            "; its config.json sets tie_wts (fms-extras' name), which vLLM does not read: "
            "set tie_weights true"
        )
    return ""


def save_speculator(
    speculator: MLPSpeculator,
    directory: str | Path,
    card: dict | None = None,
    dtype: torch.dtype | None = torch.bfloat16,
) -> Path:
    """config.json + model.safetensors (each weight once, in `dtype`; None: as it is), plus
    the model card when given."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {**speculator.config.to_json()}
    weights = {
        key: value.detach().to("cpu", dtype or value.dtype).contiguous()
        for key, value in speculator.weights().items()
    }
    config["torch_dtype"] = str(next(iter(weights.values())).dtype).removeprefix("torch.")
    (directory / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, str(directory / WEIGHTS))
    if card is not None:
        (directory / CARD).write_text(json.dumps(card, indent=2))
    return directory


@dataclass(frozen=True)
class VllmExport:
    """A speculator written for vLLM and the setting that serves it."""

    directory: Path
    files: tuple[str, ...]
    speculative_config: dict  # the --speculative-config JSON object
    notes: list[str] = field(default_factory=list)

    def argument(self) -> str:
        """`--speculative-config` as one JSON string."""
        return json.dumps(self.speculative_config, separators=(",", ":"))

    def to_record(self) -> dict:
        return {
            "engine": "vllm",
            "method": "mlp_speculator",
            "directory": str(self.directory),
            "files": list(self.files),
            "speculative_config": self.speculative_config,
            "notes": list(self.notes),
        }


def export_vllm(speculator: MLPSpeculator, out_dir: str | Path, k: int | None = None) -> VllmExport:
    """Write `speculator` into `out_dir` as vLLM's loader takes it (config.json,
    model.safetensors, weights in their dtype) -> the export and its `--speculative-config`
    (method "mlp_speculator", `k` draft tokens, at most and by default n_predict)."""
    n_predict = speculator.n_predict
    if k is not None and not 1 <= k <= n_predict:
        raise SpecdecError(
            f"the speculator drafts at most {n_predict} tokens (n_predict); give --k 1 to "
            f"{n_predict}"
        )
    directory = save_speculator(speculator, out_dir, dtype=None)
    (directory / CARD).unlink(missing_ok=True)  # only what vLLM reads
    steps = k or n_predict
    setting = {"method": "mlp_speculator", "model": str(directory), "num_speculative_tokens": steps}
    notes = [
        f"vllm serve TARGET --speculative-config '{json.dumps(setting)}'",
        "the target must be the model the speculator was trained on (emb_dim "
        f"{speculator.config.emb_dim}, vocab_size {speculator.config.vocab_size})",
        "vLLM drafts with MLPSpeculatorPreTrainedModel only in releases whose registry lists "
        "it uncommented (the V0 engine); copy the folder to the serving machine",
    ]
    return VllmExport(directory, (CONFIG, WEIGHTS), setting, notes)


KIND = FolderKind("MLP speculator", "speculator", "--speculator", BUNDLED,
                  "specdec train mlp-speculator")  # fmt: skip


def _read_json(directory: Path, spec: str) -> dict:
    return read_config(directory, spec, KIND)


def check_speculator_spec(spec: str) -> None:
    """Refuse a `--speculator` that is neither `embedded`, a directory nor a hub id (before
    a model loads)."""
    check_spec(spec, KIND)


def _resolve(spec: str, progress: Progress | None, stop: StopFlag | None) -> tuple[Path, str]:
    """(the directory, the name errors use) of `spec`: the bundled speculator, a directory,
    or the hub snapshot of `owner/name[@revision]` (config.json checked before any weight)."""
    return resolve(spec, KIND, lambda values: config_from_json(values, spec), progress, stop)
