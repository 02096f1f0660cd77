"""The autoregressive reference of a single run: its speedup is measured, never guessed.

A Generate with a speculative method is followed by an `ar` run of the same prompt and
sampling settings (same target, max new tokens, temperature, top-p, seed; `ar` ignores k,
trees and policies), unless this window already measured one; the run's tokens/s divided by
the reference's is its speedup. Qt-free, so the rule is tested without a window.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.engine_api import RunRequest
from specdec_core.events import RunSummary
from specdec_core.speedup_bound import MeasuredSpeedup

REFERENCE = "ar"


@dataclass(frozen=True)
class ReferenceKey:
    target: str
    prompt: str
    raw: bool
    max_new_tokens: int
    temperature: float
    top_p: float
    seed: int


def reference_key(request: RunRequest, target: str) -> ReferenceKey:
    c = request.config
    return ReferenceKey(
        target, request.prompt, request.raw, c.max_new_tokens, c.temperature, c.top_p, c.seed
    )


def reference_request(request: RunRequest) -> RunRequest:
    """`ar` on the same prompt and sampling settings, lossless."""
    config = request.config.lossless()
    return replace(request, method=REFERENCE, config=config)


@dataclass
class References:
    """Measured `ar` runs of this window, by what they depend on."""

    runs: dict[ReferenceKey, RunSummary] = field(default_factory=dict)

    def get(self, key: ReferenceKey) -> RunSummary | None:
        return self.runs.get(key)

    def put(self, key: ReferenceKey, summary: RunSummary) -> None:
        if summary.stop_reason != "stopped":  # a stopped run is not a reference
            self.runs[key] = summary


def speedup(summary: RunSummary, reference: RunSummary) -> float | None:
    if reference.tokens_per_second <= 0:
        return None
    return summary.tokens_per_second / reference.tokens_per_second


def measured(summary: RunSummary, reference: RunSummary) -> MeasuredSpeedup | None:
    """The run's speedup with the τ that bounds it (None without a usable reference)."""
    ratio = speedup(summary, reference)
    if ratio is None:
        return None
    return MeasuredSpeedup(ratio, summary.mean_accept_length, summary.lossy)


def speedup_text(summary: RunSummary, reference: RunSummary) -> str:
    """The speedup line under a single run; a ratio above τ is reported as a disturbance."""
    found = measured(summary, reference)
    if found is None:
        return ""
    if found.disturbed:
        return f"timing disturbed: {found.why()}"
    ratio = found.ratio
    return (
        f"×{ratio:.2f} vs autoregressive ({summary.tokens_per_second:.1f} vs "
        f"{reference.tokens_per_second:.1f} tokens/s, same prompt and settings)"
    )
