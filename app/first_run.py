"""What a new user's window selects before any setting is saved, and why, in one line.

The method is the fastest lossless one for the loaded models: EAGLE-2 with prompt lookup
merged into its tree when an EAGLE head fits the target (the bundled head fits the embedded
model; the measurements are in docs/benchmarks.md), else n-gram lookup, which needs no second
model. A saved setting always wins: this applies only when there is no settings file yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine_api import Registries
from specdec_core.resources import names_bundled_head

PREFERRED = "eagle2-lookup"
WITHOUT_HEAD = "ngram"
COMPARE_SET = ("eagle", "eagle2", "eagle2-lookup")  # autoregressive always runs first
EMBEDDED = ("embedded", "smollm2")


@dataclass(frozen=True)
class FirstChoice:
    method: str
    reason: str


def first_choice(registries: Registries, target: str, head: str) -> FirstChoice | None:
    """The method to select for a new user, or None when the registry offers neither."""
    names = {m.name: m for m in registries.methods}
    bundled_head_on_other_target = names_bundled_head(head) and target not in EMBEDDED
    if PREFERRED in names and not bundled_head_on_other_target:
        label = names[PREFERRED].label
        return FirstChoice(
            PREFERRED,
            f"selected {label}: the fastest lossless method with an EAGLE head on this model "
            "(docs/benchmarks.md); press Compare to measure it against the others here",
        )
    if WITHOUT_HEAD in names:
        label = names[WITHOUT_HEAD].label
        return FirstChoice(
            WITHOUT_HEAD,
            f"selected {label}: the bundled EAGLE head is made for the embedded model, not "
            f"'{target}'; choose a head for it under Models to use EAGLE",
        )
    return None
