"""A run's distance from the target's distribution: the per-token distances of
`fidelity.step_distances` summed over a run, and runs pooled over the prompts of a bench entry.

Every emitted token is measured where its position's rule decided it (`fidelity`'s P, what the
policy emits there, against the target's p at that row): a chain's accepted drafts and its
correction each with the rule at their row, a bonus token or the token of a step that drafted
nothing at distance 0 (the target's own draw); a tree step at its first position only (a tree
drafted by sampling, EAGLE-2 at T > 0, by redrawing its root's children: an estimate).
`total_variation` and `kl` are means over the measured tokens. KL is +inf at a token where the
policy can emit one p cannot (at T = 0: any chance of a non-argmax token); the mean is then
+inf, written `null` in JSON beside `kl_infinite_tokens` (how many were).

A lossless run is at distance 0 by construction (`lossless`): nothing is measured for it.

Torch-free: the window reads these records.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LOSSLESS_NOTE = "lossless: the target's distribution by construction"


@dataclass(frozen=True)
class RunDistance:
    """Sums over the measured tokens of one or more runs; the means are properties."""

    tokens: int = 0  # tokens measured
    total_variation_sum: float = 0.0
    kl_sum: float = 0.0  # +inf once a token's KL is
    infinite_kl_tokens: int = 0
    estimated_tokens: int = 0  # tokens whose distance was estimated by sampling
    variance_sum: float = 0.0  # Σ of the sampled tokens' squared standard errors (TV)
    unmeasured_steps: int = 0  # steps not measured (no verification; a sampled tree's size unknown)
    exact_by_construction: bool = False  # lossless: 0 without measuring

    @classmethod
    def lossless(cls) -> RunDistance:
        return cls(exact_by_construction=True)

    def add(
        self,
        total_variation: float,
        kl: float,
        samples: int = 0,
        total_variation_se: float = 0.0,
    ) -> RunDistance:
        """This sum with one more measured token (`samples` > 0: a sampled estimate)."""
        return RunDistance(
            tokens=self.tokens + 1,
            total_variation_sum=self.total_variation_sum + total_variation,
            kl_sum=self.kl_sum + kl,
            infinite_kl_tokens=self.infinite_kl_tokens + math.isinf(kl),
            estimated_tokens=self.estimated_tokens + (samples > 0),
            variance_sum=self.variance_sum + total_variation_se**2,
            unmeasured_steps=self.unmeasured_steps,
        )

    def skip(self) -> RunDistance:
        """This sum with one more step whose tokens could not be measured."""
        return _plus(self, RunDistance(unmeasured_steps=1))

    @property
    def measured(self) -> bool:
        return self.exact_by_construction or self.tokens > 0

    @property
    def total_variation(self) -> float | None:
        """Mean TV per measured token (0 for a lossless run; None: nothing measured)."""
        if self.exact_by_construction:
            return 0.0
        return self.total_variation_sum / self.tokens if self.tokens else None

    @property
    def kl(self) -> float | None:
        """Mean KL(P ‖ p) per measured token, in nats; +inf where a token's is."""
        if self.exact_by_construction:
            return 0.0
        return self.kl_sum / self.tokens if self.tokens else None

    @property
    def total_variation_se(self) -> float:
        """Standard error of the mean TV from the sampled tokens' estimates (0 when exact)."""
        return math.sqrt(self.variance_sum) / self.tokens if self.tokens else 0.0

    def note(self) -> str:
        if self.exact_by_construction:
            return LOSSLESS_NOTE
        parts = []
        if self.estimated_tokens:
            parts.append(f"{self.estimated_tokens} of {self.tokens} tokens estimated by sampling")
        if self.unmeasured_steps:
            parts.append(f"{self.unmeasured_steps} steps not measured")
        return "; ".join(parts)

    def to_record(self) -> dict[str, Any]:
        """The JSON fields of a bench row or entry: `total_variation`, `kl` (null when infinite
        or not measured), `kl_infinite_tokens`, `distance_tokens`, `total_variation_se`,
        `distance_note`."""
        kl = self.kl
        return {
            "total_variation": self.total_variation,
            "kl": kl if kl is not None and math.isfinite(kl) else None,
            "kl_infinite_tokens": self.infinite_kl_tokens,
            "distance_tokens": self.tokens,
            "total_variation_se": self.total_variation_se,
            "distance_note": self.note(),
        }


def pooled(parts: Iterable[RunDistance | None]) -> RunDistance | None:
    """The runs' tokens together (a bench entry over its prompts); None if none was measured."""
    known = [part for part in parts if part is not None]
    if not known:
        return None
    if all(part.exact_by_construction for part in known):
        return RunDistance.lossless()
    total = RunDistance()
    for part in known:
        if not part.exact_by_construction:
            total = _plus(total, part)
    return total


def _plus(a: RunDistance, b: RunDistance) -> RunDistance:
    return RunDistance(
        tokens=a.tokens + b.tokens,
        total_variation_sum=a.total_variation_sum + b.total_variation_sum,
        kl_sum=a.kl_sum + b.kl_sum,
        infinite_kl_tokens=a.infinite_kl_tokens + b.infinite_kl_tokens,
        estimated_tokens=a.estimated_tokens + b.estimated_tokens,
        variance_sum=a.variance_sum + b.variance_sum,
        unmeasured_steps=a.unmeasured_steps + b.unmeasured_steps,
    )


EMPTY_RECORD = {
    "total_variation": None,
    "kl": None,
    "kl_infinite_tokens": 0,
    "distance_tokens": 0,
    "total_variation_se": 0.0,
    "distance_note": "not measured",
}


def record(distance: RunDistance | None) -> dict[str, Any]:
    """`to_record()`, or the same keys empty for a run that was not measured."""
    return distance.to_record() if distance is not None else dict(EMPTY_RECORD)
