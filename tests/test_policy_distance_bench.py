"""`specdec bench` reports each entry's distance from the target's distribution: measured per
emitted token for a lossy entry, 0 by construction for a lossless one."""

from __future__ import annotations

import json
import math

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.bench import BenchResult, format_table, run_bench, write_outputs
from specdec_core.measurement.fidelity import (
    PathCall,
    policy_distance,
    step_distances,
    tree_distance,
)
from specdec_core.measurement.measure import Row, run_distance
from specdec_core.measurement.run_distance import RunDistance, pooled
from specdec_core.verifiers import make_verifier
from tests.tiny import prompt

PROMPTS = ["w3 w4 w5 w6 w3 w4 w5", "w7 w8 w7 w8 w7 w8"]


def bench(tiny_target, methods, temperature, tmp_path):
    config = DecodeConfig(max_new_tokens=10, k=3, temperature=temperature)
    result = run_bench(tiny_target, methods, PROMPTS, config, {}, raw=True)
    out, table = tmp_path / "bench.json", tmp_path / "bench.csv"
    write_outputs(result, str(out), str(table))
    assert "total_variation" in table.read_text().splitlines()[0]  # every row has the fields
    return result, json.loads(out.read_text())


def test_a_loose_threshold_is_at_a_distance_and_lossless_entries_at_zero(tiny_target, tmp_path):
    loose = "ngram:threshold:tau=0.01"
    result, saved = bench(tiny_target, ["ngram", loose], 1.0, tmp_path)
    entries = saved["methods"]
    assert entries[loose]["total_variation"] > 0 and entries[loose]["kl"] > 0
    assert entries[loose]["distance_tokens"] > 0
    for lossless in ("ar", "ngram"):
        assert entries[lossless]["total_variation"] == 0 and entries[lossless]["kl"] == 0
        assert "by construction" in entries[lossless]["distance_note"]
    rows = [r for r in saved["per_prompt"] if r["method"] == loose]
    assert len(rows) == len(PROMPTS) and all("total_variation" in r for r in rows)
    line = next(x for x in format_table(result).splitlines() if x.startswith(loose))
    assert f"{entries[loose]['total_variation']:.3f}" in line


def test_at_greedy_a_loose_rule_has_infinite_kl_written_as_null(tiny_target, tmp_path):
    loose = "ngram:threshold:tau=0.01"
    result, saved = bench(tiny_target, [loose], 0.0, tmp_path)
    entry = saved["methods"][loose]
    assert entry["kl_infinite_tokens"] > 0  # a non-argmax token could be emitted
    assert entry["kl"] is None and 0 < entry["total_variation"] <= 1
    line = next(x for x in format_table(result).splitlines() if x.startswith(loose))
    assert "inf" in line


def test_a_lossless_run_is_not_run_again(tiny_target):
    distance = run_distance("ngram", tiny_target, prompt(6), DecodeConfig(max_new_tokens=8))
    assert distance.exact_by_construction and distance.total_variation == 0.0


def test_the_distance_pass_leaves_the_policy_rows_alone(tiny_target, tiny_draft):
    config = DecodeConfig(
        max_new_tokens=10, k=3, temperature=1.0, policy="typical", policy_params={}
    )
    first = run_distance("classic", tiny_target, prompt(6), config, tiny_draft)
    again = run_distance("classic", tiny_target, prompt(6), config, tiny_draft)
    assert first == again and first.tokens >= 10  # same seed: the same run, the same numbers


def test_rows_of_an_earlier_version_report_no_distance():
    row = Row("e", (), 4, 2, 1.0, None, None)
    result = BenchResult(config={}, rows=[row])
    assert result.distance("e") is None
    record = row.to_record()
    assert record["total_variation"] is None and record["distance_note"] == "not measured"


def test_pooling_weighs_every_token_alike():
    one = RunDistance().add(1.0, 0.5)
    three = RunDistance().add(0.0, 0.0).add(0.0, 0.0).add(0.0, 0.0)
    total = pooled([one, three, None])
    assert total.tokens == 4 and total.total_variation == 0.25 and total.kl == 0.125
    assert pooled([RunDistance.lossless(), RunDistance.lossless()]).total_variation == 0.0
    assert math.isinf(RunDistance().add(0.5, math.inf).kl)
    assert RunDistance().add(0.5, math.inf).to_record()["kl"] is None


def rows(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_a_chain_step_measures_each_token_it_emitted():
    threshold = make_verifier("threshold", tau=0.3)
    draft = torch.tensor([1, 2])
    p = rows([1, 0, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0])  # T = 0: the target's argmax rows
    pi = rows([0.5, 0.4, 0.1, 0], [0.1, 0.2, 0.7, 0], [0.9, 0.1, 0, 0])
    call = PathCall(draft, None, p, pi)
    generator = torch.Generator().manual_seed(0)
    full = step_distances(threshold, [call], 2, generator)  # both accepted, then the bonus
    assert [d.total_variation for d in full] == [1.0, 0.0, 0.0]
    at_row_1 = policy_distance(threshold, draft[1:], None, p[1:], pi[1:], generator)
    assert full[1] == at_row_1
    refused = step_distances(threshold, [call], 0, generator)  # refused at 0: one token
    assert len(refused) == 1


def test_a_tree_step_takes_the_longest_approved_path():
    p = rows([1, 0, 0, 0], [1, 0, 0, 0])
    pi = rows([0.5, 0.4, 0.1, 0], [0.5, 0.4, 0.1, 0])
    paths = [PathCall(torch.tensor([x]), None, p, pi) for x in (2, 1)]  # π(2) 0.1, π(1) 0.4
    generator = torch.Generator().manual_seed(0)
    loose = tree_distance(make_verifier("threshold", tau=0.3), paths, generator)
    strict = tree_distance(make_verifier("threshold", tau=0.45), paths, generator)
    assert loose.total_variation == pytest.approx(1.0)  # the second path's 1 is accepted
    assert strict.total_variation == pytest.approx(0.0)  # both refused: the argmax follows
    sampled = [PathCall(c.draft, torch.full((1, 4), 0.25), c.p, c.p_soft) for c in paths]
    assert step_distances(make_verifier("threshold"), sampled, 0, generator) is None
