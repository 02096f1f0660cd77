"""The autoregressive reference of a single run: its speedup is measured, never guessed.

A Generate (or a chat turn) with a speculative method has its speedup against an `ar` run of
the same prompt and sampling settings (same target, max new tokens, temperature, top-p, seed;
`ar` ignores k, trees and policies). The answer never waits for it: the reference is reused
where the same reference was measured before on this machine (app/reference_store.py: a few of
its steps re-timed now, off the critical path), otherwise measured after the answer, in the
background, while the user reads and types (app/run_controller.py, `run_background`); the
next action cancels it. An `ar` run is its own reference (and is kept as one). The run's
tokens/s divided by the reference's is its speedup, shown with its 95 % interval over both
runs' steps (`specdec_core/measurement/run_speedup.py`) and with where the reference comes
from (`Reference.source`: measured just now, or reused from when it was measured); a lossless
ratio above τ is a timing disturbance, not a result (`specdec_core/measurement/speedup_bound.py`),
and the reference it was measured against is not kept (Generate again re-measures both).
Chat turns show the same record; Compare measures its own `ar` row.
Qt-free, so the rule is tested without a window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from app.engine_api import RunRequest, TargetInfo
from app.reference_store import CHECK_STEPS, KeptReference, ReferenceStore, fits, reference_key
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_speedup import StepTime, speedup_interval
from specdec_core.measurement.speedup_bound import MeasuredSpeedup

REFERENCE = "ar"
OWN_REFERENCE = "×1.00 vs autoregressive: this run is the autoregressive reference"
MEASURED_NOW = "reference measured just now, after the answer"
MEASURING = (
    "measuring the autoregressive reference for the speedup… (the window is ready: the next "
    "action cancels it)"
)
RE_TIMING = "re-timing the reused autoregressive reference…"
OFF = (
    "speedup not measured: the autoregressive reference is off "
    "(Run ▸ Measure the speedup turns it on)"
)
CANCELLED = "speedup not measured: the next action cancelled its autoregressive reference"


class Timed(Protocol):
    @property
    def tokens_per_second(self) -> float: ...


def reference_request(request: RunRequest, max_new_tokens: int | None = None) -> RunRequest:
    """`ar` on the same prompt and sampling settings, lossless; `max_new_tokens`: only that
    many tokens of it (re-timing the first steps of a kept reference)."""
    config = request.config.lossless()
    if max_new_tokens is not None:
        config = replace(config, max_new_tokens=max_new_tokens)
    return replace(request, method=REFERENCE, config=config)


def check_request(request: RunRequest, kept: KeptReference) -> RunRequest:
    """The first `CHECK_STEPS` steps of `kept`'s reference, to be timed now."""
    return reference_request(request, max(1, min(CHECK_STEPS, kept.new_tokens)))


def when(measured: float, now: float | None = None) -> str:
    """'today at 21:40' or 'on 2026-12-06 at 21:40' (local time)."""
    then, today = time.localtime(measured), time.localtime(now if now is not None else time.time())
    clock = time.strftime("%H:%M", then)
    if then[:3] == today[:3]:
        return f"today at {clock}"
    return f"on {time.strftime('%Y-%m-%d', then)} at {clock}"


@dataclass(frozen=True)
class Reference:
    """What a speedup is measured against: its tokens/s and timed steps, and where it comes
    from in words (`source`); `reused`: kept from an earlier run, not measured for this one."""

    tokens_per_second: float
    steps: tuple[StepTime, ...]
    source: str = MEASURED_NOW
    reused: bool = False

    @classmethod
    def measured_now(cls, summary: RunSummary, steps: Sequence[StepTime]) -> Reference:
        return cls(summary.tokens_per_second, tuple(steps))

    @classmethod
    def kept(
        cls, kept: KeptReference, check: Sequence[StepTime] | None = None, checking: bool = False
    ) -> Reference:
        """`kept` as it stands (`checking`: its steps are being re-timed; no `check`: they
        were not), or as `check` (its first steps timed now) finds it: within `CHECK_FIT`, as
        it is; else scaled to the machine's pace now."""
        measured = when(kept.measured)
        pace = kept.pace(check) if check else None
        if pace is None:
            state = f"re-timing {CHECK_STEPS} of its steps now…" if checking else "not re-timed"
            source = f"reference reused: measured {measured}, {state}"
        elif fits(pace):
            source = (
                f"reference reused: measured {measured}, {len(check or ())} of its steps "
                f"re-timed now within {abs(pace - 1) * 100:.0f} %"
            )
        else:
            kept = kept.scaled(pace)
            source = (
                f"reference re-timed: measured {measured}, its first {len(check or ())} steps "
                f"now take ×{pace:.2f} as long, so all of it is scaled by that"
            )
        return cls(kept.tokens_per_second, kept.steps, source, reused=True)


@dataclass(frozen=True)
class RunSpeedup:
    """A run's tokens/s over its reference's with the τ that bounds it (`bound`), and the
    95 % interval of that ratio over both runs' steps (None where no step was timed);
    `source`: where the reference comes from ('': measured just now, after the answer)."""

    bound: MeasuredSpeedup
    interval: tuple[float, float] | None = None
    source: str = ""
    reused: bool = False

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


def speedup(summary: RunSummary, reference: Timed) -> float | None:
    if reference.tokens_per_second <= 0:
        return None
    return summary.tokens_per_second / reference.tokens_per_second


def measured(
    summary: RunSummary,
    reference: Timed,
    steps: Sequence[StepTime] = (),
    reference_steps: Sequence[StepTime] = (),
) -> RunSpeedup | None:
    """The run's speedup (the tokens/s ratio), its interval from the two runs' steps, and the
    τ that bounds it; None without a usable reference. A `Reference` brings its own steps and
    says where it comes from."""
    ratio = speedup(summary, reference)
    if ratio is None:
        return None
    source, reused = "", False
    if isinstance(reference, Reference):
        reference_steps, source, reused = reference.steps, reference.source, reference.reused
    bound = MeasuredSpeedup(ratio, summary.mean_accept_length, summary.lossy)
    return RunSpeedup(bound, speedup_interval(steps, reference_steps, ratio), source, reused)


def speedup_text(
    summary: RunSummary,
    reference: Timed,
    steps: Sequence[StepTime] = (),
    reference_steps: Sequence[StepTime] = (),
) -> str:
    """The speedup line under a single run, and where its reference comes from; a ratio
    above τ is reported as a disturbance that Generate measures again."""
    found = measured(summary, reference, steps, reference_steps)
    if found is None:
        return ""
    source = found.source or MEASURED_NOW
    if found.disturbed:
        return f"timing disturbed: {found.bound.why()} (Generate again re-measures both; {source})"
    spread = ""
    if found.interval is not None:
        spread = f"95% interval {found.interval_text()} over the runs' steps; "
    return (
        f"×{found.ratio:.2f} vs autoregressive ({spread}{summary.tokens_per_second:.1f} vs "
        f"{reference.tokens_per_second:.1f} tokens/s; {source})"
    )


class References:
    """The references the window keeps (a `ReferenceStore`) and whether it measures them at
    all (`on()`: the Run ▸ Measure the speedup setting), for the loaded target (`target()`)."""

    def __init__(
        self,
        store: ReferenceStore,
        on: Callable[[], bool] = lambda: True,
        target: Callable[[], TargetInfo | None] = lambda: None,
    ) -> None:
        self.store, self.on, self.target = store, on, target

    def _key(self, request: RunRequest) -> str | None:
        target = self.target()
        return reference_key(request, target) if target is not None else None

    def kept(self, request: RunRequest) -> KeptReference | None:
        """A reference of `request`'s prompt and settings measured before on this machine."""
        key = self._key(request)
        return self.store.get(key) if key is not None else None

    def keep(self, request: RunRequest, summary: RunSummary, steps: Sequence[StepTime]) -> None:
        """Keep a whole autoregressive run of `request`'s prompt and settings as its reference
        (a stopped one is no reference)."""
        key = self._key(request)
        if key is not None and summary.stop_reason != "stopped" and steps:
            self.store.put(key, KeptReference.of(summary, steps))

    def forget(self, request: RunRequest) -> None:
        """Drop the kept reference of `request` (a speedup against it came out disturbed)."""
        key = self._key(request)
        if key is not None:
            self.store.drop(key)
