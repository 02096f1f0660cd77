"""The decode loop: one generator for every method.

    prefill(prompt[:-1])
    while not done:
        proposal = drafter.propose(ids)                  # chain of k tokens, or a tree
        out = target.forward([pending, *proposal])       # ONE target forward
        verdict = verifier(proposal, p, q)               # accepted path + correction/bonus
        target.keep(path); drafter.commit(...)           # KV rollback / compaction
        yield Step(...)

Contract: yields `Started`, one `Step` per target forward after the prefill, then `Finished`.
The caller owns randomness (a `torch.Generator`) and cancellation (`stop`, anything with
`is_set()`, checked between steps, and by a drafter's first tree sizing between its timed
forwards, through `ForwardCosts.watching`: a run stopped there ends before its prefill).
Timings synchronise CUDA before reading the clock (step_clock.py); each `Step` carries its
`StepPhases` (draft, target forward, acceptance, cache keep, commit, loop), which add up to
the step's wall time, and the summary their sums.
Every drafter is handed each step's target forward and its time (`observe`) before its
`commit`: a drafter that sizes its tree by forward costs follows the machine from it. Each
`Step` carries the drafter's `status()` after its `commit`, where it publishes one.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from specdec_core.control import StopFlag
from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.detokenize import IncrementalDetokenizer
from specdec_core.decoding.events import (
    DraftTree,
    Event,
    Finished,
    RunSummary,
    Started,
    Step,
    StepPhases,
    Token,
)
from specdec_core.decoding.events import TokenKind as Kind
from specdec_core.decoding.forward_costs import TimingStopped
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs
from specdec_core.decoding.step_clock import Laps, now
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.errors import SpecdecError
from specdec_core.loop.adaptive import apply_schedule
from specdec_core.loop.drafter import Drafter
from specdec_core.models.loading import LoadedModel
from specdec_core.verifiers import ChainVerifier, LosslessVerifier, make_verifier
from specdec_core.verifiers.greedy import argmax_ids, verify_greedy
from specdec_core.verifiers.lossy import policy_probs
from specdec_core.verifiers.tree import verify_tree


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def generate(
    target: LoadedModel,
    drafter: Drafter,
    prompt_ids: list[int],
    config: DecodeConfig,
    *,
    method: str | None = None,
    verifier: ChainVerifier | None = None,
    stop: StopFlag | None = None,
    generator: torch.Generator | None = None,
    started_info: dict | None = None,
    prefix: PrefixCache | None = None,
) -> Iterator[Event]:
    if not prompt_ids:
        raise SpecdecError("the prompt is empty; type a prompt or pass --prompt TEXT")
    if len(prompt_ids) >= target.context_length:
        raise SpecdecError(
            f"the prompt has {len(prompt_ids)} tokens but the model's context is "
            f"{target.context_length}; shorten the prompt"
        )
    verifier = verifier or make_verifier(config.policy, **config.policy_params)
    drafter = apply_schedule(drafter, config)  # a fixed k, or a wrapper that adapts it
    generator = generator or make_generator(config.seed, target.device)
    runner = Target(target.model, drafter.feature_layers)
    detok = IncrementalDetokenizer(target.tokenizer, prompt_ids)
    eos = target.eos_ids
    method = method or drafter.name
    greedy = config.greedy and isinstance(verifier, LosslessVerifier)
    info = {**config.as_dict(), "policy": verifier.name, "lossy": verifier.lossy}
    try:
        info.update(drafter.describe(config))  # e.g. the tree size a drafter chose
    except TimingStopped:  # Stop while a first tree run timed forwards: stopped before prefill
        yield Started(len(prompt_ids), method, {**info, **(started_info or {})})
        yield Finished(_stopped_before_prefill(method, verifier, prompt_ids, info))
        return
    yield Started(len(prompt_ids), method, {**info, **(started_info or {})})

    started = now(target.device)
    ids = list(prompt_ids)
    kept = _Kept(prefix, target.model, drafter.feature_layers)
    features = kept.prefill(runner, ids)
    drafter.attach(runner)
    drafter.begin(ids, features)
    laps = Laps(target.device)  # from here on every clock read ends a phase (StepPhases)
    prefill_seconds = laps.mark - started
    new: list[int] = []
    stats = _Stats()
    reason = "max_tokens"
    try:
        while True:
            if stop is not None and stop.is_set():
                reason = "stopped"
                break
            room = min(config.max_new_tokens - len(new), target.context_length - len(ids))
            if room <= 0:
                reason = "max_tokens" if len(new) >= config.max_new_tokens else "context"
                break
            laps.lap("loop")
            proposal = drafter.propose(ids, config, generator)
            forward_start = laps.lap("draft")
            start = runner.length
            out = runner.forward([ids[-1], *proposal.tokens], proposal.parents)
            forward_end = laps.lap("target")
            if greedy:  # the lossless rule at T = 0 on the argmax ids (verifiers/greedy.py)
                path, next_token = verify_greedy(proposal, argmax_ids(out.logits))
                p_target = [1.0] * (len(path) + 1)  # every emitted token is its row's argmax
            else:
                p = probs(out.logits, config.temperature, config.top_p)  # [n+1, V]
                path, next_token = verify_proposal(
                    proposal, p, verifier, generator, _soft(verifier, out, config, p)
                )
                p_target = _p_target(p, path, [*(proposal.tokens[n] for n in path), next_token])
            laps.lap("accept")
            runner.keep(start, [0, *(node + 1 for node in path)])
            laps.lap("keep")
            emitted = [proposal.tokens[node] for node in path] + [next_token]
            ids.extend(emitted)
            rows = select_rows(out, [0, *(node + 1 for node in path)])
            drafter.observe(out, path, forward_end - forward_start)
            drafter.commit(ids, len(path), rows)
            kept.add(rows)
            laps.lap("commit")

            tokens = _tokens(emitted, proposal, path, p_target, detok, stats.steps)
            done = next((i for i, t in enumerate(emitted) if t in eos), None)
            keep = min(len(tokens), room, done + 1 if done is not None else len(tokens))
            new.extend(emitted[:keep])
            tree = _tree(proposal, path)
            rejected = _rejected(proposal, path, stats.steps, target.tokenizer)
            laps.lap("loop")
            phases = StepPhases(**laps.take(), draft_parts=dict(drafter.draft_parts()))
            stats.add(proposal, len(path), phases)
            yield Step(
                index=stats.steps - 1,
                tokens=tuple(tokens[:keep]),
                drafted=len(proposal.tokens),
                accepted=len(path),
                tree=tree,
                rejected=rejected,
                phases=phases,
                status=drafter.status(),
            )
            if done is not None and done < keep:
                reason = "eos"
                break
    except GeneratorExit:  # the consumer stopped at a yield: the cache is consistent there
        kept.save(ids, runner.cache, len(prompt_ids) + len(new))
        raise
    except BaseException:  # mid-step: what the cache holds is unknown
        kept.drop()
        raise
    kept.save(ids, runner.cache, len(prompt_ids) + len(new))

    wall = laps.lap("loop") - started  # the tail after the last step is the loop's too
    phases = stats.phases + StepPhases(**laps.take())
    summary = RunSummary(
        method=method,
        policy=verifier.name,
        lossy=verifier.lossy,
        prompt_tokens=len(prompt_ids),
        new_tokens=len(new),
        token_ids=tuple(new),
        text=target.tokenizer.decode(new, skip_special_tokens=True),
        steps=stats.steps,
        wall_seconds=wall,
        prefill_seconds=prefill_seconds,
        stop_reason=reason,
        reused_tokens=kept.reused,
        accepted_per_position=tuple(stats.accepted),
        drafted_per_position=tuple(stats.drafted),
        config=info,
        phases=phases,
    )
    yield Finished(summary)


def _stopped_before_prefill(
    method: str, verifier: ChainVerifier, prompt_ids: list[int], info: dict
) -> RunSummary:
    """The summary of a run Stop ended before its prefill: no tokens, no steps, no time."""
    return RunSummary(
        method=method,
        policy=verifier.name,
        lossy=verifier.lossy,
        prompt_tokens=len(prompt_ids),
        new_tokens=0,
        token_ids=(),
        text="",
        steps=0,
        wall_seconds=0.0,
        prefill_seconds=0.0,
        stop_reason="stopped",
        config=info,
    )


class _Kept:
    """What a run leaves in its `PrefixCache` (nothing without one): the target's cache and
    one feature row per cached position."""

    def __init__(self, prefix: PrefixCache | None, model, feature_layers: tuple[int, ...]):
        self.prefix, self.model, self.feature_layers = prefix, model, feature_layers
        self.rows: list[TargetOutput] = []
        self.reused = 0

    def prefill(self, runner: Target, ids: list[int]) -> TargetOutput:
        """Prefill `ids[:-1]`, taking from the prefix cache what it already holds."""
        prefix = self.prefix
        self.reused = prefix.reusable(self.model, ids, self.feature_layers) if prefix else 0
        if not self.reused:
            features = runner.prefill(ids[:-1])
        else:
            runner.cache = prefix.take(self.reused)
            hidden, layers = prefix.features(self.reused)
            fresh = runner.prefill(ids[self.reused : -1])
            features = TargetOutput(
                None,
                torch.cat([hidden, fresh.hidden]),
                tuple(torch.cat(pair) for pair in zip(layers, fresh.layer_hidden, strict=True)),
            )
        if prefix is not None:
            prefix.clear()  # until `save`, the cache is the run's, not the conversation's
            self.rows = [features]
        return features

    def add(self, rows: TargetOutput) -> None:
        if self.prefix is not None:
            self.rows.append(rows)

    def save(self, ids: list[int], cache, conversation: int) -> None:
        """The cache covers `ids[:-1]` (all but the pending token); keep at most the first
        `conversation` positions (prompt + output: not tokens drafted past the end)."""
        if self.prefix is None:
            return
        length = min(len(ids) - 1, conversation)
        kv_cache.truncate(cache, length)
        hidden = torch.cat([r.hidden for r in self.rows])[:length]
        layers = tuple(
            torch.cat(group)[:length]
            for group in zip(*(r.layer_hidden for r in self.rows), strict=True)
        )
        self.prefix.store(self.model, ids[:length], cache, hidden, layers, self.feature_layers)
        self.prefix.reused = self.reused

    def drop(self) -> None:
        if self.prefix is not None:
            self.prefix.clear()


def verify_proposal(
    proposal: Proposal,
    p: torch.Tensor,
    verifier: ChainVerifier,
    generator: torch.Generator,
    p_soft: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """Accepted node indices (root to leaf) and the target's next token, for a chain (by
    `verifier`) or a tree (`verify_tree`); `p` [n+1, V] is the target's distribution per row."""
    if proposal.is_tree:
        return verify_tree(proposal, p, generator, verifier, p_soft)
    draft = torch.tensor(proposal.tokens, dtype=torch.long, device=p.device)
    verdict = verifier.verify(draft, proposal.q, p, generator, p_soft=p_soft)
    return list(range(verdict.accepted)), verdict.next_token


def _soft(
    verifier: ChainVerifier, out: TargetOutput, config: DecodeConfig, p: torch.Tensor
) -> torch.Tensor | None:
    """π for lossy policies that score the target's distribution (`verifiers.lossy`); else None.
    Above T = 0 it is `p`, the rows' distribution the step computed already."""
    if not verifier.needs_soft_p:
        return None
    return policy_probs(out.logits, config.temperature, config.top_p, p)  # [n+1, V]


def _p_target(p: torch.Tensor, path: list[int], emitted: list[int]) -> list[float]:
    """The target's probability of each emitted token, in the row that scored it."""
    rows = [0, *(node + 1 for node in path)]
    return p[rows, emitted].tolist()


def _tokens(
    emitted: list[int],
    proposal: Proposal,
    path: list[int],
    p_target: list[float],
    detok: IncrementalDetokenizer,
    step: int,
) -> list[Token]:
    tokens = []
    for i, token_id in enumerate(emitted):
        if i < len(path):
            kind = Kind.ACCEPTED_DRAFT
            q = proposal.q[path[i], token_id].item() if proposal.q is not None else 1.0
        else:
            kind = (
                Kind.TARGET
                if not proposal.tokens
                else (Kind.BONUS if _is_full(proposal, path) else Kind.CORRECTION)
            )
            q = None
        tokens.append(Token(token_id, detok.push(token_id), kind, step, p_target[i], q))
    return tokens


def _is_full(proposal: Proposal, path: list[int]) -> bool:
    """Was the whole draft accepted (chain), or did the path reach a leaf (tree)?"""
    if not proposal.is_tree:
        return len(path) == len(proposal.tokens)
    return bool(path) and path[-1] not in proposal.parents


def _rejected(proposal: Proposal, path: list[int], step: int, tokenizer) -> tuple[Token, ...]:
    if proposal.is_tree or len(path) == len(proposal.tokens):
        return ()
    node = len(path)  # the first rejected chain position; later drafts depended on it
    q = float(proposal.q[node, proposal.tokens[node]]) if proposal.q is not None else 1.0
    token_id = proposal.tokens[node]
    return (Token(token_id, tokenizer.decode([token_id]), Kind.REJECTED_DRAFT, step, 0.0, q),)


def _tree(proposal: Proposal, path: list[int]) -> DraftTree | None:
    if not proposal.is_tree:
        return None
    return DraftTree(
        tokens=tuple(proposal.tokens),
        parents=tuple(proposal.parents),
        scores=tuple(proposal.scores),
        accepted=tuple(path),
    )


def select_rows(out: TargetOutput, rows: list[int]) -> TargetOutput:
    """The features of `rows` of a target forward, as a drafter's `commit` takes them."""
    index = torch.tensor(rows, device=out.hidden.device)
    return TargetOutput(
        logits=None,
        hidden=out.hidden[index],
        layer_hidden=tuple(h[index] for h in out.layer_hidden),
    )


class _Stats:
    def __init__(self) -> None:
        self.steps = 0
        self.phases = StepPhases()  # every step's, summed
        self.accepted: list[int] = []  # accepted[i]: steps that accepted more than i drafts
        self.drafted: list[int] = []  # drafted[i]: steps whose draft reached position i

    def add(self, proposal: Proposal, accepted: int, phases: StepPhases) -> None:
        self.steps += 1
        self.phases = self.phases + phases
        depth = proposal.depth()
        for counts, n in ((self.drafted, depth), (self.accepted, accepted)):
            counts.extend([0] * max(0, n - len(counts)))
            for i in range(n):
                counts[i] += 1
