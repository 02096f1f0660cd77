"""Policy profiles: a lossy policy's parameter per kind of request, and how to tell the kind.

The right threshold for code is not the right one for chat: a code prompt's continuations are
few and sharp, a chat answer has many equally good wordings. `specdec tune-policy` measures,
per kind of request in a prompt file (its `category` or `kind` field; an empty one is
`general`), the distance of the policy's output from the target's distribution
(`measure.run_distance`: total variation per token) for each value of one parameter (a lower
value is looser), and keeps the loosest value whose distance stays at most D (`tune`). A kind
for which no value stays within D gets the lossless rule.

The profile carries its own classifier: each kind's centroid of `prompt_feature`, the mean of
the target's input embeddings over the prompt's tokens (no chat template: the words alone),
and a new prompt is of the kind whose centroid is nearest in cosine similarity. `--policy-profile
FILE` (bench) picks the kind from each prompt, then the parameter (`PolicyProfile.config_for`).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec_core.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic
from specdec_core.run_distance import RunDistance

if TYPE_CHECKING:
    from specdec_core.models import LoadedModel

FORMAT = "specdec-policy-profile"
VERSION = 1
GENERAL = "general"  # the kind of a prompt whose file names none


@dataclass(frozen=True)
class Tunable:
    """The parameter `tune-policy` varies for a policy, and its values, strictest first."""

    param: str
    values: tuple[float, ...]  # strictest (nearest lossless) to loosest


TUNABLE = {
    "threshold": Tunable("tau", (0.5, 0.3, 0.2, 0.1, 0.05, 0.03, 0.01)),
    "cosine": Tunable("tau", (0.9, 0.7, 0.5, 0.3, 0.2, 0.1)),
    "typical": Tunable("epsilon", (0.5, 0.3, 0.2, 0.09, 0.05, 0.02)),
    "ngram": Tunable("tau", (0.9, 0.75, 0.5, 0.25)),
    "hybrid": Tunable("logit_tau", (0.5, 0.3, 0.1, 0.05, 0.02)),
    "ensemble": Tunable("w", (0.95, 0.9, 0.8, 0.65, 0.5)),
    "fly": Tunable("entropy_threshold", (1.0, 0.6, 0.45, 0.3, 0.2, 0.1)),
}


def tunable(policy: str, param: str | None = None, values: Sequence[float] = ()) -> Tunable:
    """The parameter and values to try for `policy`: its defaults, or `param` / `values` as
    given (`values` in any order; sorted strictest first as the default's are)."""
    default = TUNABLE.get(policy)
    if default is None:
        raise SpecdecError(
            f"policy '{policy}' has no parameter to tune; choose one of: {', '.join(TUNABLE)}"
        )
    from specdec_core.verifiers import policy_params

    name = param or default.param
    if name not in policy_params(policy):
        known = ", ".join(policy_params(policy))
        raise SpecdecError(f"policy '{policy}' has no parameter '{name}'; it has: {known}")
    if not values:
        if name != default.param:
            raise SpecdecError(f"give the values of '{name}' to try: --values V1,V2,...")
        return default
    # every default grid runs from high to low (a lower value accepts more), and so do the
    # parameters one may choose instead (ngram_tau, delta, window)
    return Tunable(name, tuple(sorted(set(values), reverse=True)))


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


def read_kinds(path: str | Path, limit: int | None = None) -> dict[str, list[str]]:
    """Kind -> its prompts (the first user turn), in file order, from a JSONL prompt file: the
    kind is the line's `kind`, else its `category`, else `general`; `limit`: per kind."""
    from specdec_core.prompts import read_prompt_file

    prompts = read_prompt_file(path)
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds: dict[str, list[str]] = {}
    for line, prompt in zip(lines, prompts, strict=True):
        record = json.loads(line)
        kind = str(record.get("kind") or record.get("category") or GENERAL)
        own = kinds.setdefault(kind, [])
        if limit is None or len(own) < limit:
            own.append(prompt)
    return kinds


def prompt_feature(target: LoadedModel, text: str) -> tuple[float, ...]:
    """The mean of the target's input embeddings over the words of `text` (no template)."""
    import torch

    ids = target.tokenizer(text, add_special_tokens=False)["input_ids"] or [0]
    with torch.inference_mode():
        table = target.model.get_input_embeddings()
        rows = table(torch.tensor(ids, device=table.weight.device))  # [n, H]
    return tuple(rows.float().mean(0).cpu().tolist())


def centroid(features: Sequence[Sequence[float]]) -> tuple[float, ...]:
    return tuple(sum(column) / len(features) for column in zip(*features, strict=True))


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


Measure = Callable[[str, float], RunDistance | None]  # (kind, value) -> its pooled distance


def search(
    kinds: Sequence[str], grid: Tunable, max_distance: float, measure: Measure
) -> dict[str, tuple[float | None, RunDistance | None, list]]:
    """Kind -> (the loosest value whose total variation is at most `max_distance`, its
    distance, every trial). Every value is measured: the distance need not fall as the rule
    tightens (a strict truncation rule at T > 0 refuses most of a sampled draft and emits the
    residual norm(max(0, p − q)), which is not p)."""
    chosen: dict[str, tuple[float | None, RunDistance | None, list]] = {}
    for kind in kinds:
        best: tuple[float | None, RunDistance | None] = (None, RunDistance.lossless())
        trials = []
        for value in grid.values:  # strictest first: the last within the bound is the loosest
            distance = measure(kind, value)
            tv = distance.total_variation if distance is not None else None
            trials.append((value, tv, _finite(distance.kl if distance is not None else None)))
            if tv is not None and tv <= max_distance:
                best = (value, distance)
        chosen[kind] = (*best, trials)
    return chosen


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def tune(
    target: LoadedModel,
    method: str,
    prompts: dict[str, list[str]],
    config: DecodeConfig,
    grid: Tunable,
    max_distance: float,
    extra: object = None,
    raw: bool = False,
    progress: Callable[[str], None] | None = None,
) -> PolicyProfile:
    """Per kind of `prompts`, the loosest value of `grid` whose distance (total variation per
    token, pooled over the kind's prompts) is at most `max_distance`; `config` holds the
    policy and its other parameters."""
    from specdec_core.measure import run_distance
    from specdec_core.prompts import encode_prompt
    from specdec_core.run_distance import pooled

    report = progress or (lambda message: None)
    encoded = {kind: [encode_prompt(target.tokenizer, p, raw) for p in texts]
               for kind, texts in prompts.items()}  # fmt: skip

    def measure(kind: str, value: float) -> RunDistance | None:
        report(f"{kind}: {grid.param}={value:g} on {len(encoded[kind])} prompt(s)")
        params = {**config.policy_params, grid.param: value}
        trial = replace(config, policy_params=params)
        return pooled(run_distance(method, target, ids, trial, extra) for ids in encoded[kind])

    found = search(list(prompts), grid, max_distance, measure)
    kinds = []
    for kind, texts in prompts.items():
        value, distance, trials = found[kind]
        kinds.append(
            KindSetting(
                kind=kind,
                value=value,
                total_variation=distance.total_variation if distance else None,
                kl=_finite(distance.kl) if distance else None,
                prompts=len(texts),
                centroid=centroid([prompt_feature(target, text) for text in texts]),
                trials=tuple(trials),
            )
        )
    others = {k: v for k, v in config.policy_params.items() if k != grid.param}
    return PolicyProfile(
        policy=config.policy,
        param=grid.param,
        max_distance=max_distance,
        kinds=tuple(kinds),
        params=others,
        method=method,
        target=target.spec,
        temperature=config.temperature,
        k=config.k,
        max_new_tokens=config.max_new_tokens,
    )
