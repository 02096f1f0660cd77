"""Lossy policies verify trees path by path: the longest accepted path prefix wins (ties to the
lossless rule's child order), a one-path tree is verified exactly as the chain, and the lossless
tree rule is untouched."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step
from specdec_core.decoding.proposal import Proposal
from specdec_core.loop.decode import generate
from specdec_core.verifiers import VERIFIERS, make_verifier
from specdec_core.verifiers.tree import tree_paths, verify_tree
from tests.test_tree import TopKTreeDrafter
from tests.tiny import prompt

V = 8
# each lossy policy with parameters under which its rule has work to do on random rows
LOSSY = {
    "threshold": {"tau": 0.1},
    "cosine": {"tau": 0.6},
    "typical": {},
    "ngram": {"tau": 0.5},
    "hybrid": {"ngram_tau": 0.5, "logit_tau": 0.05},
    "ensemble": {"w": 0.5},
    "fly": {"entropy_threshold": 0.5, "window": 1},
}


def test_every_lossy_policy_is_covered():
    assert set(LOSSY) == {name for name in VERIFIERS if make_verifier(name).lossy}


def soft_rows(argmax: list[int], mass: float = 0.6) -> torch.Tensor:
    """Rows with `mass` on the given token and the rest spread evenly."""
    rows = torch.full((len(argmax), V), (1.0 - mass) / (V - 1))
    rows[torch.arange(len(argmax)), torch.tensor(argmax)] = mass
    return rows


def greedy(pi: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(pi.argmax(-1), V).float()


# two branches from the root, 5 then 6, each followed by the same tokens 1, 2
FORK = Proposal(tokens=[5, 6, 1, 2, 1, 2], parents=(-1, -1, 0, 2, 1, 4))


def fork_rows(approved_first: float, approved_second: float) -> torch.Tensor:
    """π for FORK: row 0 gives 5 and 6 the given mass; on both branches the target then wants
    1, 2 and, after the leaf, 3. Row i + 1 follows node i: after 5, after 6, after 1 (under 5),
    after 2 (a leaf), after 1 (under 6), after 2 (a leaf)."""
    pi = soft_rows([0, 1, 1, 2, 3, 2, 3])
    pi[0] = (1.0 - approved_first - approved_second) / (V - 2)
    pi[0, 5], pi[0, 6] = approved_first, approved_second
    return pi


def test_paths_are_listed_depth_first_in_the_order_children_are_tried():
    assert tree_paths(FORK) == [[0, 2, 3], [1, 4, 5]]
    sampled = Proposal(  # 6 drawn first, and twice
        tokens=[5, 6, 1], parents=(-1, -1, 1), q=torch.eye(V)[[5, 6, 1]], draws=(1, 0, 1, 2)
    )
    assert tree_paths(sampled) == [[1, 2], [0]]
    assert tree_paths(Proposal(tokens=[], parents=())) == [[]]


def test_the_path_through_the_approved_token_wins():
    """The two paths differ only in their first token; threshold approves 6 and not 5."""
    pi = fork_rows(0.05, 0.3)
    path, token = verify_tree(
        FORK, greedy(pi), torch.Generator(), make_verifier("threshold", tau=0.1), pi
    )
    assert path == [1, 4, 5]
    assert token == 3  # the bonus: the argmax after the leaf


def test_equal_paths_go_to_the_child_tried_first():
    pi = fork_rows(0.3, 0.3)
    path, _ = verify_tree(
        FORK, greedy(pi), torch.Generator(), make_verifier("threshold", tau=0.1), pi
    )
    assert path == [0, 2, 3]


def test_no_approved_path_gives_the_policys_correction_at_the_root():
    pi = fork_rows(0.05, 0.05)
    path, token = verify_tree(
        FORK, greedy(pi), torch.Generator(), make_verifier("threshold", tau=0.1), pi
    )
    assert (path, token) == ([], int(pi[0].argmax()))


def test_the_next_token_is_the_policys_for_the_chosen_path():
    """6 is approved but the token after it is not: the correction comes from row 2."""
    pi = fork_rows(0.05, 0.3)
    pi[2] = soft_rows([4], mass=0.96)[0]  # after 6 the target wants 4, and 1 falls under τ
    path, token = verify_tree(
        FORK, greedy(pi), torch.Generator(), make_verifier("threshold", tau=0.1), pi
    )
    assert (path, token) == ([1], 4)


def _random_chain(k: int, seed: int, temperature: float):
    generator = torch.Generator().manual_seed(seed)
    logits = 2.0 * torch.randn(k + 1, V, generator=generator)
    pi = torch.softmax(logits, -1)
    p = pi if temperature > 0 else greedy(pi)
    q = torch.softmax(logits[:k] + torch.randn(k, V, generator=generator), -1)
    draft = torch.multinomial(q, 1, generator=generator).squeeze(-1)
    draft[1] = pi[1].argsort()[-2]  # a plausible mismatch for FLy's window to judge
    return draft, q, p, pi


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("name", list(LOSSY))
def test_a_one_path_tree_is_verified_as_the_chain(name, sampled, temperature):
    verifier = make_verifier(name, **LOSSY[name])
    k = 5
    for seed in range(12):
        draft, q, p, pi = _random_chain(k, seed, temperature)
        q = q if sampled else None  # a sampled tree carries q rows, a deterministic one none
        proposal = Proposal(
            tokens=draft.tolist(),
            q=q,
            parents=tuple(range(-1, k - 1)),
            draws=tuple(range(k)) if sampled else None,
        )
        chain_gen = torch.Generator().manual_seed(100 + seed)
        tree_gen = torch.Generator().manual_seed(100 + seed)
        verdict = verifier.verify(draft, q, p, chain_gen, p_soft=pi)
        path, token = verify_tree(proposal, p, tree_gen, verifier, pi)
        assert (path, token) == (list(range(verdict.accepted)), verdict.next_token)
        assert torch.equal(chain_gen.get_state(), tree_gen.get_state())  # same draws taken


def test_a_node_shared_by_two_paths_is_decided_once():
    """Ensemble accepts the root's child with probability 1/2 and everything below it for sure:
    one decision per node keeps that 1/2; a fresh draw per path would make it 3/4."""
    proposal = Proposal(tokens=[3, 4, 5], parents=(-1, 0, 0))
    p = torch.zeros(4, V)
    p[0, 0] = 1.0  # the target never writes 3: only the mixture can accept it
    p[1:, 4] = 0.5
    p[1:, 5] = 0.5
    verifier = make_verifier("ensemble", w=0.5)  # m(3) = 0.5 against q(3) = 1
    accepted = 0
    for seed in range(600):
        path, _ = verify_tree(proposal, p, torch.Generator().manual_seed(seed), verifier)
        accepted += bool(path)
    assert 0.43 < accepted / 600 < 0.57


def test_the_lossless_rule_ignores_the_scored_rows():
    pi = fork_rows(0.3, 0.3)
    p = torch.softmax(torch.randn(7, V, generator=torch.Generator().manual_seed(1)), -1)
    lossless = make_verifier("lossless")
    for seed in range(20):
        plain = verify_tree(FORK, p, torch.Generator().manual_seed(seed), lossless)
        given = verify_tree(FORK, p, torch.Generator().manual_seed(seed), lossless, pi)
        assert plain == given


def test_a_tree_method_runs_a_lossy_policy_in_the_decode_loop(tiny_target, tiny_draft):
    """threshold τ = 0 approves every node: each step takes a deepest path whole."""
    config = DecodeConfig(
        max_new_tokens=12, temperature=1.0, policy="threshold", policy_params={"tau": 0.0}
    )
    drafter = TopKTreeDrafter(tiny_draft.model, (2, 2))
    generator = torch.Generator().manual_seed(0)
    events = generate(tiny_target, drafter, prompt(5), config, generator=generator)
    steps = [event for event in events if isinstance(event, Step)]
    assert steps and all(step.accepted == 2 for step in steps[:-1])
