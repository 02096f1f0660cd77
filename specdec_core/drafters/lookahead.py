"""Lookahead decoding: Jacobi iterations fill an n-gram pool, verified in the same forward.

Fu et al., ICML 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding". No draft model: every step's ONE target forward carries two branches.

- The lookahead branch is a 2-D window of W columns and N - 1 levels of guessed tokens.
  Column i of level l guesses the token at position t + i + l (t: the pending token's
  position); its context is the pending token, the oldest level's guesses of positions
  t + 1 .. t + i, and the same column's guesses at levels 1 .. l - 1. The target's argmax at
  the newest level's token of column i is one Jacobi iteration: a new guess for position
  t + i + N - 1. Read along a column, (oldest guess, level 1, ..., level N - 2, new guess)
  is an n-gram the target has produced, and it goes into the pool. The window then slides:
  the oldest level is dropped, every other level moves down (the new oldest level's column 0
  gives way to the next pending token), the new guesses become the newest level. It always
  moves by one position, however many tokens the step accepted (the reference's default).
- The verification branch: the pool's n-grams whose first token is the pending token (the
  last committed one), at most G of them, the rest of each proposed as a chain.

The pool keeps, per first token, at most G n-grams, least recently produced first out.
Optionally (`prompt_pool`) it also holds every n-gram of the prompt and of the output so far.

The window starts as W + N - 3 tokens drawn from the prompt with the run's generator; for its
first N - 2 steps it only grows a level per step (the first column of every level is dropped
each step, so it narrows to W columns as it fills) and adds nothing to the pool. A guess that
is an end-of-sequence token is replaced by a prompt token, as the reference does.

Both branches are ONE tree proposal (`Proposal.parents`: each node sees the cached prefix, its
ancestors and itself, at position prefix + depth):

    root (pending) ─ c1 ─ c2 ─ ...              verification: candidate n-grams as chains
                   ─ o1 ─ o2 ─ ... ─ o(W-1)     the oldest level: a chain from the root
    root ─ u(1,0) ─ ... ─ u(N-2,0)              column 0 hangs from the root,
    o(i) ─ u(1,i) ─ ... ─ u(N-2,i)              column i from the oldest level's column i

This is exactly the paper's attention mask: there the oldest level (after the pending token)
is causal, and a token at level l, column i sees the oldest level up to column i and its own
column's earlier levels: those are its ancestors here, and its depth is its position offset.
What the tree changes: nodes with the same token under the same parent are one node (the
candidates share common prefixes with each other and with the window, so a row is never
computed twice), and the verifier may accept window nodes as a path (a Jacobi guess that is
the target's continuation). Every node is a deterministic child (q None), so tree
verification (verifiers/tree.py) under the lossless policy is lossless: the target's greedy
output at T = 0, its distribution at T > 0. The window's own update is the argmax at any
temperature, as in the reference; it only chooses what is proposed, never what is accepted.

The target's rows of the window reach the drafter through `observe(out, path)`; the window
moves there, before `commit`. W, N, G are the constructor's defaults, overridden per run by
the method parameters `window`, `ngram_size`, `candidates` and `prompt_pool` (0 or 1) of
`DecodeConfig.method_params`. `status()` gives each `Step` the window and the pool's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import DrafterStatus, PoolStatus
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.suffix import History
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

# the paper's settings for a 7B model on an A100 are W 15, N 5, G 15 (~120 rows a step);
# on a CPU a forward costs about in proportion to its rows, so the defaults are far smaller
WINDOW = 3
NGRAM_SIZE = 3
CANDIDATES = 2
# method parameters (`--method-param NAME=VALUE`) and their defaults
PARAMS: tuple[tuple[str, float], ...] = (
    ("window", WINDOW),
    ("ngram_size", NGRAM_SIZE),
    ("candidates", CANDIDATES),
    ("prompt_pool", 0.0),
)


@dataclass(frozen=True)
class LookaheadSettings:
    window: int = WINDOW  # W: columns of the Jacobi window
    ngram_size: int = NGRAM_SIZE  # N: n-gram length; the window has N - 1 levels
    candidates: int = CANDIDATES  # G: n-grams kept per first token, all verified
    prompt_pool: bool = False  # also pool the n-grams of the prompt and the output

    def __post_init__(self) -> None:
        for name, value, least in (
            ("window", self.window, 1),
            ("ngram_size", self.ngram_size, 2),
            ("candidates", self.candidates, 0),
        ):
            if value < least:
                raise SpecdecError(
                    f"--method-param {name}={value}: lookahead needs {name} >= {least}"
                )

    def resolved(self, config: DecodeConfig) -> LookaheadSettings:
        """These settings as `config.method_params` overrides them."""
        return LookaheadSettings(
            window=config.method_int("window", self.window, "lookahead"),
            ngram_size=config.method_int("ngram_size", self.ngram_size, "lookahead"),
            candidates=config.method_int("candidates", self.candidates, "lookahead"),
            prompt_pool=bool(config.method_param("prompt_pool", float(self.prompt_pool))),
        )

    @property
    def max_nodes(self) -> int:
        """Most nodes a proposal can have: the window at its widest stage, all candidates."""
        return window_nodes(self.window, self.ngram_size) + self.candidates * (self.ngram_size - 1)


def window_nodes(window: int, ngram_size: int) -> int:
    """Most tree nodes the lookahead branch takes: at fill stage f (levels above the oldest)
    the oldest level holds W + N - 3 - f guesses and each of the f others W + N - 2 - f."""
    extra = ngram_size - 2
    return max((window + extra - 1 - f) + f * (window + extra - f) for f in range(extra + 1))


class NgramPool:
    """n-grams keyed by their first token; at most `per_key` per key, the least recently
    added (or re-added) dropped first."""

    def __init__(self, size: int, per_key: int) -> None:
        self.size = size  # n: tokens per n-gram, the key included
        self.per_key = per_key
        self.entries: dict[int, list[tuple[int, ...]]] = {}  # key -> continuations, oldest first

    def add(self, gram: Sequence[int]) -> None:
        if len(gram) != self.size or self.per_key <= 0:
            return
        kept = self.entries.setdefault(gram[0], [])
        rest = tuple(gram[1:])
        if rest in kept:
            kept.remove(rest)
        elif len(kept) >= self.per_key:
            del kept[0]
        kept.append(rest)

    def add_sequence(self, ids: Sequence[int], start: int = 0) -> None:
        """Every n-gram of `ids` that ends at index `start` or later."""
        for end in range(max(start, self.size - 1), len(ids)):
            self.add(ids[end + 1 - self.size : end + 1])

    def __len__(self) -> int:
        """n-grams held."""
        return sum(len(kept) for kept in self.entries.values())

    def candidates(self, key: int) -> list[tuple[int, ...]]:
        """The continuations of `key`, most recent first."""
        return self.entries.get(key, [])[::-1]


class JacobiWindow:
    """The lookahead branch's guesses: `oldest` (the oldest level, columns 1.. of it; column
    0 is the pending token) and `upper` (levels 1.. filled so far, one token per column)."""

    def __init__(self, oldest: list[int], levels: int) -> None:
        self.oldest = oldest
        self.upper: list[list[int]] = []
        self.levels = levels  # N - 1 when full

    @property
    def width(self) -> int:
        return len(self.oldest) + 1

    @property
    def full(self) -> bool:
        return len(self.upper) == self.levels - 1

    def grams(self, pending: int, new: Sequence[int]) -> list[tuple[int, ...]]:
        """The n-gram each column traced, ending in its new guess (none while filling)."""
        if not self.full:
            return []
        heads = [pending, *self.oldest]
        return [(heads[i], *(level[i] for level in self.upper), new[i]) for i in range(self.width)]

    def advance(self, new: list[int]) -> None:
        """Slide by one position with the new guesses (one per column)."""
        if self.full:
            stack = [*self.upper, new]
            self.oldest, self.upper = stack[0][1:], stack[1:]
        else:
            self.oldest = self.oldest[1:]
            self.upper = [level[1:] for level in self.upper] + [new[1:]]

    def replace(self, unwanted: set[int], draw) -> None:
        """Replace every guess in `unwanted` by `draw()`."""
        for level in (self.oldest, *self.upper):
            for i, token in enumerate(level):
                if token in unwanted:
                    level[i] = draw()


class TreeBuilder:
    """Tree nodes (parents first); a token added twice under one parent is one node."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.index: dict[tuple[int, int], int] = {}

    def add(self, parent: int, token: int) -> int:
        node = self.index.get((parent, token))
        if node is None:
            node = len(self.tokens)
            self.tokens.append(token)
            self.parents.append(parent)
            self.index[(parent, token)] = node
        return node

    def chain(self, parent: int, tokens: Iterable[int]) -> list[int]:
        nodes = []
        for token in tokens:
            parent = self.add(parent, token)
            nodes.append(parent)
        return nodes


def lookahead_tree(
    window: JacobiWindow, candidates: Sequence[Sequence[int]]
) -> tuple[Proposal, list[int]]:
    """The proposal of both branches, and the node whose row makes each column's new guess
    (-1: the root, column 0 of a window with no level above the oldest)."""
    tree = TreeBuilder()
    for candidate in candidates:
        tree.chain(-1, candidate)
    oldest = tree.chain(-1, window.oldest)
    last = []
    for i in range(window.width):
        anchor = oldest[i - 1] if i else -1
        column = tree.chain(anchor, (level[i] for level in window.upper))
        last.append(column[-1] if column else anchor)
    proposal = Proposal(
        tokens=tree.tokens, parents=tuple(tree.parents), scores=(0.0,) * len(tree.tokens)
    )
    return proposal, last


class LookaheadDrafter(Drafter):
    name = "lookahead"

    def __init__(
        self, settings: LookaheadSettings | None = None, eos_ids: Iterable[int] = ()
    ) -> None:
        self.defaults = settings or LookaheadSettings()
        self.eos_ids = set(eos_ids)
        self.settings = self.defaults
        self.prompt: list[int] = []  # what the window's guesses are drawn from
        self.pool = NgramPool(self.defaults.ngram_size, self.defaults.candidates)
        self.window: JacobiWindow | None = None
        self.last: list[int] = []  # per column, the node whose row makes its new guess
        self.pending = -1  # the pending token of the latest proposal
        self.committed = 0  # tokens of the sequence already in the pool (prompt_pool)

    def describe(self, config: DecodeConfig) -> dict[str, Any]:
        chosen = self.defaults.resolved(config)
        return {
            "window": chosen.window,
            "ngram_size": chosen.ngram_size,
            "candidates": chosen.candidates,
            "prompt_pool": chosen.prompt_pool,
        }

    def status(self) -> DrafterStatus:
        """The window and the pool's size, for each step's `Step.status`."""
        settings = self.settings
        return DrafterStatus(pool=PoolStatus(settings.window, settings.ngram_size, len(self.pool)))

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.prompt = [token for token in ids if token not in self.eos_ids] or list(ids)
        self.window = None  # made by the first `propose`, which has the settings and generator
        self.last = []

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        if self.window is None:
            self._start(ids, config, generator)
        window = self.window
        window.replace(self.eos_ids, lambda: self._prompt_tokens(generator, 1)[0])
        candidates = self.pool.candidates(ids[-1])[: self.settings.candidates]
        proposal, self.last = lookahead_tree(window, candidates)
        self.pending = ids[-1]
        return proposal

    def observe(self, out: TargetOutput, path: list[int], seconds: float | None = None) -> None:
        if self.window is None or not self.last:
            return
        rows = torch.tensor([node + 1 for node in self.last], device=out.logits.device)
        new = out.logits[rows].argmax(-1).tolist()
        for gram in self.window.grams(self.pending, new):
            self.pool.add(gram)
        self.window.advance(new)
        self.last = []

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        if self.settings.prompt_pool:
            self.pool.add_sequence(ids, self.committed)
            self.committed = len(ids)

    def _start(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> None:
        self.settings = settings = self.defaults.resolved(config)
        self.pool = NgramPool(settings.ngram_size, settings.candidates)
        self.committed = 0
        if settings.prompt_pool:
            self.pool.add_sequence(ids)
            self.committed = len(ids)
        count = settings.window + settings.ngram_size - 3
        self.window = JacobiWindow(self._prompt_tokens(generator, count), settings.ngram_size - 1)

    def _prompt_tokens(self, generator: torch.Generator, count: int) -> list[int]:
        """`count` tokens of the prompt (not its end-of-sequence tokens, where it has others),
        drawn uniformly with the run's generator."""
        picks = torch.randint(
            len(self.prompt), (count,), generator=generator, device=generator.device
        )
        return [self.prompt[i] for i in picks.tolist()]


def build_lookahead(
    target: LoadedModel,
    extra: object,
    history: History | None,
    costs: ForwardCosts,
    acceptance: AcceptanceEstimates,
) -> Drafter:
    """The registry's builder (methods.py `Builder`): the target's end-of-sequence ids are kept
    out of the window; everything else comes from the method parameters."""
    return LookaheadDrafter(eos_ids=target.eos_ids)
