"""Sweep points are typed records from the measurement to the file: a file written before
they were (tests/fixtures/sweeps/, three points of docs/sweeps/eagle.json as first written)
reads into them, and writing them keeps every key a sweep file has always had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec_core.cli.sweep import format_sweep
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.sweep_records import Aggregate, MeasuredPoint, SweepResult, read_sweep
from specdec_core.serving.export import best_of_sweep
from specdec_core.tuning.sweep import Grid, run_sweep
from tests.test_sweep import FakeMeasure

PREVIOUS = Path(__file__).parent / "fixtures" / "sweeps" / "eagle-previous-format.json"


def test_a_sweep_file_of_the_previous_version_reads_as_typed_points():
    result = read_sweep(PREVIOUS)
    assert result.header["method"] == "eagle"
    assert [p.point for p in result.points] == [
        {"temperature": 0.0, "k": 1},
        {"temperature": 0.0, "k": 3},
        {"temperature": 0.7, "k": 3},
    ]
    first = result.points[0]
    assert first.config == DecodeConfig(max_new_tokens=64, k=1)
    assert first.speedup_vs_ar == pytest.approx(0.7707134167379309)
    assert first.mean_accept_length == pytest.approx(1.3241379310344827)
    assert first.ar_tokens_per_second == pytest.approx(8.96636120528074)
    a = first.aggregate
    assert (a.near_ties, a.bugs, a.identical_to_fp32) == (0, 0, None)
    assert result.best().point == {"temperature": 0.7, "k": 3}
    assert {t: p.point["k"] for t, p in result.best_by_temperature().items()} == {0.0: 3, 0.7: 3}


def test_rewriting_a_previous_file_keeps_every_key_and_value_it_had(tmp_path):
    old = json.loads(PREVIOUS.read_text())
    read_sweep(PREVIOUS).write(tmp_path / "again.json")
    new = json.loads((tmp_path / "again.json").read_text())
    assert set(new) == set(old) and new["sweep"] == old["sweep"]
    assert new["best_by_temperature"].keys() == old["best_by_temperature"].keys()
    written = zip([*old["points"], old["best"]], [*new["points"], new["best"]], strict=True)
    for before, after in written:
        assert {key: after[key] for key in before if key != "config"} == {
            key: value for key, value in before.items() if key != "config"
        }
        # the settings keep every key and value; settings added since get their defaults
        assert {key: after["config"][key] for key in before["config"]} == before["config"]


def test_a_new_sweep_file_has_the_keys_of_the_previous_format(tmp_path):
    out = tmp_path / "s.json"
    run_sweep("eagle", Grid({"k": [1, 2]}), DecodeConfig(), FakeMeasure({2: 1.5}), json_out=out)
    saved = json.loads(out.read_text())
    previous = json.loads(PREVIOUS.read_text())
    assert set(saved) == set(previous)
    assert set(previous["points"][0]) <= set(saved["points"][0])
    aggregate = Aggregate(tokens_per_second=1.0, mean_accept_length=1.0).against(1.0)
    expected = {*aggregate.to_record(), "point", "config", "ar_tokens_per_second"}
    assert set(saved["points"][0]) == expected
    assert saved["best"]["point"] == {"k": 2} and list(saved["best_by_temperature"]) == ["0.0"]


def test_resume_continues_the_points_of_a_previous_file(tmp_path):
    old = json.loads(PREVIOUS.read_text())
    grid, base = Grid({"k": [1, 3, 4], "temperature": [0.0]}), DecodeConfig(max_new_tokens=64)
    fixed = {k: v for k, v in base.as_dict().items() if k not in grid.axes}
    header = {"method": "eagle", "axes": grid.axes, "base_config": fixed}
    points = [p for p in old["points"] if p["point"]["temperature"] == 0.0]
    out = tmp_path / "s.json"
    out.write_text(json.dumps({"sweep": header, "points": points}))
    measure = FakeMeasure()
    result = run_sweep("eagle", grid, base, measure, json_out=out, resume=True)
    assert measure.method_points() == [(4, 0.0)]
    assert [p.point["k"] for p in result.points] == [1, 3, 4]
    assert result.points[0].speedup_vs_ar == pytest.approx(0.7707134167379309)


def test_the_table_and_the_export_read_a_previous_file():
    table = format_sweep(read_sweep(PREVIOUS))
    assert "best at T=0.0: temperature=0, k=3 -> 0.80x" in table
    assert "best at T=0.7: temperature=0.7, k=3 -> 0.85x" in table
    best = best_of_sweep(PREVIOUS, temperature=0.0)
    assert (best.method, best.config.k, best.config.max_new_tokens) == ("eagle", 3, 64)


def test_a_file_that_is_not_a_sweep_result_says_what_to_pass(tmp_path):
    not_sweeps = ("[]", '{"sweep": {}, "points": []}', '{"sweep": {"method": "k"}, "points": [{}]}')
    for text in (*not_sweeps, "not json"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(SpecdecError, match="not a `specdec sweep` result"):
            read_sweep(tmp_path / "bad.json")


def test_a_measured_point_round_trips_through_its_record():
    point = MeasuredPoint(
        point={"temperature": 0.7, "policy_params.tau": 0.3},
        config=DecodeConfig(temperature=0.7, policy="threshold", policy_params={"tau": 0.3}),
        aggregate=Aggregate(2.0, 2.5, lossy=True, token_agreement=0.9, speedup_vs_ar=1.4),
        ar_tokens_per_second=1.5,
    )
    assert MeasuredPoint.from_record(json.loads(json.dumps(point.to_record()))) == point
    assert point.fidelity() == {"token_agreement": 0.9}
    assert SweepResult({"method": "ngram"}, [point]).best(0.7) == point
