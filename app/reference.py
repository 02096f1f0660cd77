"""The autoregressive reference of a single run: its speedup is measured, never guessed.

A Generate with a speculative method is followed, every time, by an `ar` run of the same
prompt and sampling settings (same target, max new tokens, temperature, top-p, seed; `ar`
ignores k, trees and policies): measured right after the run, the reference runs under the
same conditions (the same load on the machine, the same clock speed), which a reference
measured minutes earlier would not. An `ar` run is its own reference. The run's tokens/s
divided by the reference's is its speedup, shown with its 95 % interval over both runs'
steps (`specdec_core/measurement/run_speedup.py`); a lossless ratio above τ is a timing
disturbance, not a result (`specdec_core/measurement/speedup_bound.py`). Chat turns and Compare
show the same record.
Qt-free, so the rule is tested without a window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.engine_api import RunRequest
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_speedup import StepTime, speedup_interval
from specdec_core.measurement.speedup_bound import MeasuredSpeedup

REFERENCE = "ar"
OWN_REFERENCE = "×1.00 vs autoregressive: this run is the autoregressive reference"


def reference_request(request: RunRequest) -> RunRequest:
    """`ar` on the same prompt and sampling settings, lossless."""
    config = request.config.lossless()
    return replace(request, method=REFERENCE, config=config)


@dataclass(frozen=True)
class RunSpeedup:
    """A run's tokens/s over its reference's with the τ that bounds it (`bound`), and the
    95 % interval of that ratio over both runs' steps (None where no step was timed)."""

    bound: MeasuredSpeedup
    interval: tuple[float, float] | None = None

    @property
    def ratio(self) -> float:
        return self.bound.ratio

    @property
    def disturbed(self) -> bool:
        return self.bound.disturbed

    def interval_text(self) -> str:
        """'1.55–1.70', or '' without an interval."""
        if self.interval is None:
            return ""
        low, high = self.interval
        return f"{low:.2f}–{high:.2f}"


def speedup(summary: RunSummary, reference: RunSummary) -> float | None:
    if reference.tokens_per_second <= 0:
        return None
    return summary.tokens_per_second / reference.tokens_per_second


def measured(
    summary: RunSummary,
    reference: RunSummary,
    steps: Sequence[StepTime] = (),
    reference_steps: Sequence[StepTime] = (),
) -> RunSpeedup | None:
    """The run's speedup (the summaries' tokens/s ratio), its interval from the two runs'
    steps, and the τ that bounds it; None without a usable reference."""
    ratio = speedup(summary, reference)
    if ratio is None:
        return None
    bound = MeasuredSpeedup(ratio, summary.mean_accept_length, summary.lossy)
    return RunSpeedup(bound, speedup_interval(steps, reference_steps, ratio))


def speedup_text(
    summary: RunSummary,
    reference: RunSummary,
    steps: Sequence[StepTime] = (),
    reference_steps: Sequence[StepTime] = (),
) -> str:
    """The speedup line under a single run, its reference measured right after it; a ratio
    above τ is reported as a disturbance that Generate measures again."""
    found = measured(summary, reference, steps, reference_steps)
    if found is None:
        return ""
    if found.disturbed:
        return f"timing disturbed: {found.bound.why()} (Generate again re-measures both)"
    spread = ""
    if found.interval is not None:
        spread = f"95% interval {found.interval_text()} over the runs' steps; "
    return (
        f"×{found.ratio:.2f} vs autoregressive ({spread}{summary.tokens_per_second:.1f} vs "
        f"{reference.tokens_per_second:.1f} tokens/s, reference measured right after the run)"
    )
