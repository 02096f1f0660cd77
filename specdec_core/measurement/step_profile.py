"""Where a step's time goes: a bench entry's step by phase, in ms and in `ar` steps.

A speculative method's speedup is τ ÷ (the cost of its step in `ar` steps). The decode loop
times every step's phases (`events.StepPhases`: draft, target forward, acceptance, cache keep,
commit, loop); `bench --profile` divides each entry's sums by its steps, and by the `ar`
entry's time per step in the same run, its (wall − prefill) / steps (which the phases of its
steps add up to). Drafters that split their draft (EAGLE: head passes, tree building, merge)
add those parts.

    step_cost_ar_steps = (ms per step of the entry) / (ms per step of ar)

In: the bench's aggregates (`measure.Aggregate`, with their summed `phases`). Out: a
`StepProfile` per entry (None for HF baselines, whose steps are not split), its JSON record
(the keys `bench --profile --json-out` adds under each method) and the text table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdec_core.decoding.events import StepPhases
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import Aggregate

STEP = "step"  # the column of the whole step


@dataclass(frozen=True)
class StepProfile:
    """One entry's mean step: ms per step by phase and by part of the draft, against the
    same run's `ar` step."""

    ms: dict[str, float]  # phase -> ms per step, in StepPhases.NAMES order
    draft_parts: dict[str, float]  # part of the draft phase -> ms per step (may be empty)
    ar_step_ms: float  # ms per `ar` step in the same run

    @property
    def step_ms(self) -> float:
        return sum(self.ms.values())

    @property
    def step_cost_ar_steps(self) -> float:
        """This entry's step in `ar` steps: speedup = τ ÷ this."""
        return self.step_ms / self.ar_step_ms

    def in_ms(self) -> dict[str, float]:
        """Phase -> ms per step, and the whole step under STEP."""
        return {**self.ms, STEP: self.step_ms}

    def in_ar_steps(self) -> dict[str, float]:
        """Phase -> `ar` steps per step, and the whole step's cost under STEP."""
        return {name: ms / self.ar_step_ms for name, ms in self.in_ms().items()}

    def to_record(self) -> dict[str, Any]:
        """The keys `bench --profile` adds to an entry's JSON record."""
        return {
            "profile": self.in_ms(),
            "profile_ar_steps": self.in_ar_steps(),
            "draft_parts": dict(self.draft_parts),
            "step_cost_ar_steps": self.step_cost_ar_steps,
        }


def step_profile(entry: Aggregate, ar_step_ms: float) -> StepProfile | None:
    """`entry`'s profile against an `ar` step of `ar_step_ms` (None: its steps are not split,
    an HF baseline, or it ran none)."""
    if entry.phases is None or not entry.steps:
        return None
    scale = 1000 / entry.steps
    return StepProfile(
        ms={name: seconds * scale for name, seconds in entry.phases.seconds().items()},
        draft_parts={name: s * scale for name, s in entry.phases.draft_parts.items()},
        ar_step_ms=ar_step_ms,
    )


def profiles(methods: dict[str, Aggregate]) -> dict[str, StepProfile | None]:
    """Entry -> its profile against the `ar` entry of the same run (`methods["ar"]`)."""
    if "ar" not in methods:
        raise SpecdecError("a step profile needs the same run's ar entry; add ar to --methods")
    ar_step_ms = ms_per_step(methods["ar"])
    if not ar_step_ms:
        raise SpecdecError(
            "the ar entry ran no step to compare with; profile with --max-new-tokens 1 or more"
        )
    return {name: step_profile(m, ar_step_ms) for name, m in methods.items()}


def format_profile(methods: dict[str, Aggregate]) -> str:
    """Two tables, ms per step and `ar` steps per step, by phase; then the draft's parts."""
    found = profiles(methods)
    width = max([14, *(len(name) + 2 for name in methods)])
    in_ms = f"Where a step's time goes: ms per step (ar step {ms_per_step(methods['ar']):.1f} ms)"
    in_ar = "The same in ar steps (step: the step's cost in ar steps)"
    blocks = [
        _table(in_ms, found, width, StepProfile.in_ms, ".1f"),
        _table(in_ar, found, width, StepProfile.in_ar_steps, ".2f"),
    ]
    parts = [_parts_line(name, p, width) for name, p in found.items() if p and p.draft_parts]
    if parts:
        blocks.append("Inside the draft phase: ms per step\n" + "\n".join(parts))
    return "\n\n".join(blocks)


def _table(
    title: str,
    found: dict[str, StepProfile | None],
    width: int,
    cells: Callable[[StepProfile], dict[str, float]],
    spec: str,
) -> str:
    columns = [*StepPhases.NAMES, STEP]
    header = f"{'method':<{width}}" + "".join(f"{name:>9}" for name in columns)
    lines = [title, header, "-" * len(header)]
    for name, profile in found.items():
        if profile is None:
            lines.append(f"{name:<{width}}{'-':>9}  no phases (HF baselines do not split a step)")
            continue
        values = cells(profile)
        lines.append(f"{name:<{width}}" + "".join(f"{values[c]:>9{spec}}" for c in columns))
    return "\n".join(lines)


def _parts_line(name: str, profile: StepProfile, width: int) -> str:
    parts = ", ".join(f"{part} {ms:.1f}" for part, ms in profile.draft_parts.items())
    return f"{name:<{width}}{parts}"


def ms_per_step(m: Aggregate) -> float:
    """ms per step of an entry: its steps' phases, (wall − prefill) / steps, over its steps
    (0 without phases or steps)."""
    if m.phases is None or not m.steps:
        return 0.0
    return 1000 * m.phases.total / m.steps
