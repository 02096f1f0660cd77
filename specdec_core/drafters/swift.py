"""SWIFT: self-speculative drafting whose skipped layers are searched during the generation.

Xia et al., "SWIFT: On-the-Fly Self-Speculative Decoding for LLM Inference Acceleration"
(ICLR 2025). The target drafts with some of its own sublayers skipped (attention and MLP
counted apart, the first and last layers always kept), as drafters/layer_skip.py does with a
fixed set; here the set is searched with the context's own tokens while the generation runs,
and drafting continues with the best set found. Method parameters (`PARAMS`,
`config.method_params`): skip_ratio, window, target_score, patience, max_iterations,
per_step, confidence.

The search (a compact version of SWIFT's layer-set optimisation):

- Candidates: the attention and the MLP sublayer of layers 1 .. L-2; a set skips
  m = int(2 (L - 2) · skip_ratio) of them. The first set tried skips odd layers first, then
  even ones (SWIFT's starting set is every other layer).
- Window: once the cache holds `window` positions, the last `window` of them are fixed as the
  scoring window. A set's score is its matching rate there: the share of window positions
  where the draft's argmax (one teacher-forced forward of the window's tokens through the kept
  sublayers, reading the target's committed cache before the window through
  `layer_subset.prefix_view`, never writing into it) equals the target's own argmax (from the
  target's final hidden states the loop already computed). SWIFT compares with the next
  tokens of the output, which at T = 0 is the same thing; comparing with the target's argmax
  also scores prompt positions, so the search can start on the prompt.
- Each step first scores `per_step` sets: the starting set, then alternately a random set of
  m sublayers (SWIFT's random search) and the best set with one skipped sublayer swapped for
  a kept one (a local move near the best, where SWIFT's Gaussian-process step also looks).
  A set scoring above the best replaces it.
- It stops when the best score reaches `target_score`, after `patience` sets without an
  improvement, or after `max_iterations` sets (SWIFT's max score, tolerance and iteration
  limits); the set then stays for the rest of the generation. Each generation searches
  afresh (`begin`), from the same seed.

The proposals themselves are `layer_skip.draft_chain`'s: lossless at any temperature, the
cache left as found. `progress()` is a `SwiftProgress` (state, sets scored, best and latest
score, the set drafting now, seconds searched) and `status()` its part each `Step` carries
(`events.DrafterStatus`: the skipped layers and the search); `draft_parts()` splits each
propose into `search` and `draft` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import DrafterStatus, SearchProgress, SearchState
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.step_clock import now
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.drafters.layer_skip import (
    CONFIDENCE,
    check_confidence,
    draft_chain,
    skipped_layers,
)
from specdec_core.drafters.layer_subset import SkipSet, check, forward_subset, prefix_view
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

SKIP_RATIO = 0.45  # SWIFT's default share of sublayers skipped
WINDOW = 32  # SWIFT's context window: positions each set is scored on
TARGET_SCORE = 0.9  # SWIFT's max score (its published script): stop once a set matches this
PATIENCE = 8  # sets without an improvement before the search stops
MAX_ITERATIONS = 24  # sets scored at most in one generation
PER_STEP = 1  # sets scored per decode step (SWIFT's optimisation interval of 1)
# method parameters (`--method-param NAME=VALUE`) and their defaults
PARAMS: tuple[tuple[str, float], ...] = (
    ("skip_ratio", SKIP_RATIO),
    ("window", WINDOW),
    ("target_score", TARGET_SCORE),
    ("patience", PATIENCE),
    ("max_iterations", MAX_ITERATIONS),
    ("per_step", PER_STEP),
    ("confidence", CONFIDENCE),
)


@dataclass(frozen=True)
class SwiftSettings:
    skip_ratio: float = SKIP_RATIO
    window: int = WINDOW
    target_score: float = TARGET_SCORE
    patience: int = PATIENCE
    max_iterations: int = MAX_ITERATIONS
    per_step: int = PER_STEP
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        for name, value, least in (
            ("window", self.window, 2),
            ("patience", self.patience, 1),
            ("max_iterations", self.max_iterations, 1),
            ("per_step", self.per_step, 1),
        ):
            if value < least:
                raise SpecdecError(f"--method-param {name}={value}: SWIFT needs {name} >= {least}")
        check_confidence(self.confidence)

    def resolved(self, config: DecodeConfig) -> SwiftSettings:
        """These settings as `config.method_params` overrides them."""
        value = config.method_param

        def count(name: str, default: int) -> int:
            return config.method_int(name, default, "SWIFT")

        return SwiftSettings(
            skip_ratio=value("skip_ratio", self.skip_ratio),
            window=count("window", self.window),
            target_score=value("target_score", self.target_score),
            patience=count("patience", self.patience),
            max_iterations=count("max_iterations", self.max_iterations),
            per_step=count("per_step", self.per_step),
            confidence=value("confidence", self.confidence),
        )

    def count(self, num_layers: int) -> int:
        """Sublayers a set skips in a `num_layers`-layer model (at least one, or an error)."""
        count = int(len(candidates(num_layers)) * self.skip_ratio)
        if not 0.0 < self.skip_ratio < 1.0 or count < 1:
            raise SpecdecError(
                f"--method-param skip_ratio={self.skip_ratio:g} skips no sublayer of a "
                f"{num_layers}-layer model (SWIFT skips among the attention and MLP sublayers "
                "of all but the first and last layer); choose a ratio in (0, 1) that skips at "
                "least one"
            )
        return count


@dataclass(frozen=True)
class SwiftProgress:
    """Where the layer-set search of the current generation stands."""

    state: SearchState
    iterations: int  # sets scored
    max_iterations: int
    best_score: float | None  # matching rate of the best set on the window (None: none yet)
    last_score: float | None  # of the latest set scored
    window: int  # positions each set is scored on
    skip: SkipSet  # the set drafting now (the best so far)
    search_seconds: float  # spent searching in this generation

    def record(self) -> dict[str, Any]:
        """JSON-ready, for an event or a table."""
        return {
            "search_state": self.state.value,
            "search_iterations": self.iterations,
            "search_max_iterations": self.max_iterations,
            "search_best_score": self.best_score,
            "search_last_score": self.last_score,
            "search_window": self.window,
            "search_seconds": self.search_seconds,
            **self.skip.record(),
        }


def candidates(num_layers: int) -> list[tuple[int, str]]:
    """The sublayers SWIFT may skip, odd layers first: (layer, "attention" | "mlp")."""
    inner = range(1, num_layers - 1)
    order = [i for i in inner if i % 2] + [i for i in inner if not i % 2]
    return [(i, part) for i in order for part in ("attention", "mlp")]


def as_skip(sublayers: list[tuple[int, str]]) -> SkipSet:
    return SkipSet(
        attention=frozenset(i for i, part in sublayers if part == "attention"),
        mlp=frozenset(i for i, part in sublayers if part == "mlp"),
    )


class SwiftDrafter(Drafter):
    """Layer skipping with the set searched during the generation (module docstring). The
    constructor's settings are the defaults; `config.method_params` (`PARAMS`) override
    them for a generation."""

    name = "swift"

    def __init__(
        self,
        num_layers: int,
        skip_ratio: float = SKIP_RATIO,
        window: int = WINDOW,
        target_score: float = TARGET_SCORE,
        patience: int = PATIENCE,
        max_iterations: int = MAX_ITERATIONS,
        per_step: int = PER_STEP,
        confidence: float = CONFIDENCE,
        seed: int = 0,
    ) -> None:
        self.num_layers = num_layers
        self.candidates = candidates(num_layers)
        self.defaults = SwiftSettings(
            skip_ratio, window, target_score, patience, max_iterations, per_step, confidence
        )
        self.defaults.count(num_layers)
        self.seed = seed
        self.target: Target | None = None
        self._reset(self.defaults)

    def _reset(self, settings: SwiftSettings) -> None:
        self.settings = settings
        self.count = settings.count(self.num_layers)
        self.state = SearchState.WAITING
        self.best: list[tuple[int, str]] = self.candidates[: self.count]
        self.skip = as_skip(self.best)
        self.best_score: float | None = None
        self.last_score: float | None = None
        self.iterations = 0
        self.stale = 0
        self.search_seconds = 0.0
        self.parts: dict[str, float] = {}
        self.generator = torch.Generator().manual_seed(self.seed)
        self.rows: list[torch.Tensor] = []  # the target's final hidden rows, newest last
        self.held = 0  # positions those rows cover (the last ones of the cache)
        self.scored: tuple[int, list[int], torch.Tensor] | None = None  # (start, ids, argmax)
        self.resolved = False  # has a `propose` of this generation read its config yet?

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        settings = self.defaults.resolved(config)
        start = as_skip(self.candidates[: settings.count(self.num_layers)])
        return {
            "skip_ratio": settings.skip_ratio,
            "search_window": settings.window,
            "draft_confidence": settings.confidence,
            "search_state": SearchState.WAITING.value,
            **start.record(),
        }

    def progress(self) -> SwiftProgress:
        return SwiftProgress(
            state=self.state,
            iterations=self.iterations,
            max_iterations=self.settings.max_iterations,
            best_score=self.best_score,
            last_score=self.last_score,
            window=self.settings.window,
            skip=self.skip,
            search_seconds=self.search_seconds,
        )

    def status(self) -> DrafterStatus:
        """The set drafting now and the search's progress, for each step's `Step.status`."""
        search = SearchProgress(
            state=self.state,
            iterations=self.iterations,
            max_iterations=self.settings.max_iterations,
            best_score=self.best_score,
            last_score=self.last_score,
        )
        return DrafterStatus(skipped=skipped_layers(self.skip, self.num_layers), search=search)

    def draft_parts(self) -> dict[str, float]:
        return dict(self.parts)

    def attach(self, target: Target) -> None:
        check(target.model, self.skip)
        self.target = target

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        if self.target is None:
            raise SpecdecError("SWIFT drafts through the target: attach it first")
        self._reset(self.defaults)
        self.rows, self.held = [features.hidden], features.hidden.shape[0]

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        started = now(self.target.device)
        if not self.resolved:  # the first step: this generation's settings
            rows, held = self.rows, self.held
            self._reset(self.defaults.resolved(config))
            self.rows, self.held, self.resolved = rows, held, True
            self._keep_rows(rows[0][:0])
        if not self.state.done:
            self._search(ids)
        searched = now(self.target.device)
        self.search_seconds += searched - started
        proposal = EMPTY
        if config.k > 0:
            confidence = self.settings.confidence
            proposal = draft_chain(self.target, ids, self.skip, config, generator, confidence)
        self.parts = {"search": searched - started, "draft": now(self.target.device) - searched}
        return proposal

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        if self.scored is None:  # the window is not fixed yet: keep the newest rows
            self._keep_rows(features.hidden)

    def _keep_rows(self, hidden: torch.Tensor) -> None:
        if hidden.shape[0]:
            self.rows.append(hidden)
            self.held += hidden.shape[0]
        while self.rows and self.held - self.rows[0].shape[0] >= self.settings.window:
            self.held -= self.rows.pop(0).shape[0]

    @torch.inference_mode()
    def _search(self, ids: list[int]) -> None:
        if self.scored is None:
            cached = len(ids) - 1
            window = self.settings.window
            if self.held < window or cached < window:
                return  # WAITING: too little context yet
            start = cached - window
            hidden = torch.cat(self.rows)[-window:]  # rows of positions start..cached-1
            argmax = self.target.model.lm_head(hidden).argmax(-1)  # [window]
            self.scored = (start, ids[start:cached], argmax)
            self.rows, self.held = [], 0
            self.state = SearchState.SEARCHING
        for _ in range(self.settings.per_step):
            sublayers = self._next_set()
            score = self._score(as_skip(sublayers))
            self.iterations += 1
            self.last_score = score
            if self.best_score is None or score > self.best_score:
                self.best, self.best_score, self.stale = sublayers, score, 0
                self.skip = as_skip(sublayers)
            else:
                self.stale += 1
            if self.best_score >= self.settings.target_score:
                self.state = SearchState.REACHED
            elif self.stale >= self.settings.patience:
                self.state = SearchState.STALLED
            elif self.iterations >= self.settings.max_iterations:
                self.state = SearchState.EXHAUSTED
            if self.state.done:
                return

    def _next_set(self) -> list[tuple[int, str]]:
        """The starting set first, then alternately a random set and a local move."""
        if self.iterations == 0:
            return list(self.best)
        pool = self.candidates
        if self.iterations % 2:
            order = torch.randperm(len(pool), generator=self.generator)[: self.count]
            return [pool[i] for i in sorted(order.tolist())]
        kept = [c for c in pool if c not in self.best]
        if not kept:
            return list(self.best)
        out = int(torch.randint(len(self.best), (1,), generator=self.generator))
        into = int(torch.randint(len(kept), (1,), generator=self.generator))
        return [*self.best[:out], *self.best[out + 1 :], kept[into]]

    def _score(self, skip: SkipSet) -> float:
        """The matching rate of `skip` on the window (module docstring)."""
        start, tokens, argmax = self.scored
        view = prefix_view(self.target.cache, start)
        logits = forward_subset(self.target, tokens, start, skip, cache=view, last_only=False)
        return float((logits.argmax(-1) == argmax).float().mean())


def build_swift(target: LoadedModel, extra, history, costs, acceptance) -> Drafter:
    """The registry's builder: SWIFT's defaults."""
    return SwiftDrafter(target.model.config.get_text_config(decoder=True).num_hidden_layers)
