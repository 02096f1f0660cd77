"""The tree machinery on tiny random models: tree mask, cache compaction, sibling-wise sampling.

A test-local drafter proposes a fixed-shape tree (each node's top-b children under a classic
draft model), so these tests prove `Target.forward(parents=…)`, `kv_cache.keep` and
`verify_tree` independently of any EAGLE head.
"""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.prefix_cache import PrefixCache
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.sampling import probs
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.loop.decode import generate
from specdec_core.loop.drafter import Drafter
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue
from tests.tiny import VOCAB, prompt, tiny_model

EOS = 2
# parents per node, parents first (-1 = child of the pending token): branches of depth 1..4
TREES = {
    "chain": (-1, 0, 1),
    "star": (-1, -1, -1, -1),
    "mixed": (-1, -1, 0, 0, 1, 2, 2, 5, -1, 8),
}


class TopKTreeDrafter(Drafter):
    """Fixed-shape tree: at depth d every node gets the draft model's top-`branching[d]` tokens."""

    name = "topk-tree"

    def __init__(self, draft, branching: tuple[int, ...] = (3, 2, 1)) -> None:
        self.draft = draft
        self.branching = branching

    def begin(self, ids: list[int], features: TargetOutput) -> None:
        pass

    @torch.inference_mode()
    def propose(self, ids: list[int], config: DecodeConfig, generator) -> Proposal:
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []
        frontier: list[tuple[int, list[int], float]] = [(-1, [], 0.0)]  # (node, path, score)
        for width in self.branching:
            batch = torch.tensor([ids + path for _, path, _ in frontier])  # [f, s]
            logp = self.draft(batch).logits[:, -1].float().log_softmax(-1)  # [f, V]
            top = logp.topk(width, dim=-1)
            grown = []
            for (node, path, score), values, children in zip(
                frontier, top.values.tolist(), top.indices.tolist(), strict=True
            ):
                for value, child in zip(values, children, strict=True):
                    tokens.append(child)
                    parents.append(node)
                    scores.append(score + value)
                    grown.append((len(tokens) - 1, [*path, child], score + value))
            frontier = grown
        return Proposal(tokens=tokens, parents=tuple(parents), scores=tuple(scores))

    def commit(self, ids: list[int], accepted: int, features: TargetOutput) -> None:
        pass


def _path(parents: tuple[int, ...], node: int) -> list[int]:
    """Node indices from the root down to `node`."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def _leaves(parents: tuple[int, ...]) -> list[int]:
    return [node for node in range(len(parents)) if node not in parents]


def _chain(model, ids: list[int]) -> TargetOutput:
    """Fresh cache: prefill ids[:-2], forward the last two as a plain causal chain."""
    runner = Target(model)
    runner.prefill(ids[:-2])
    return runner.forward(ids[-2:])


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("shape", list(TREES))
def test_tree_logits_equal_each_path_run_alone(attention, shape):
    model = tiny_model(seed=1)
    model.set_attn_implementation(attention)
    parents = TREES[shape]
    tokens = [3 + (5 * i) % (VOCAB - 3) for i in range(len(parents))]
    ids = prompt(length=6)
    runner = Target(model)
    runner.prefill(ids[:-1])
    tree = runner.forward([ids[-1], *tokens], parents)  # [n+1, V]
    for leaf in _leaves(parents):
        path = _path(parents, leaf)
        alone = Target(model)
        alone.prefill(ids[:-1])
        chain = alone.forward([ids[-1], *(tokens[node] for node in path)])
        rows = torch.tensor([0, *(node + 1 for node in path)])
        torch.testing.assert_close(tree.logits[rows], chain.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(tree.hidden[rows], chain.hidden, atol=1e-5, rtol=1e-4)


def _assert_cache_equals_prefill(runner: Target, model, ids: list[int]) -> None:
    fresh = Target(model)
    fresh.prefill(ids)
    assert runner.length == fresh.length == len(ids)
    for ours, theirs in zip(runner.cache.layers, fresh.cache.layers, strict=True):
        torch.testing.assert_close(ours.keys, theirs.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ours.values, theirs.values, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", list(TREES))
def test_keep_compacts_cache_to_a_fresh_prefill_of_the_accepted_path(shape):
    model = tiny_model(seed=1)
    parents = TREES[shape]
    ids = prompt(length=6)
    runner = Target(model)
    runner.prefill(ids[:-1])
    for step in range(3):  # several steps: compaction, then another tree on top of it
        tokens = [3 + (7 * i + step) % (VOCAB - 3) for i in range(len(parents))]
        start = runner.length
        runner.forward([ids[-1], *tokens], parents)
        path = _path(parents, _leaves(parents)[step % len(_leaves(parents))])[: step + 1]
        runner.keep(start, [0, *(node + 1 for node in path)])
        ids = [*ids, *(tokens[node] for node in path), 4 + step]
        _assert_cache_equals_prefill(runner, model, ids[:-1])
    # and the compacted cache decodes on exactly like a fresh one
    torch.testing.assert_close(
        runner.forward(ids[-1:]).logits, _chain(model, ids).logits[-1:], atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize("branching", [(3, 2, 1), (2, 2, 2, 2), (4,)])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_tree_output_equals_target_greedy(tiny_target, tiny_draft, branching, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40)
    reference = run(tiny_target, "ar", ids, config)
    drafter = TopKTreeDrafter(tiny_draft.model, branching)
    steps, summary = [], None
    for event in generate(tiny_target, drafter, ids, config):
        steps += [event] if isinstance(event, Step) else []
        summary = event.summary if isinstance(event, Finished) else summary
    assert summary.token_ids == reference.token_ids
    assert summary.steps < reference.steps  # the tree did accept something
    assert all(step.tree is not None and len(step.tree.accepted) == step.accepted for step in steps)


@torch.inference_mode()
def joint_first_two(model, ids: list[int], temperature: float, top_p: float) -> torch.Tensor:
    """Exact target distribution of the first two generated tokens (EOS then EOS).  # [V * V]"""
    first = probs(model(torch.tensor([ids])).logits[0, -1], temperature, top_p)  # [V]
    batch = torch.tensor([[*ids, x] for x in range(VOCAB)])  # [V, s+1]
    second = probs(model(batch).logits[:, -1], temperature, top_p)  # [V, V]
    second[EOS] = torch.nn.functional.one_hot(torch.tensor(EOS), VOCAB)  # generation stops
    return (first[:, None] * second).flatten()


def sample_first_two(target, drafter, ids, config, samples: int, seed: int):
    """(x1 * V + x2) per run and the number of runs whose first step accepted a draft."""
    generator = torch.Generator().manual_seed(seed)
    drawn, accepted = [], 0
    kept = PrefixCache()  # the prompt is prefilled once, its cached values reused bit for bit
    for _ in range(samples):
        first_step = True
        for event in generate(target, drafter, ids, config, generator=generator, prefix=kept):
            if isinstance(event, Step) and first_step:
                accepted += event.accepted > 0
                first_step = False
            if isinstance(event, Finished):
                x1, x2 = (*event.summary.token_ids, EOS)[:2]
                drawn.append(x1 * VOCAB + x2)
    return drawn, accepted


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_tree_sampling_follows_target_distribution(tiny_target, tiny_draft, temperature, top_p):
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, temperature=temperature, top_p=top_p)
    drafter = TopKTreeDrafter(tiny_draft.model, (3, 2))
    samples = 3000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=11)
    expected = joint_first_two(tiny_target.model, ids, temperature, top_p)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted  # the tree path, not only the residual, was exercised


def test_tree_sampling_test_detects_a_biased_rule(tiny_target, tiny_draft, monkeypatch):
    """Power check: accepting the first child whenever p(x) > 0 must fail the same test."""
    import specdec_core.verifiers.tree as tree_module

    real_rand = torch.rand
    monkeypatch.setattr(tree_module.torch, "rand", lambda *a, **k: real_rand(*a, **k) * 1e-6)
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, temperature=1.0)
    drafter = TopKTreeDrafter(tiny_draft.model, (3, 2))
    drawn, _ = sample_first_two(tiny_target, drafter, ids, config, 600, seed=11)
    monkeypatch.undo()
    expected = joint_first_two(tiny_target.model, ids, 1.0, 1.0)
    with pytest.raises(AssertionError):
        assert chi_square_pvalue(drawn, expected) > 1e-3


def test_verify_tree_accepts_a_sibling_holding_all_the_remaining_mass():
    """Rounding can leave p(x) just under 1 with nothing else: rejecting x would divide by 0."""
    from specdec_core.verifiers import make_verifier
    from specdec_core.verifiers.tree import verify_tree

    p = torch.zeros(3, VOCAB)
    p[0, 7] = 0.5  # all the mass of row 0, unnormalised as after float rounding
    p[1:, 5] = 1.0
    proposal = Proposal(tokens=[7, 9], parents=(-1, 0))
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        path, token = verify_tree(proposal, p, generator, make_verifier("lossless"))
        assert (path, token) == ([0], 5)


def test_the_cache_reaches_the_model_under_the_installed_transformers_name():
    """transformers renamed `past_key_values` to `cache` in 5.x: a wrong name is swallowed by
    **kwargs and the cache silently stays empty."""
    from specdec_core.decoding import kv_cache

    model = tiny_model(seed=1)
    cache = kv_cache.new_cache(model.config)
    model(torch.tensor([prompt(length=6)]), **kv_cache.cache_arg(cache), use_cache=True)
    assert kv_cache.cache_length(cache) == 6


def _sampled_proposal(q: torch.Tensor, draws: int, lookup: int | None, generator) -> Proposal:
    """Children of the root drawn i.i.d. from q (a token drawn twice is one node drawn
    twice), plus a deterministic lookup child with a one-hot q, tried last."""
    from specdec_core.decoding.sampling import sample_many

    tokens: list[int] = []
    order: list[int] = []
    for token in sample_many(q, draws, generator):
        if token not in tokens:
            tokens.append(token)
        order.append(tokens.index(token))
    rows = [q] * len(tokens)
    if lookup is not None and lookup not in tokens:
        tokens.append(lookup)
        order.append(len(tokens) - 1)
        rows.append(torch.nn.functional.one_hot(torch.tensor(lookup), q.shape[-1]).float())
    return Proposal(
        tokens=tokens,
        q=torch.stack(rows),
        parents=(-1,) * len(tokens),
        draws=tuple(order),
    )


@pytest.mark.parametrize("lookup", [None, 4])
def test_sampled_siblings_with_repeats_and_a_lookup_child_emit_the_target_distribution(lookup):
    """Recursive rejection sampling over i.i.d. draws (and a deterministic child) is exact."""
    from specdec_core.verifiers import make_verifier
    from specdec_core.verifiers.tree import verify_tree

    vocab = 8
    target = torch.tensor([0.05, 0.3, 0.0, 0.25, 0.1, 0.2, 0.05, 0.05])
    draft = torch.tensor([0.3, 0.1, 0.2, 0.3, 0.0, 0.05, 0.05, 0.0])  # far from the target
    generator = torch.Generator().manual_seed(5)
    firsts, accepted, repeats = [], 0, 0
    for _ in range(6000):
        proposal = _sampled_proposal(draft, 3, lookup, generator)
        p = torch.zeros(len(proposal.tokens) + 1, vocab)
        p[0] = target
        p[1:, 1] = 1.0
        path, token = verify_tree(proposal, p, generator, make_verifier("lossless"))
        firsts.append(proposal.tokens[path[0]] if path else token)
        accepted += bool(path)
        repeats += len(proposal.draws) > len(set(proposal.draws))
    assert chi_square_pvalue(firsts, target) > 1e-3
    assert accepted > 3000 and repeats > 1000  # both branches and repeated draws exercised
