"""`specdec bench` speedups carry their spread over the prompts: each prompt's own speedup and
a 95 % bootstrap interval of the run's, in the table and the JSON; files without them load."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.bench import BenchResult, format_table, run_bench, write_outputs
from specdec_core.measurement.measure import Row, aggregate, speedup_spread
from specdec_core.measurement.sweep_records import Aggregate

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = ROOT / "docs" / "bench" / "bundled-head-greedy.json"  # written before intervals


def row(method: str, prompt: int, wall: float, new: int = 64, turn: int = 0, tau: int = 1) -> Row:
    return Row(
        method=method,
        token_ids=(),
        new_tokens=new,
        steps=new // tau,
        wall_seconds=wall,
        draft_seconds=None,
        verify_seconds=None,
        prompt_index=prompt,
        turn=turn,
        identical_to_ar=True,
        prefix_agreement=1.0,
        token_agreement=1.0,
        mean_logprob=-1.0,
    )


AR_WALLS = [2.0, 3.0, 1.5, 4.0, 2.5, 3.5, 2.2, 1.8]
AR = [row("ar", i, wall) for i, wall in enumerate(AR_WALLS)]


def entry(ratios: list[float]) -> list[Row]:
    """An entry that is `ratios[i]` times as fast as `ar` on prompt i, τ 4."""
    walls = zip(AR_WALLS, ratios, strict=True)
    return [row("e", i, wall / ratio, tau=4) for i, (wall, ratio) in enumerate(walls)]


SPREAD_RATIOS = [1.1, 2.3, 1.4, 1.9, 0.9, 2.0, 1.6, 1.2]


def point(rows: list[Row]) -> float:
    return aggregate(rows).against(aggregate(AR).tokens_per_second).speedup_vs_ar


def test_each_prompt_speedup_is_the_entry_over_ar_on_that_prompt():
    spread = speedup_spread(entry(SPREAD_RATIOS), AR)
    assert spread.per_prompt == pytest.approx(SPREAD_RATIOS)


def test_a_conversation_turns_add_up_to_its_prompt_speedup():
    ar = [row("ar", 0, 1.0, turn=0), row("ar", 0, 3.0, turn=1), row("ar", 1, 2.0)]
    own = [row("e", 0, 1.0, turn=0), row("e", 0, 1.0, turn=1), row("e", 1, 1.0)]
    assert speedup_spread(own, ar).per_prompt == pytest.approx((2.0, 2.0))


def test_the_interval_contains_the_run_speedup():
    rows = entry(SPREAD_RATIOS)
    low, high = speedup_spread(rows, AR).interval
    assert low < point(rows) < high
    assert min(SPREAD_RATIOS) <= low and high <= max(SPREAD_RATIOS)


def test_the_interval_narrows_when_the_prompts_agree():
    agreeing = [1.6 + 0.01 * (i % 3) for i in range(len(AR_WALLS))]
    narrow = speedup_spread(entry(agreeing), AR).interval
    wide = speedup_spread(entry(SPREAD_RATIOS), AR).interval
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 10
    same = speedup_spread(entry([1.5] * len(AR_WALLS)), AR).interval
    assert same == pytest.approx((1.5, 1.5))


def test_the_interval_is_the_same_every_time_and_moves_only_with_its_seed():
    rows = entry(SPREAD_RATIOS)
    assert speedup_spread(rows, AR) == speedup_spread(rows, AR)
    assert speedup_spread(rows, AR, seed=1).interval != speedup_spread(rows, AR).interval


def test_no_interval_without_a_prompt_that_both_ran():
    assert speedup_spread([row("e", len(AR_WALLS), 1.0)], AR) is None


def test_the_table_shows_the_interval_after_the_speedup_and_flags_one_above_tau():
    rows = entry(SPREAD_RATIOS)
    ar_speed = aggregate(AR).tokens_per_second
    result = BenchResult(config={})
    result.methods["ar"] = aggregate(AR).against(ar_speed, speedup_spread(AR, AR))
    result.methods["e"] = aggregate(rows).against(ar_speed, speedup_spread(rows, AR))
    low, high = result.methods["e"].speedup_interval
    ratio = result.methods["e"].speedup_vs_ar
    lines = format_table(result).splitlines()
    assert f"{ratio:.2f}x ({low:.2f}-{high:.2f})" in lines[3]
    assert "1.00x" in lines[2] and "(" not in lines[2]  # ar: its interval is the point 1
    above_tau = BenchResult(config={})  # τ 1.2 cannot give 1.5x: shown as today
    above_tau.methods["e"] = replace(result.methods["e"], mean_accept_length=1.2)
    line = format_table(above_tau).splitlines()[2]
    assert "disturbed" in line and f"{low:.2f}-{high:.2f}" not in line


def test_bench_json_carries_the_interval_and_each_prompt_speedup(tiny_target, tmp_path):
    prompts = ["w3 w4 w5 w6", "w10 w11 w3 w9 w20", "w7 w8 w7 w8 w7"]
    result = run_bench(tiny_target, ["ngram"], prompts, DecodeConfig(max_new_tokens=8), {})
    out = tmp_path / "bench.json"
    write_outputs(result, str(out), None)
    methods = json.loads(out.read_text())["methods"]
    for name in ("ar", "ngram"):
        record = methods[name]
        low, high = record["speedup_interval"]
        assert low <= record["speedup_vs_ar"] <= high
        assert len(record["speedup_per_prompt"]) == len(prompts)
    assert methods["ar"]["speedup_per_prompt"] == [1.0] * len(prompts)


def test_a_sweep_point_record_is_as_before_without_a_spread():
    record = Aggregate(10.0, 1.5).against(5.0).to_record()
    assert record["speedup_vs_ar"] == 2.0
    assert "speedup_interval" not in record and "speedup_per_prompt" not in record


def test_bench_files_with_and_without_intervals_pool_alike(tmp_path):
    previous = json.loads(PREVIOUS.read_text())
    assert "speedup_interval" not in previous["methods"]["eagle"]
    rows = entry(SPREAD_RATIOS)
    result = BenchResult(config={}, rows=[*AR, *rows])
    ar_speed = aggregate(AR).tokens_per_second
    result.methods["ar"] = aggregate(AR).against(ar_speed, speedup_spread(AR, AR))
    result.methods["e"] = aggregate(rows).against(ar_speed, speedup_spread(rows, AR))
    current = tmp_path / "current.json"
    write_outputs(result, str(current), None)
    pooled = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pool_bench.py"), str(PREVIOUS), str(current)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| `eagle` |" in pooled and "| `e` |" in pooled
