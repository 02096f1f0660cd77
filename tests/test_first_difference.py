"""Where a speculative output parts from the reference, and why: float near-tie or bug."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.first_difference import BUG, NEAR_TIE, first_difference, tolerance
from tests.tiny import prompt, tiny_model


@pytest.fixture(scope="module")
def tied_model():
    """A tiny model whose lm_head has two identical rows: tokens 7 and 8 always tie exactly."""
    model = tiny_model(5)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[8] = head[7]
    return model.eval()


def _greedy(model, ids, n):
    out = []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1]
        out.append(int(logits.argmax()))
    return out


def test_an_identical_output_has_no_first_difference(tied_model):
    ids = prompt(5)
    reference = _greedy(tied_model, ids, 6)
    assert first_difference(tied_model, ids, reference, reference) is None


def test_a_swap_of_two_exactly_tied_tokens_is_a_float_near_tie(tied_model):
    ids = prompt(5)
    reference = _greedy(tied_model, ids, 4) + [7]
    output = reference[:4] + [8]  # the other of the two tied tokens
    found = first_difference(tied_model, ids, output, reference)
    assert found.position == 4 and (found.reference_token, found.run_token) == (7, 8)
    assert found.reference_gap == pytest.approx(0.0, abs=1e-6) and found.label == NEAR_TIE


def test_a_token_far_behind_the_top_one_is_labelled_a_bug(tied_model):
    ids = prompt(5)
    reference = _greedy(tied_model, ids, 5)
    logits = tied_model(input_ids=torch.tensor([ids + reference[:2]])).logits[0, -1]
    worst = int(logits.argmin())
    output = reference[:2] + [worst, *reference[3:]]
    found = first_difference(tied_model, ids, output, reference)
    assert found.position == 2 and found.label == BUG
    assert found.reference_gap > 100 * found.tolerance
    assert found.to_record()["label"] == BUG


def test_the_tolerance_follows_the_dtype_and_the_logit_size():
    assert tolerance(torch.bfloat16, 20.0) > tolerance(torch.float16, 20.0)
    assert tolerance(torch.float16, 20.0) > tolerance(torch.float32, 20.0)
    assert tolerance(torch.bfloat16, 40.0) == pytest.approx(2 * tolerance(torch.bfloat16, 20.0))


def test_bench_reports_the_first_difference_of_a_forced_bf16_mismatch(tiny_target, monkeypatch):
    """A bf16 target and an 'ngram' whose output is forced to part from ar at token 3: the
    bench JSON carries the position and the margins (measured in float32 with the fp32
    reference), the table counts it, and every row says whether it matches fp32 ar."""
    from dataclasses import replace

    from specdec_core.measurement import measure
    from specdec_core.measurement.bench import format_table, run_bench

    half = replace(tiny_target, model=tiny_model(1).to(torch.bfloat16), dtype=torch.bfloat16)

    real = measure.run

    def forced(target, method, ids, config, extra=None, **kwargs):
        summary = real(target, "ar", ids, config, extra)
        if method != "ngram":
            return summary
        ids_out = list(summary.token_ids)
        ids_out[3] = (ids_out[3] + 1) % 32
        return replace(summary, token_ids=tuple(ids_out), method="ngram")

    monkeypatch.setattr(measure, "run", forced)
    config = DecodeConfig(max_new_tokens=8)
    result = run_bench(
        half, ["ngram"], ["w3 w4 w5 w6"], config, specs={}, raw=True, reference_model=tiny_target
    )
    row = next(r for r in result.rows if r.method == "ngram")
    assert row.identical_to_ar is False and row.first_difference.position == 3
    record = json.loads(json.dumps(result.as_dict()))["per_prompt"][1]["first_difference"]
    assert record["position"] == 3 and record["label"] in (NEAR_TIE, BUG)
    assert {"reference_gap", "run_gap", "tolerance"} <= set(record)
    counted = result.methods["ngram"]
    assert counted.near_ties + counted.bugs == 1
    assert "near-tie" in format_table(result) or "NOT EXPLAINED" in format_table(result)
    assert result.config["reference"] == "float32" and record["dtype"] == "float32"
    assert row.identical_to_fp32 is not None and counted.identical_to_fp32 is not None


def test_sampled_outputs_are_never_counted_as_unexplained_differences(tiny_target):
    """At T > 0 every method draws its own tokens: outputs part from ar's by design, so the
    bench explains and flags nothing (and still reports identity and agreement)."""
    from specdec_core.measurement.bench import format_table, run_bench

    config = DecodeConfig(max_new_tokens=16, temperature=1.0, seed=3)
    result = run_bench(tiny_target, ["ngram"], ["w3 w4 w5 w6"], config, specs={}, raw=True)
    rows = [r for r in result.rows if r.method != "ar"]
    assert all(r.first_difference is None and r.identical_to_ar is not None for r in rows)
    assert result.methods["ngram"].bugs == 0 and "NOT EXPLAINED" not in format_table(result)
