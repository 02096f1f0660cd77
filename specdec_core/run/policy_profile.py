"""Policy profiles: a lossy policy's parameter per kind of request, and how to tell the kind.

The right threshold for code is not the right one for chat: a code prompt's continuations are
few and sharp, a chat answer has many equally good wordings. A profile (made by `specdec
tune-policy`, tuning/policy_tuning.py) holds, per kind of request, the loosest value of one
parameter whose distance from the target's distribution stayed at most D, or the lossless rule
for a kind no value kept within D.

The profile carries its own classifier: each kind's centroid of `prompt_feature`, the mean of
the target's input embeddings over the prompt's tokens (no chat template: the words alone),
and a new prompt is of the kind whose centroid is nearest in cosine similarity. A run under a
profile (`--policy-profile FILE`, the window's profile) picks the kind from its prompt, then the
parameter (`PolicyProfile.config_for`); `run/start.py` applies it for every caller.

The file (JSON, `format` "specdec-policy-profile"):

    {"format": ..., "version": 1, "policy": "threshold", "param": "tau", "params": {...},
     "max_distance": 0.05, "method": "ngram", "target": "...", "temperature": 0.0, "k": 4,
     "max_new_tokens": 64, "kinds": [{"kind": "code", "value": 0.1, "total_variation": 0.04,
     "kl": null, "prompts": 10, "trials": [[0.3, 0.0, 0.0], [0.1, 0.04, null], ...],
     "centroid": [...]}, ...]}

`value` null: the lossless rule for that kind. `trials`: every (value, TV, KL) measured,
strictest first. Every value is measured and the loosest within D is kept: the distance need
not fall as the rule tightens (`search`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic

if TYPE_CHECKING:
    from specdec_core.models.loading import LoadedModel

POLICY_KIND = "policy_kind"  # the Started and summary config key of the kind a profile picked
FORMAT = "specdec-policy-profile"
VERSION = 1
GENERAL = "general"  # the kind of a prompt whose file names none


@dataclass(frozen=True)
class KindSetting:
    """One kind of request: the value chosen, what it measured, and the kind's centroid."""

    kind: str
    value: float | None  # None: no value stays within the distance; the lossless rule
    total_variation: float | None  # measured at `value` (0 for the lossless rule)
    kl: float | None  # None where infinite (T = 0) or not measured
    prompts: int
    centroid: tuple[float, ...]
    trials: tuple[tuple[float, float | None, float | None], ...] = ()  # (value, TV, KL)

    def to_record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "value": self.value,
            "total_variation": self.total_variation,
            "kl": self.kl,
            "prompts": self.prompts,
            "trials": [list(trial) for trial in self.trials],
            "centroid": list(self.centroid),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> KindSetting:
        return cls(
            kind=str(record["kind"]),
            value=None if record["value"] is None else float(record["value"]),
            total_variation=record.get("total_variation"),
            kl=record.get("kl"),
            prompts=int(record.get("prompts", 0)),
            centroid=tuple(float(x) for x in record["centroid"]),
            trials=tuple(tuple(trial) for trial in record.get("trials", ())),
        )


@dataclass(frozen=True)
class PolicyProfile:
    """A policy with one parameter chosen per kind of request, and the kinds' classifier."""

    policy: str
    param: str
    max_distance: float
    kinds: tuple[KindSetting, ...]
    params: dict[str, float] = field(default_factory=dict)  # the policy's other parameters
    method: str = ""  # what it was tuned with (the distance depends on the drafter)
    target: str = ""
    temperature: float = 0.0
    k: int = 0
    max_new_tokens: int = 0

    def classify(self, feature: Sequence[float]) -> KindSetting:
        """The kind whose centroid is nearest `feature` in cosine similarity."""
        sizes = {len(kind.centroid) for kind in self.kinds}
        if sizes != {len(feature)}:
            raise SpecdecError(
                f"the policy profile was tuned on a target of hidden size {sizes.pop()}, this "
                f"one has {len(feature)}; tune it again for this target (specdec tune-policy)"
            )
        return max(self.kinds, key=lambda kind: _cosine(feature, kind.centroid))

    def config_for(self, kind: KindSetting, config: DecodeConfig) -> DecodeConfig:
        """`config` with the kind's policy: the chosen value, or the lossless rule."""
        if kind.value is None:
            return replace(config, policy="lossless", policy_params={})
        params = {**self.params, self.param: kind.value}
        return replace(config, policy=self.policy, policy_params=params)

    def to_record(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "policy": self.policy,
            "param": self.param,
            "params": dict(self.params),
            "max_distance": self.max_distance,
            "method": self.method,
            "target": self.target,
            "temperature": self.temperature,
            "k": self.k,
            "max_new_tokens": self.max_new_tokens,
            "kinds": [kind.to_record() for kind in self.kinds],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PolicyProfile:
        return cls(
            policy=str(record["policy"]),
            param=str(record["param"]),
            max_distance=float(record["max_distance"]),
            kinds=tuple(KindSetting.from_record(kind) for kind in record["kinds"]),
            params={str(k): float(v) for k, v in record.get("params", {}).items()},
            method=str(record.get("method", "")),
            target=str(record.get("target", "")),
            temperature=float(record.get("temperature", 0.0)),
            k=int(record.get("k", 0)),
            max_new_tokens=int(record.get("max_new_tokens", 0)),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        write_atomic(path, json.dumps(self.to_record(), indent=2))
        return path


def load_profile(path: str | Path) -> PolicyProfile:
    """A profile `tune-policy` wrote; a clear error for anything else."""
    path = Path(path)
    if not path.is_file():
        raise SpecdecError(f"policy profile not found: {path}; write one with specdec tune-policy")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SpecdecError(f"{path} is not a policy profile (not JSON)") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise SpecdecError(f"{path} is not a policy profile; write one with specdec tune-policy")
    if record.get("version", 0) > VERSION:
        raise SpecdecError(f"{path} was written by a newer specdec; update it to read this file")
    try:
        profile = PolicyProfile.from_record(record)
    except (KeyError, TypeError, ValueError):
        raise SpecdecError(f"{path}: a policy profile with missing fields; tune it again") from None
    if not profile.kinds:
        raise SpecdecError(f"{path}: the policy profile has no kinds; tune it again")
    return profile


def profiled_config(
    profile: PolicyProfile | None,
    method: str,
    target: LoadedModel,
    text: str,
    config: DecodeConfig,
) -> tuple[DecodeConfig, str | None]:
    """(`config` with the policy `profile` gives the kind of prompt `text`, that kind): the
    kind whose centroid is nearest the target's mean input embedding of the words of `text`
    (a chat turn: its user message). Without a profile, or for `ar` and transformers'
    baselines (they verify nothing, so no policy applies: a reference stays lossless),
    `config` as it is and no kind. A profile tuned on a target of another hidden size is
    refused in one line (`PolicyProfile.classify`)."""
    from specdec_core.run.method_kinds import HF_METHODS

    if profile is None or method == "ar" or method in HF_METHODS:
        return config, None
    kind = profile.classify(prompt_feature(target, text))
    return profile.config_for(kind, config), kind.kind


def prompt_feature(target: LoadedModel, text: str) -> tuple[float, ...]:
    """The mean of the target's input embeddings over the words of `text` (no template)."""
    import torch

    ids = target.tokenizer(text, add_special_tokens=False)["input_ids"] or [0]
    with torch.inference_mode():
        table = target.model.get_input_embeddings()
        rows = table(torch.tensor(ids, device=table.weight.device))  # [n, H]
    return tuple(rows.float().mean(0).cpu().tolist())


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0
