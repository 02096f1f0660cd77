"""Medusa drafting: a sparse tree of the Medusa heads' top-k, verified in one target forward.

Indexing. Between steps the committed ids end with the pending token ids[-1], whose own
distribution the target gave at ids[-2]: `features.hidden[-1]` of `begin` / `commit`, the
target's last hidden state (after its final norm, the one its lm_head reads) at ids[-2]. Head
i on that state predicts the token i + 2 positions after ids[-2], i.e. i + 1 after the pending
token. The target's forward over [pending, *tree] gives at row 0 the distribution of the token
after the pending one, so the tree's depth-1 nodes are head 0's top-k, depth-2 nodes head 1's,
and so on: a path (r_0, …, r_{d-1}) is the node whose token is head d-1's rank-r_{d-1} token,
child of the path without its last rank (Medusa's cartesian candidates; the heads do not see
the path, so every node at depth d draws from head d-1's same top-k).

Tree shape. The paths are a prefix of `MC_SIM_7B_63`, FasterDecoding's published tree of 63
paths ordered by how often each was accepted with Vicuna-7B's heads (medusa_choices.py), keeping
those the heads can fill (depth at most K and `tree_depth`, ranks below TOPK and `tree_topk`).
Every prefix of it holds its paths' parents. `tree_tokens` (nodes + the pending token) takes
the first `tree_tokens − 1`; left unset (auto), the size is the one with the most expected
tokens per second on this device: the target's forward costs and the heads' step measured
once by `costs` (forward_costs.ForwardCosts, the caller's; the target's then follow the steps'
timed forwards, `target_forward_timed`), and E[τ] = 1 + Σ over the paths of
Π_d π_{r_d}(α_d), where head d's rank-r token is the target's with probability π_r(α_d) under
the rank prior of tree_sizing.py (α(r) = 1 − (1 − α)·r^(−1/2)) and α_d is head d's top-1
acceptance given the path before it was accepted, the prior until tallied from verified steps
and kept per head and sampling settings by `acceptance` (tree_sizing.AcceptanceEstimates); the
size is refitted every RESIZE_STEPS steps.

The proposal is deterministic (q None, siblings distinct tokens), so `verifiers/tree.py`
verifies it losslessly: at T = 0 the target's greedy output, at T > 0 its distribution.
Typical acceptance (lossy) on the same tree: `--policy typical` (verifiers/typical.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import Costs, ForwardCosts
from specdec_core.decoding.proposal import EMPTY, Proposal
from specdec_core.decoding.step_clock import Laps
from specdec_core.decoding.target import TargetOutput
from specdec_core.drafters.tree_sizing import AcceptanceEstimates, SizedByCosts
from specdec_core.heads.medusa.head import MedusaHeads
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel

TOPK = 10  # candidates per head (FasterDecoding's TOPK)
RESIZE_STEPS = 16  # verified steps between refits of the acceptance estimates (auto size)
Path = tuple[int, ...]  # ranks from depth 1 down

# FasterDecoding/Medusa medusa/model/medusa_choices.py, mc_sim_7b_63
MC_SIM_7B_63: tuple[Path, ...] = tuple(
    tuple(path)
    for path in [
        [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4],
        [2, 0], [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8],
        [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0],
        [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0],
        [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
        [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0],
        [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
    ]
)  # fmt: skip


def usable_paths(
    choices: tuple[Path, ...], heads: int, rows: int, depth: int | None, topk: int | None
) -> list[Path]:
    """The paths of `choices`, in order, that `heads` heads of `rows` lm-head rows can fill
    within `depth` levels and `topk` ranks (None: no limit of its own)."""
    deepest = min(heads, depth or heads)
    widest = min(TOPK, rows, topk or TOPK)
    return [path for path in choices if len(path) <= deepest and max(path) < widest]


def tree_from_paths(paths: list[Path], ids: torch.Tensor, logq: torch.Tensor) -> Proposal:
    """The proposal of `paths` (each one's parent among them) over the heads' top-k `ids`
    [K, k] (target ids, best first) and their log-probabilities `logq` [K, k]: nodes sorted by
    depth, then ranks (parents first, siblings best first); scores are summed log-probs."""
    ordered = sorted(paths, key=lambda path: (len(path), path))
    ids_list, logq_list = ids.tolist(), logq.tolist()
    index: dict[Path, int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    for path in ordered:
        parent = index[path[:-1]] if len(path) > 1 else -1
        level, rank = len(path) - 1, path[-1]
        index[path] = len(tokens)
        tokens.append(int(ids_list[level][rank]))
        parents.append(parent)
        scores.append((scores[parent] if parent >= 0 else 0.0) + logq_list[level][rank])
    return Proposal(tokens=tokens, parents=tuple(parents), scores=tuple(scores))


def rank_probs(k: int, alpha1: float) -> list[float]:
    """π_r for r = 1..k: α(r) − α(r−1) with α(r) = 1 − (1 − α₁)·r^(−1/2) (tree_sizing.py)."""
    alpha = [0.0] + [1 - (1 - alpha1) * r**-0.5 for r in range(1, k + 1)]
    return [alpha[r] - alpha[r - 1] for r in range(1, k + 1)]


def expected_taus(paths: list[Path], alphas: list[float]) -> list[float]:
    """E[τ] of the first n paths, for n = 0..len(paths), with head d's top-1 acceptance
    alphas[d] (given the path before it was accepted)."""
    pis = [rank_probs(TOPK, alpha) for alpha in alphas]
    taus, total = [1.0], 1.0
    for path in paths:
        chance = 1.0
        for level, rank in enumerate(path):
            chance *= pis[level][rank]
        total += chance
        taus.append(total)
    return taus


@dataclass(frozen=True)
class MedusaChoice:
    paths: tuple[Path, ...]  # the tree's paths, a prefix of the usable choices
    expected_tau: float
    reason: str
    costs: Costs | None = field(default=None, repr=False)  # what sized it (None: given)

    def describe(self) -> dict:
        """The chosen size for the Started event, the CLI and the benchmark JSON."""
        return {
            "tree_depth": max((len(path) for path in self.paths), default=0),
            "tree_topk": 1 + max((max(path) for path in self.paths), default=-1),
            "tree_tokens": len(self.paths) + 1,
            "tree_sizing": self.reason,
            **({"forward_costs": self.costs.describe()} if self.costs is not None else {}),
        }


class MedusaSizer:
    """The tree for a `DecodeConfig`: given, or sized for this device and refitted from what
    the target accepted (see the module docstring)."""

    def __init__(
        self,
        heads: MedusaHeads,
        target_model,
        costs: ForwardCosts,
        acceptance: AcceptanceEstimates,
        choices: tuple[Path, ...] = MC_SIM_7B_63,
    ) -> None:
        self.heads, self.target_model, self.choices = heads, target_model, choices
        self.costs, self.acceptance = costs, acceptance
        self._choices: dict[tuple, MedusaChoice] = {}
        self._config = DecodeConfig()
        self._top1: list[int] | None = None  # each head's top-1 of the latest proposal
        self._tally = [[0, 0] for _ in range(heads.num_heads)]  # per depth: trials, hits
        self._steps = 0

    def choice(self, config: DecodeConfig) -> MedusaChoice:
        key = (config.tree_depth, config.tree_topk, config.tree_tokens, *self._sampling(config))
        if key not in self._choices:
            self._choices[key] = self._choose(config)
        self._config = config
        return self._choices[key]

    def proposed(self, top1: list[int] | None) -> None:
        """Each head's top-1 target id in the tree just proposed (None: nothing proposed)."""
        self._top1 = top1

    def observe(self, ids: list[int], accepted: int) -> None:
        """Tally, per depth the target reached, whether head d's top-1 was its token; every
        RESIZE_STEPS steps blend the tallies into `acceptance` and re-size an auto tree."""
        config = self._config
        if config.tree_tokens is not None or self._top1 is None:
            return
        emitted = ids[len(ids) - accepted - 1 :]  # accepted drafts, then the target's token
        for level in range(min(len(emitted), len(self._top1))):
            self._tally[level][0] += 1
            self._tally[level][1] += emitted[level] == self._top1[level]
        self._steps += 1
        if self._steps < RESIZE_STEPS:
            return
        for level, (trials, hits) in enumerate(self._tally):
            if trials:
                self.acceptance.observe(self.key(config, level), trials, hits)
        self._tally = [[0, 0] for _ in self._tally]
        self._steps = 0
        self._choices = {key: c for key, c in self._choices.items() if key[2] is not None}

    def _sampling(self, config: DecodeConfig) -> tuple[float, float]:
        return (config.temperature, config.top_p)

    def key(self, config: DecodeConfig, level: int) -> tuple:
        """The acceptance estimates' key of head `level` (-1: the heads as a whole) under
        `config`'s sampling settings."""
        heads = self.heads
        weight = heads.lm_heads[0].weight
        return (id(heads), "medusa", str(weight.dtype), *self._sampling(config), level)

    def _choose(self, config: DecodeConfig) -> MedusaChoice:
        heads = self.heads
        paths = usable_paths(
            self.choices, heads.num_heads, heads.config.rows, config.tree_depth, config.tree_topk
        )
        alphas = [self.acceptance.acceptance(self.key(config, d)) for d in range(heads.num_heads)]
        taus = expected_taus(paths, alphas)
        if config.tree_tokens is not None:
            n = max(0, min(config.tree_tokens - 1, len(paths)))
            reason = "given"
            if n < config.tree_tokens - 1:
                reason = (
                    f"given; {config.tree_tokens} tokens capped at {n + 1}: the heads fill "
                    f"{len(paths)} paths of the Medusa tree"
                )
            return MedusaChoice(tuple(paths[:n]), taus[n], reason)
        costs = self.costs.for_sizing(self.target_model, self.key(config, -1)[:3], self.time_heads)
        draft = costs.head_seconds(1)
        best, rate = 0, 0.0
        for n in range(1, len(paths) + 1):  # the smallest tree unless a larger is faster
            seconds = costs.target_seconds(n + 1) + draft
            if taus[n] / seconds > rate * (1 + 1e-3):
                best, rate = n, taus[n] / seconds
        seconds = costs.target_seconds(best + 1) + draft
        reason = (
            f"auto: E[tau] {taus[best]:.2f} at top-1 acceptance "
            f"{'/'.join(f'{a:.2f}' for a in alphas)} by head; step {1000 * seconds:.1f} ms = "
            f"target over {best + 1} tokens {1000 * costs.target_seconds(best + 1):.1f} ms "
            f"(1 token {1000 * costs.target_seconds(1):.1f} ms) + heads {1000 * draft:.2f} ms; "
            f"{costs.text()}"
        )
        return MedusaChoice(tuple(paths[:best]), taus[best], reason, costs)

    def forward_timed(self, tokens: int, seconds: float) -> None:
        """A step's target forward over `tokens` tokens took `seconds`: the target table the
        next refit (or the owner's next run) sizes with follows it."""
        self.costs.observe_target(self.target_model, tokens, seconds)

    @torch.inference_mode()
    def time_heads(self, k: int) -> None:
        """One drafting pass of the heads (all heads on one hidden state, their top-k)."""
        weight = self.heads.lm_heads[0].weight
        hidden = torch.zeros(self.heads.config.hidden_size, device=weight.device)
        self.heads.top_tokens(hidden, TOPK)


class MedusaDrafter(SizedByCosts, Drafter):
    name = "medusa"

    def __init__(
        self,
        heads: MedusaHeads,
        target_model,
        costs: ForwardCosts | None = None,
        acceptance: AcceptanceEstimates | None = None,
        choices: tuple[Path, ...] = MC_SIM_7B_63,
    ) -> None:
        self.heads = heads
        self.sizer = MedusaSizer(
            heads,
            target_model,
            costs if costs is not None else ForwardCosts(),
            acceptance if acceptance is not None else AcceptanceEstimates(),
            choices,
        )
        self.hidden: torch.Tensor | None = None  # [h] the target's state at ids[-2]
        self.parts: dict[str, float] = {}

    def draft_parts(self) -> dict[str, float]:
        """The latest propose's head passes ("heads") and tree building ("tree")."""
        return self.parts

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        self.hidden = features.hidden[-1] if len(features.hidden) else None  # a 1-token prompt

    def propose(self, ids: list[int], config: DecodeConfig, generator: torch.Generator) -> Proposal:
        choice = self.sizer.choice(config)
        if self.hidden is None or not choice.paths:
            self.parts = {}
            self.sizer.proposed(None)
            return EMPTY
        laps = Laps(self.hidden.device)
        ids_k, logq = self.heads.top_tokens(self.hidden, TOPK)  # [K, k] each
        laps.lap("heads")
        self.sizer.proposed(ids_k[:, 0].tolist())
        proposal = tree_from_paths(list(choice.paths), ids_k, logq)
        laps.lap("tree")
        self.parts = laps.take()
        return proposal

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        self.hidden = features.hidden[-1]
        self.sizer.observe(ids, accepted)


def build_medusa(
    target: LoadedModel,
    heads: MedusaHeads,
    history: object,
    costs: ForwardCosts,
    acceptance: AcceptanceEstimates,
) -> Drafter:
    """The registry's builder: (target LoadedModel, the Medusa heads, the suffix history
    (unused), forward costs, acceptance estimates) -> the drafter."""
    return MedusaDrafter(heads, target.model, costs, acceptance)
