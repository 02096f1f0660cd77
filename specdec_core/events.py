"""Events: the one contract between the engine and everything that consumes it.

The decode loop (`specdec_core.decode.generate`) is a generator of these frozen dataclasses.
The GUI, the CLI and the benchmark read nothing else, so a new consumer needs only this file.

Sequence: one `Started`, then one `Step` per target forward after the prefill, then one
`Finished`. A consumer may stop iterating at any time; cancellation between steps goes through
the stop flag passed to `generate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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
class Step:
    index: int
    tokens: tuple[Token, ...]  # emitted tokens, in order (accepted drafts, then correction/bonus)
    drafted: int  # number of draft tokens the target verified in this step
    accepted: int  # number of those accepted
    draft_seconds: float
    verify_seconds: float
    tree: DraftTree | None = None
    rejected: tuple[Token, ...] = ()  # REJECTED_DRAFT tokens, display only


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
class RunSummary(Rates):
    method: str
    policy: str
    lossy: bool
    prompt_tokens: int
    new_tokens: int
    token_ids: tuple[int, ...]
    text: str
    steps: int  # target forwards after the prefill
    wall_seconds: float
    draft_seconds: float
    verify_seconds: float
    prefill_seconds: float
    stop_reason: str  # "eos" | "max_tokens" | "stopped" | "context"
    accepted_per_position: tuple[
        int, ...
    ] = ()  # accepted_per_position[i]: steps accepting > i drafts
    drafted_per_position: tuple[int, ...] = ()  # drafted_per_position[i]: steps drafting > i tokens
    config: dict[str, Any] = field(default_factory=dict)
    reused_tokens: int = 0  # prompt positions taken from a conversation's cache (not prefilled)

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
        }


@dataclass(frozen=True)
class Finished:
    summary: RunSummary


Event = Started | Step | Finished
