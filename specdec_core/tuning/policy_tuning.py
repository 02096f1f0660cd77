"""Tuning a policy profile (`specdec tune-policy`): per kind of request in a prompt file (its
`category` or `kind` field; an empty one is `general`), the distance of the policy's output
from the target's distribution (`measure.run_distance`: total variation per token) for each
value of one parameter (a lower value is looser); the loosest value whose distance stays at
most D is kept (`tune`), and a kind for which no value stays within D gets the lossless rule.
Every value is measured and the loosest within D is kept: the distance need not fall as the
rule tightens (`search`). The profile it writes: policy_profile.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.run_distance import RunDistance
from specdec_core.run.policy_profile import GENERAL, KindSetting, PolicyProfile, prompt_feature

if TYPE_CHECKING:
    from specdec_core.models.loading import LoadedModel


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


def read_kinds(path: str | Path, limit: int | None = None) -> dict[str, list[str]]:
    """Kind -> its prompts (the first user turn), in file order, from a JSONL prompt file: the
    kind is the line's `kind`, else its `category`, else `general`; `limit`: per kind."""
    from specdec_core.run.prompts import read_prompt_file

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


def centroid(features: Sequence[Sequence[float]]) -> tuple[float, ...]:
    return tuple(sum(column) / len(features) for column in zip(*features, strict=True))


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
    from specdec_core.measurement.measure import run_distance
    from specdec_core.measurement.run_distance import pooled
    from specdec_core.run.prompts import encode_prompt

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
