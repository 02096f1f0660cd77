"""Suffix decoding over the run history: the index, the frequency tree, the bounded store, and
`suffix` / `eagle2-suffix` lossless (equal to `ar` at T = 0, the target's law above)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import Target
from specdec_core.drafters.eagle2.merge import MERGED_SCORE, merge_proposal
from specdec_core.drafters.eagle2.suffix import Eagle2SuffixDrafter
from specdec_core.drafters.suffix import History, SuffixDrafter, candidate_tree
from specdec_core.drafters.suffix_array import SuffixArray, match_ends, suffix_array
from specdec_core.loop.decode import generate
from specdec_core.run.methods import build_drafter, is_chain, is_tree, vocabulary_key
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.stats import chi_square_pvalue
from tests.test_tree import joint_first_two, sample_first_two
from tests.tiny import prompt

KEY = ("tiny", 32)


def _brute_longest(text: list[int], context: list[int], max_length: int):
    best = (0, [])
    for m in range(1, min(max_length, len(context)) + 1):
        pattern = context[-m:]
        ends = [
            i + m
            for i in range(len(text) - m + 1)
            if text[i : i + m] == pattern and i + m < len(text) and text[i + m] >= 0
        ]
        if ends:
            best = (m, ends)
    return best


def test_suffix_array_and_longest_match_agree_with_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        text = np.array([rng.randint(0, 3) for _ in range(rng.randint(0, 30))])
        assert suffix_array(text).tolist() == sorted(range(len(text)), key=lambda i: list(text[i:]))
        documents = [[rng.randint(0, 3) for _ in range(rng.randint(1, 12))] for _ in range(3)]
        context = [rng.randint(0, 3) for _ in range(rng.randint(1, 8))]
        index = SuffixArray.of_documents(documents)
        m, ends = index.longest_match(context, 5)
        assert (m, ends.tolist()) == _brute_longest(index.tokens.tolist(), context, 5)
        own = context + documents[0]
        m, ends = match_ends(own, 5)  # never the suffix itself
        assert (m, ends.tolist()) == _brute_longest(own, own, 5)


def test_a_match_never_runs_across_two_documents():
    index = SuffixArray.of_documents([[5, 6], [7, 8]])
    assert index.longest_match([6, 7], 4)[0] == 1  # "7 8", never "6 7" across the separator
    assert index.longest_match([9, 5], 4)[0] == 1  # "5" followed by 6
    assert index.longest_match([5, 6], 4)[0] == 0  # "5 6" ends its document: nothing follows


def test_candidate_tree_takes_the_most_frequent_continuations_then_the_most_recent():
    rows = np.array([[5, 6], [5, 7], [5, 6], [8, 9], [5, -1]])
    tokens, parents, scores = candidate_tree(rows, budget=3)
    assert (tokens, parents) == ([5, 6, 8], (-1, 0, -1))  # 8 and 7 tie at 1: 8 is more recent
    assert scores == pytest.approx(tuple(np.log([4 / 5, 2 / 5, 1 / 5])))
    assert candidate_tree(rows, budget=4, chain=True)[:2] == ([5, 6], (-1, 0))
    assert candidate_tree(rows[:0], budget=4) == ([], (), ())


def test_merge_proposal_merges_a_whole_tree_sharing_the_nodes_it_has():
    tree = Proposal(tokens=[7, 8, 3], parents=(-1, -1, 0), scores=(-0.1, -0.5, -0.3))
    added = Proposal(tokens=[7, 9, 3, 4], parents=(-1, -1, 0, 2), scores=(0.0,) * 4)
    merged = merge_proposal(tree, added)
    assert merged.tokens == [7, 8, 3, 9, 4]
    assert merged.parents == (-1, -1, 0, -1, 2)
    assert merged.scores == (*tree.scores, MERGED_SCORE, MERGED_SCORE)


def test_the_next_run_drafts_the_continuation_an_earlier_run_generated(tiny_target):
    history = History()
    config = DecodeConfig(max_new_tokens=30, k=4)
    first = prompt(length=6)
    events = list(generate(tiny_target, SuffixDrafter(KEY, history), first, config))
    output = list(events[-1].summary.token_ids)
    assert history.documents(KEY) == []  # sealed when the next run opens its record

    again = [1, 30, 29, *first[1:], *output[:10]]  # a new prompt ending in the first run's text
    drafter = SuffixDrafter(KEY, history)
    drafter.begin(again, Target(tiny_target.model).prefill(again[:-1]))
    assert history.documents(KEY)[0][: len(first) + 4] == [*first, *output[:4]]
    assert drafter.propose(again, config, torch.Generator()).tokens == output[10:14]


def test_suffix_methods_are_registered(tiny_target):
    assert isinstance(build_drafter("suffix", tiny_target), SuffixDrafter)
    assert is_chain("suffix") and is_tree("eagle2-suffix")
    drafter = build_drafter("eagle2-suffix", tiny_target, tiny_head(tiny_target))
    assert isinstance(drafter, Eagle2SuffixDrafter)
    assert drafter.source.key == vocabulary_key(tiny_target)


@pytest.mark.parametrize("method", ["suffix", "eagle2-suffix"])
def test_greedy_suffix_methods_equal_ar_and_draft_from_the_history(tiny_target, method):
    config = DecodeConfig(max_new_tokens=40, k=4)
    head = tiny_head(tiny_target) if method == "eagle2-suffix" else None
    history = History()
    accepted_from_history = 0
    for offset in (0, 1, 0, 2, 1):  # prompts repeat: later runs can draft from earlier ones
        ids = prompt(length=5 + offset, offset=offset)
        reference = run(tiny_target, "ar", ids, config)
        summary = run(tiny_target, method, ids, config, head, history=history)
        assert summary.token_ids == reference.token_ids
        if offset == 0 and accepted_from_history == 0 and history.tokens:
            accepted_from_history = sum(summary.accepted_per_position)
    assert accepted_from_history > 20  # the repeated prompt was drafted from the first run
    assert history.tokens > 0


@pytest.mark.parametrize("method", ["suffix", "eagle2-suffix"])
def test_a_run_given_no_history_drafts_the_same_whatever_ran_before(tiny_target, method):
    config = DecodeConfig(max_new_tokens=40, k=4)
    head = tiny_head(tiny_target) if method == "eagle2-suffix" else None
    ids = prompt(length=5)
    first = run(tiny_target, method, ids, config, head)
    again = run(tiny_target, method, ids, config, head)  # drafts nothing from the first run
    assert again.accepted_per_position == first.accepted_per_position
    assert again.token_ids == first.token_ids


@pytest.mark.slow
def test_suffix_sampling_follows_target_distribution(tiny_target):
    ids = prompt(length=4)
    # a low temperature: the target's mode is likely enough for drafts to be accepted
    config = DecodeConfig(max_new_tokens=2, k=2, temperature=0.2, top_p=0.9)
    history = History(max_tokens=64)  # a few recent runs: the proposal follows their outputs
    drafter = SuffixDrafter(KEY, history)
    samples = 2000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=5)
    expected = joint_first_two(tiny_target.model, ids, 0.2, 0.9)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted  # drafts from the history were accepted


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_eagle2_suffix_sampling_follows_target_distribution(tiny_target, temperature, top_p):
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=temperature, top_p=top_p,
                          tree_depth=2, tree_topk=2, tree_tokens=3)  # fmt: skip
    history = History(max_tokens=64)
    drafter = Eagle2SuffixDrafter(tiny_head(tiny_target), tiny_target.model, KEY, history)
    samples = 2000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=23)
    expected = joint_first_two(tiny_target.model, ids, temperature, top_p)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted
    drafter.begin(ids, Target(tiny_target.model).prefill(ids[:-1]))
    merged = drafter.propose(ids, config, torch.Generator().manual_seed(0))
    assert MERGED_SCORE in merged.scores  # the history's tree added nodes the head had not


def test_the_history_never_exceeds_its_cap_and_evicts_the_oldest(tiny_target):
    history = History(max_tokens=50)
    config = DecodeConfig(max_new_tokens=12, k=3)
    for run_index in range(30):
        ids = prompt(length=4 + run_index % 5, offset=run_index)
        events = list(generate(tiny_target, SuffixDrafter(KEY, history), ids, config))
        assert isinstance(events[-1], Finished) and history.tokens <= 50
    documents = history.documents(KEY)
    assert sum(map(len, documents)) == history.tokens <= 50 and len(documents) >= 2
    history.add(KEY, list(range(3, 200)))  # longer than the cap: its newest tokens stay
    assert history.documents(KEY) == [list(range(150, 200))] and history.tokens == 50


def test_histories_of_different_vocabularies_stay_apart():
    history = History()
    history.add(("a", 32), [5, 6, 7])
    assert history.index(("b", 100)) is None
    assert history.index(("a", 32)).longest_match([9, 5], 4)[0] == 1


def test_events_show_the_drafts_came_from_the_history(tiny_target):
    config = DecodeConfig(max_new_tokens=20, k=4)
    ids = prompt(length=5)
    history = History()
    run(tiny_target, "suffix", ids, config, history=history)
    drafter = build_drafter("suffix", tiny_target, history=history)
    steps = [e for e in generate(tiny_target, drafter, ids, config) if isinstance(e, Step)]
    assert steps[0].drafted == 4 and steps[0].accepted == 4  # the first step already drafts


# -- fair comparisons: no method drafts from another method's output of the same prompt -----------
FAIR_PROMPTS = ["w3 w4 w5 w6", "w3 w4 w5 w6 w7"]  # the second can draft from the first


def _bench_tau(target, methods, specs=None, **options) -> tuple[float, dict, str]:
    from specdec_core.measurement.bench import format_table, run_bench

    config = DecodeConfig(max_new_tokens=30, k=4)
    result = run_bench(target, methods, FAIR_PROMPTS, config, specs or {}, raw=True, **options)
    record = result.as_dict()["methods"]["suffix"]
    return record["mean_accept_length"], record, format_table(result)


@pytest.fixture
def saved_head(tiny_target, tmp_path):
    from specdec_core.heads.eagle.formats import save_head

    return str(save_head(tiny_head(tiny_target, seed=3), tmp_path / "head", dtype=torch.float32))


def test_a_bench_suffix_entry_has_the_same_tau_after_another_suffix_entry_as_alone(
    tiny_target, saved_head
):
    alone, record, _ = _bench_tau(tiny_target, ["suffix"])
    after, record, table = _bench_tau(tiny_target, [f"eagle2-suffix@{saved_head}", "suffix"])
    assert after == alone
    assert record["suffix_history"] == "own"
    assert "own suffix history" in table.splitlines()[-1]


def test_a_shared_suffix_history_drafts_from_the_entry_before_and_is_marked(
    tiny_target, saved_head
):
    alone, _, _ = _bench_tau(tiny_target, ["suffix"], suffix_history="shared")
    methods = [f"eagle2-suffix@{saved_head}", "suffix"]
    after, record, table = _bench_tau(tiny_target, methods, suffix_history="shared")
    assert after > alone  # it copied the output of the entry run before it
    assert record["suffix_history"] == "shared"
    assert "SHARED suffix history" in table.splitlines()[-1]


def test_each_sweep_point_drafts_only_from_its_own_runs(tiny_target):
    from specdec_core.tuning.sweep import BenchMeasure

    measure = BenchMeasure(tiny_target, FAIR_PROMPTS, {}, raw=True)
    config = DecodeConfig(max_new_tokens=30, k=4)
    first = measure("suffix", config, None).aggregate.mean_accept_length
    assert measure("suffix", config, None).aggregate.mean_accept_length == first


def test_in_a_compare_no_method_drafts_from_another_methods_output(tiny_target):
    import threading

    from app.engine import SpecdecEngine
    from app.engine_api import RunRequest

    engine = SpecdecEngine(tiny_target)
    config = DecodeConfig(max_new_tokens=30, k=4)

    def tau(comparison: str, text: str = FAIR_PROMPTS[0]) -> float:
        request = RunRequest("suffix", text, config, raw=True, comparison=comparison)
        events = list(engine.events(request, threading.Event(), lambda *_: None))
        return events[-1].summary.mean_accept_length

    generated = tau("")  # a Generate run: recorded in the window's history
    before = engine.suffix_history.snapshot().documents(vocabulary_key(tiny_target))
    new = FAIR_PROMPTS[1]
    assert tau("compare-1", new) == tau("compare-1", new)  # neither drafts from the other
    assert engine.suffix_history.snapshot().documents(vocabulary_key(tiny_target)) == before
    assert tau("compare-2") > generated  # a Compare drafts from the history as it began


def test_two_engines_never_share_a_suffix_history(tiny_target):
    import threading

    from app.engine import SpecdecEngine
    from app.engine_api import RunRequest

    first, second = SpecdecEngine(tiny_target), SpecdecEngine(tiny_target)
    request = RunRequest("suffix", FAIR_PROMPTS[0], DecodeConfig(max_new_tokens=20), raw=True)
    list(first.events(request, threading.Event(), lambda *_: None))
    assert first.suffix_history.snapshot().tokens > 0  # the run, sealed as the next sees it
    assert second.suffix_history.snapshot().tokens == 0
