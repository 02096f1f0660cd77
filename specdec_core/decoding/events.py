"""Events: the one contract between the engine and everything that consumes it.

The decode loop (`specdec_core.loop.decode.generate`) is a generator of these frozen dataclasses.
The GUI, the CLI and the benchmark read nothing else, so a new consumer needs only this file.

Sequence: one `Started`, then one `Step` per target forward after the prefill, then one
`Finished`. A consumer may stop iterating at any time; cancellation between steps goes through
the stop flag passed to `generate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar


class TokenKind(StrEnum):
    ACCEPTED_DRAFT = "accepted_draft"  # proposed by the drafter, accepted by the verifier
    CORRECTION = "correction"  # target's token at the first rejected draft position
    BONUS = "bonus"  # target's extra token after a fully accepted draft
    TARGET = "target"  # plain autoregressive token (no draft was proposed)
    REJECTED_DRAFT = "rejected_draft"  # display only: never part of the output


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    kind: TokenKind
    step: int
    p_target: float  # target probability of this token (after temperature / top-p)
    q_draft: float | None = None  # drafter probability, None where nothing was drafted


@dataclass(frozen=True)
class DraftTree:
    """A drafted tree as verified by the target: node i has parent `parents[i]` (-1 = root).

    Nodes are sorted so that parents come first. `accepted` lists the accepted nodes from the
    root down (empty when the first draft token was rejected).
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    scores: tuple[float, ...]
    accepted: tuple[int, ...]


@dataclass(frozen=True)
class Started:
    prompt_token_count: int
    method: str
    config: dict[str, Any]


@dataclass(frozen=True)
class StepPhases:
    """Where a step's time went, in seconds. Consecutive clock reads (CUDA synchronised)
    delimit the phases, so a step's phases add up to its wall time: from the previous step's
    yield (or the end of the prefill) to this step's yield.

    A `Step`'s `draft_seconds` is `draft + commit`, its `verify_seconds` is
    `target + accept + keep` (the properties of the same names).
    """

    NAMES: ClassVar[tuple[str, ...]] = ("draft", "target", "accept", "keep", "commit", "loop")

    draft: float = 0.0  # drafter.propose: head forwards, tree building, lookup / suffix search
    target: float = 0.0  # the target's forward over [pending, *proposal], tree mask included
    accept: float = 0.0  # the target's probabilities and the verification of the proposal
    keep: float = 0.0  # the target's KV cache cut to the accepted path
    commit: float = 0.0  # drafter.commit (an EAGLE head's pass over the accepted features)
    loop: float = 0.0  # the rest: token records, detokenising, the consumer between yields
    # seconds inside `draft` by part, where a drafter splits it (EAGLE: head, tree, merge)
    draft_parts: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds().values())

    @property
    def draft_seconds(self) -> float:
        """What `Step.draft_seconds` reports: the drafter's propose and commit."""
        return self.draft + self.commit

    @property
    def verify_seconds(self) -> float:
        """What `Step.verify_seconds` reports: the target's forward, acceptance and keep."""
        return self.target + self.accept + self.keep

    def seconds(self) -> dict[str, float]:
        """Phase name -> seconds, in `NAMES` order (without the draft's parts)."""
        return {
            "draft": self.draft,
            "target": self.target,
            "accept": self.accept,
            "keep": self.keep,
            "commit": self.commit,
            "loop": self.loop,
        }

    def __add__(self, other: StepPhases) -> StepPhases:
        parts = dict(self.draft_parts)
        for name, seconds in other.draft_parts.items():
            parts[name] = parts.get(name, 0.0) + seconds
        mine, theirs = self.seconds(), other.seconds()
        return StepPhases(**{n: mine[n] + theirs[n] for n in self.NAMES}, draft_parts=parts)

    def to_record(self) -> dict[str, Any]:
        return {**self.seconds(), "draft_parts": dict(self.draft_parts)}


class PhaseTimes:
    """The draft and verify seconds of anything whose `phases` are a `StepPhases`."""

    phases: StepPhases

    @property
    def draft_seconds(self) -> float:
        return self.phases.draft_seconds

    @property
    def verify_seconds(self) -> float:
        return self.phases.verify_seconds


class SearchState(StrEnum):
    """Where a drafter's search of its own settings stands (SWIFT's layer-set search)."""

    WAITING = "waiting"  # the context is shorter than the scoring window
    SEARCHING = "searching"
    REACHED = "reached"  # the best set reached the target score
    STALLED = "stalled"  # `patience` sets in a row did not improve on the best
    EXHAUSTED = "exhausted"  # `max_iterations` sets were scored

    @property
    def done(self) -> bool:
        return self not in (SearchState.WAITING, SearchState.SEARCHING)


@dataclass(frozen=True)
class SkippedLayers:
    """The target's layers a self-speculative draft leaves out (layer indices, ascending)."""

    num_layers: int  # the target's decoder layers
    layers: tuple[int, ...] = ()  # skipped whole (attention and MLP)
    attention: tuple[int, ...] = ()  # only the attention skipped
    mlp: tuple[int, ...] = ()  # only the MLP skipped


@dataclass(frozen=True)
class SearchProgress:
    """A drafter's search as it runs: sets scored so far and their matching rates."""

    state: SearchState
    iterations: int
    max_iterations: int
    best_score: float | None = None  # None: nothing scored yet
    last_score: float | None = None


@dataclass(frozen=True)
class PoolStatus:
    """Lookahead decoding's n-gram pool and the window that fills it."""

    window: int  # W: Jacobi columns
    ngram_size: int  # N
    ngrams: int  # n-grams in the pool now


@dataclass(frozen=True)
class DrafterStatus:
    """What a drafter publishes after a step (`Drafter.status`): the parts it has."""

    skipped: SkippedLayers | None = None  # self-speculation: the layers drafting skips
    search: SearchProgress | None = None  # SWIFT: the layer-set search
    pool: PoolStatus | None = None  # lookahead: the n-gram pool


@dataclass(frozen=True)
class Step(PhaseTimes):
    index: int
    tokens: tuple[Token, ...]  # emitted tokens, in order (accepted drafts, then correction/bonus)
    drafted: int  # number of draft tokens the target verified in this step
    accepted: int  # number of those accepted
    tree: DraftTree | None = None
    rejected: tuple[Token, ...] = ()  # REJECTED_DRAFT tokens, display only
    phases: StepPhases = field(default_factory=StepPhases)  # where the step's time went
    status: DrafterStatus | None = None  # the drafter's own state after the step, if it has one


class Rates:
    """τ and tokens/s of anything that counts `new_tokens`, `steps` and `wall_seconds`."""

    new_tokens: int
    steps: int
    wall_seconds: float

    @property
    def mean_accept_length(self) -> float:
        """τ = new tokens / target forwards (counts the correction or bonus token)."""
        return self.new_tokens / self.steps if self.steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass(frozen=True)
class RunSummary(Rates, PhaseTimes):
    method: str
    policy: str
    lossy: bool
    prompt_tokens: int
    new_tokens: int
    token_ids: tuple[int, ...]
    text: str
    steps: int  # target forwards after the prefill
    wall_seconds: float
    prefill_seconds: float
    stop_reason: str  # "eos" | "max_tokens" | "stopped" | "context"
    accepted_per_position: tuple[
        int, ...
    ] = ()  # accepted_per_position[i]: steps accepting > i drafts
    drafted_per_position: tuple[int, ...] = ()  # drafted_per_position[i]: steps drafting > i tokens
    config: dict[str, Any] = field(default_factory=dict)
    reused_tokens: int = 0  # prompt positions taken from a conversation's cache (not prefilled)
    # every step's phases summed; the loop's tail after the last step counts as `loop`, so
    # prefill_seconds + phases.total == wall_seconds
    phases: StepPhases = field(default_factory=StepPhases)

    def to_record(self) -> dict[str, Any]:
        """The JSON form (`specdec generate --json`, the GUI's history): every field, with
        τ and tokens/s, in the names the CLI contract uses."""
        return {
            "method": self.method,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "new_tokens": self.new_tokens,
            "steps": self.steps,
            "mean_accept_length": self.mean_accept_length,
            "tokens_per_second": self.tokens_per_second,
            "wall_seconds": self.wall_seconds,
            "draft_seconds": self.draft_seconds,
            "verify_seconds": self.verify_seconds,
            "prefill_seconds": self.prefill_seconds,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "policy": self.policy,
            "lossy": self.lossy,
            "stop_reason": self.stop_reason,
            "accepted_per_position": list(self.accepted_per_position),
            "drafted_per_position": list(self.drafted_per_position),
            "config": self.config,
            "phases": self.phases.to_record(),
        }


@dataclass(frozen=True)
class Finished:
    summary: RunSummary


Event = Started | Step | Finished
