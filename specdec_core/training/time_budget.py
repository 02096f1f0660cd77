"""A training run's one time budget, and where each stage is while it runs.

`specdec train --seconds`, the Train tab's minutes and `scripts/gpu_distill.py` give one
budget; every stage of the run shares it: collecting (or generating) data, training (each
batch's target forward included: the features are computed as training needs them),
validation and saving.

- `Budget(seconds)`: the clock starts when it is made (or at `started`); `left()`, `over()`,
  `until(share)` (an instant a share of what is left from now). `Budget(None)` never ends.
- `StageClock(stage, total, budget)`: units (tokens) done of a stage's total, counted as the
  stage goes (`advance`), and what that means now (`progress()`): a `StageProgress` with the
  rate, the ETA (by the rate, never past the budget's end) and a note (e.g. the batch that
  is running and for how long).
- `Probe`: seconds per token of the target's features and of a training step, timed on a
  short sample before training; `refuse_unfit(probe, budget, ...)` refuses at once a budget
  that cannot cover one batch (its features and its step), saying the budget or batch size
  that would.
- `Heartbeat(tick, every)`: calls `tick()` every few seconds from a daemon thread while a stage
  runs (`with Heartbeat(...):`), so a stage whose units take minutes still says where it is;
  the stage's own code reports as each unit ends too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specdec_core.errors import SpecdecError
from specdec_core.files import format_duration

HEARTBEAT_S = 5.0  # the longest a stage goes without a progress line
RESERVE_SHARE = 0.05  # of a time budget, kept for the last validation and the save
RESERVE_MIN_S = 2.0
PROBE_TOKENS = 256  # of the first samples, timed through the features and a training step
PROBE_ROUNDS = 2  # the fastest of them counts (the first pays for allocation)
HELD_SHARE = 0.1  # under a budget, held-out tokens validated on per training token
HELD_MIN_TOKENS = 64


class Budget:
    """`seconds` of wall-clock time from `started` (time.monotonic(), default now); None: no
    budget (`left()` is None and it is never over)."""

    def __init__(self, seconds: float | None, started: float | None = None) -> None:
        self.seconds = seconds
        self.started = time.monotonic() if started is None else started

    @property
    def end(self) -> float | None:
        return None if self.seconds is None else self.started + self.seconds

    def spent(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float | None:
        end = self.end
        return None if end is None else max(0.0, end - time.monotonic())

    def over(self) -> bool:
        left = self.left()
        return left is not None and left <= 0.0

    def until(self, share: float) -> float | None:
        """The instant `share` of the time left from now has passed (None without a budget)."""
        left = self.left()
        return None if left is None else time.monotonic() + share * left

    def words(self) -> str:
        """'budget 1m10s left' (empty without a budget)."""
        left = self.left()
        return "" if left is None else f"budget {format_duration(left)} left"


@dataclass(frozen=True)
class StageProgress:
    """Where a stage is: `done` of `total` units (tokens) after `seconds`; `rate` (units per
    second, None until a unit has ended), `eta_s` (None while unknown), `budget_left_s` (None
    without a budget) and a `note` on the unit in progress."""

    stage: str  # "features" | "training"
    done: int
    total: int
    seconds: float
    rate: float | None
    eta_s: float | None
    budget_left_s: float | None
    note: str = ""

    def line(self) -> str:
        """'features: 3,200 / 20,000 tokens, 152 tokens/s, ETA 1m50s; budget 1m10s left'."""
        rate = f"{self.rate:,.0f} tokens/s" if self.rate else "no rate yet"
        parts = [f"{self.stage}: {self.done:,} / {self.total:,} tokens, {rate}"]
        parts.append(f"ETA {format_duration(self.eta_s)}")
        line = ", ".join(parts)
        if self.note:
            line += f" ({self.note})"
        if self.budget_left_s is not None:
            line += f"; budget {format_duration(self.budget_left_s)} left"
        return line


class StageClock:
    """Counts a stage's units as they end; `progress()` is where it stands now. `until`: the
    instant the stage must end by (its share of the budget), which caps the ETA; `done`: units
    done before this clock started (a resumed run's; the rate counts only its own)."""

    def __init__(
        self,
        stage: str,
        total: int,
        budget: Budget,
        until: float | None = None,
        done: int = 0,
    ) -> None:
        self.stage, self.total, self.budget = stage, total, budget
        self.until = until if until is not None else budget.end
        self.started = time.monotonic()
        self.before = self.done = done
        self.unit_started = self.started  # when the unit in progress began
        self.note = ""

    def begin_unit(self, note: str = "") -> None:
        self.unit_started, self.note = time.monotonic(), note

    def advance(self, done: int) -> None:
        """`done` units so far (they include the unit that just ended)."""
        self.done = done
        self.unit_started = time.monotonic()

    def running(self) -> float:
        """Seconds the unit in progress has run."""
        return time.monotonic() - self.unit_started

    def progress(self) -> StageProgress:
        now = time.monotonic()
        seconds = now - self.started
        own = self.done - self.before
        rate = own / seconds if own > 0 and seconds > 0 else None
        eta = (self.total - self.done) / rate if rate else None
        if self.until is not None:
            cap = max(0.0, self.until - now)
            eta = cap if eta is None else min(eta, cap)
        note = self.note
        if note:
            note = f"{note} running {format_duration(self.running())}"
        return StageProgress(
            self.stage, self.done, self.total, seconds, rate, eta, self.budget.left(), note
        )


class Heartbeat:
    """`tick()` every `every` seconds from a daemon thread while the `with` block runs (an
    exception in `tick` ends the heartbeat, never the stage)."""

    def __init__(self, tick: Callable[[], None], every: float = HEARTBEAT_S) -> None:
        self.tick, self.every = tick, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.tick()
            except Exception:  # a progress line is not worth the run
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every)


def reserve(budget: Budget) -> float:
    """Seconds of a budget kept for the last validation and the save."""
    return max(RESERVE_MIN_S, RESERVE_SHARE * (budget.seconds or 0.0))


@dataclass(frozen=True)
class Probe:
    """Seconds per token, timed on a short sample: of the target's features and of a
    training step (forward and backward)."""

    features: float
    training: float
    decode: float = 0.0  # seconds per token of validation's decoding (0: not timed)

    def batch_seconds(self, tokens: int) -> float:
        """Features and training of one batch of `tokens`."""
        return (self.features + self.training) * tokens

    def words(self, batch: int) -> str:
        return (
            f"probe: features {1000 * self.features:.1f} ms and training "
            f"{1000 * self.training:.1f} ms per token here; one batch of {batch:,} tokens about "
            f"{self.batch_seconds(batch):.0f}s"
        )


def refuse_unfit(probe: Probe, budget: Budget, tokens: int, batch_tokens: int) -> None:
    """Refuse a budget that cannot cover one training batch of `batch_tokens` (of `tokens` in
    all), its target forward included, saying the budget or the batch size that would."""
    left = budget.left() - reserve(budget)
    batch = min(batch_tokens, tokens)
    one = probe.batch_seconds(batch)
    if one <= left:
        return
    needed = budget.spent() + 1.5 * one + reserve(budget)
    fits = 2 ** int(math.log2(max(1.0, left / (probe.features + probe.training))))
    smaller = f", or --batch-tokens {fits}" if fits >= 64 else ""
    raise SpecdecError(
        f"the time budget of {budget.seconds:.0f}s cannot cover one training batch here: "
        f"the features and training of {batch:,} tokens take about {one:.0f}s and "
        f"{max(0.0, left):.0f}s are left after {budget.spent():.0f}s; give --seconds "
        f"{math.ceil(needed / 10) * 10} or more{smaller}"
    )


def probe_sample(samples, batch_tokens: int) -> list:
    """The first samples, cut to about `PROBE_TOKENS` tokens in all (never more than a batch),
    that a probe times."""
    room = min(PROBE_TOKENS, batch_tokens)
    taken, tokens = [], 0
    for sample in samples:
        if taken and tokens + len(sample.ids) > room:
            break
        taken.append(type(sample)(list(sample.ids[:room]), min(sample.start, room - 2)))
        tokens += len(taken[-1].ids)
    return taken


def fastest(run: Callable[[], object]) -> float:
    """The fastest of `PROBE_ROUNDS` runs of `run()`, in seconds."""
    times = []
    for _ in range(PROBE_ROUNDS):
        began = time.monotonic()
        run()
        times.append(time.monotonic() - began)
    return min(times)


def held_within(held: Sequence, tokens: int) -> list:
    """The held-out samples a time budget validates on: the first ones, cut to at most
    `HELD_SHARE` of the `tokens` training has (never under `HELD_MIN_TOKENS`), so each
    validation's target forwards cost a small part of an epoch's."""
    room = max(HELD_MIN_TOKENS, round(HELD_SHARE * tokens))
    taken: list = []
    for sample in held:
        if room < 2:
            break
        ids = list(sample.ids[:room])
        if sample.start >= len(ids) - 1:  # no answer token left to count
            break
        taken.append(type(sample)(ids, sample.start))
        room -= len(ids)
    return taken
