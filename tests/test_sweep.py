"""Sweep, auto-tune and the sweep PNG: grids are exact, interrupted sweeps resume, auto-tune
picks the argmax of its own table. Fake measurements (no models) except one tiny end-to-end."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.measurement.measure import Measurement
from specdec_core.measurement.sweep_records import Aggregate
from specdec_core.tuning.autotune import TuneRow, autotune_k, check_tunable, choose_k
from specdec_core.tuning.sweep import BenchMeasure, Grid, apply_point, run_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class FakeMeasure:
    """ar runs at 10 tok/s; the method at 10 * speed[k] tok/s with τ = 1 + k / 2.
    Optionally raises KeyboardInterrupt on its `fail_at`-th method measurement (a Ctrl+C)."""

    def __init__(self, speed=None, fail_at: int | None = None) -> None:
        self.speed = speed or {}
        self.fail_at = fail_at
        self.calls: list[tuple[str, DecodeConfig]] = []

    def __call__(self, method, config, reference):
        measured = sum(m != "ar" for m, _ in self.calls)
        if method != "ar" and self.fail_at is not None and measured + 1 == self.fail_at:
            raise KeyboardInterrupt
        self.calls.append((method, config))
        tps = 10.0 if method == "ar" else 10.0 * self.speed.get(config.k, 1.0)
        tau = 1.0 if method == "ar" else 1 + config.k / 2
        return Measurement(Aggregate(tokens_per_second=tps, mean_accept_length=tau), ((1, 2, 3),))

    def method_points(self) -> list[tuple[int, float]]:
        return [(c.k, c.temperature) for m, c in self.calls if m != "ar"]


def test_grid_is_exactly_the_cartesian_product_with_temperature_outermost():
    grid = Grid({"k": [1, 2, 4], "temperature": [0.0, 0.7], "tree_tokens": [8, None]})
    points = grid.points()
    expected = itertools.product([0.0, 0.7], [1, 2, 4], [8, None])
    assert [(p["temperature"], p["k"], p["tree_tokens"]) for p in points] == list(expected)
    assert list(points[0]) == ["temperature", "k", "tree_tokens"]


def test_grid_rejects_unknown_axes_empty_axes_and_repeats():
    for axes in ({"learning_rate": [1]}, {"k": []}, {"k": [2, 2]}):
        with pytest.raises(SpecdecError):
            Grid(axes)


def test_sweep_measures_each_requested_point_once_and_ar_once_per_temperature(tmp_path):
    measure = FakeMeasure(speed={1: 1.2, 2: 1.5, 4: 0.9})
    grid = Grid({"k": [1, 2, 4], "temperature": [0.0, 1.0]})
    result = run_sweep("classic", grid, DecodeConfig(), measure, json_out=tmp_path / "s.json")
    assert sorted(measure.method_points()) == sorted(itertools.product([1, 2, 4], [0.0, 1.0]))
    ar = [c.temperature for m, c in measure.calls if m == "ar"]
    assert ar == [0.0, 1.0]
    assert [p.speedup_vs_ar for p in result.points] == pytest.approx([1.2, 1.5, 0.9] * 2)
    saved = json.loads((tmp_path / "s.json").read_text())
    assert len(saved["points"]) == 6
    assert saved["best"]["point"] == {"temperature": 0.0, "k": 2}
    assert set(saved["best_by_temperature"]) == {"0.0", "1.0"}


def test_points_apply_to_the_config_including_policy_parameters():
    base = DecodeConfig(policy="threshold", policy_params={"tau": 0.9, "n": 2.0})
    config = apply_point(base, {"k": 3, "policy_params.tau": 0.1})
    assert config.k == 3 and config.policy_params == {"tau": 0.1, "n": 2.0}
    measure = FakeMeasure()
    run_sweep("ngram", Grid({"policy_params.tau": [0.1, 0.5]}), base, measure)
    baselines = [c for m, c in measure.calls if m == "ar"]
    assert baselines[0].policy == "lossless"  # the reference is always the lossless target


def test_an_interrupted_sweep_keeps_its_points_and_resume_measures_only_the_rest(tmp_path):
    out = tmp_path / "sweep.json"
    grid = Grid({"k": [1, 2, 3, 4], "temperature": [0.0, 0.7]})
    with pytest.raises(KeyboardInterrupt):
        run_sweep("classic", grid, DecodeConfig(), FakeMeasure(fail_at=4), json_out=out)
    kept = json.loads(out.read_text())["points"]
    assert len(kept) == 3
    again = FakeMeasure()
    result = run_sweep("classic", grid, DecodeConfig(), again, json_out=out, resume=True)
    assert len(again.method_points()) == 5
    done = {(p.point["k"], p.point["temperature"]) for p in result.points}
    assert done == set(itertools.product([1, 2, 3, 4], [0.0, 0.7]))
    assert len(json.loads(out.read_text())["points"]) == 8


def test_resume_refuses_a_file_measured_with_other_settings(tmp_path):
    out = tmp_path / "sweep.json"
    run_sweep("classic", Grid({"k": [1]}), DecodeConfig(), FakeMeasure(), json_out=out)
    with pytest.raises(SpecdecError, match="other settings"):
        config = DecodeConfig(max_new_tokens=7)
        run_sweep("classic", Grid({"k": [1, 2]}), config, FakeMeasure(), json_out=out, resume=True)
    with pytest.raises(SpecdecError, match="--json-out"):
        run_sweep("classic", Grid({"k": [1]}), DecodeConfig(), FakeMeasure(), resume=True)


def test_resume_refuses_a_file_measured_on_another_machine_but_not_on_another_day(tmp_path):
    out = tmp_path / "sweep.json"

    def header(machine: str, date: str) -> dict:
        return {"environment": {"machine": machine, "date": date}}

    grid = Grid({"k": [1, 2]})
    run_sweep("classic", Grid({"k": [1]}), DecodeConfig(), FakeMeasure(), header("A", "1"), out)
    again = run_sweep(
        "classic", grid, DecodeConfig(), FakeMeasure(), header("A", "2"), out, resume=True
    )
    assert len(again.points) == 2
    with pytest.raises(SpecdecError, match="machine"):
        run_sweep("classic", grid, DecodeConfig(), FakeMeasure(), header("B", "2"), out, True)


def test_autotune_picks_the_argmax_of_its_own_measured_table():
    measure = FakeMeasure(speed={1: 1.1, 2: 1.4, 3: 1.9, 4: 1.6, 6: 1.2, 8: 0.8})
    tuned = autotune_k("classic", DecodeConfig(), measure)
    assert [row.k for row in tuned.table] == [1, 2, 3, 4, 6, 8]
    best = max(tuned.table, key=lambda row: row.speedup_vs_ar)
    assert tuned.k == best.k == 3
    assert "k=3" in tuned.reason and "<- chosen" in tuned.format_table()


def test_stop_ends_autotune_after_the_current_point_and_keeps_the_k_it_was_given():
    import threading

    stop = threading.Event()
    measure = FakeMeasure(speed={1: 1.3, 2: 1.6, 3: 1.9})

    def stop_during_the_first_k(method, config, reference):
        if method != "ar":
            stop.set()  # Stop pressed while k=1 is measured
        return measure(method, config, reference)

    tuned = autotune_k("classic", DecodeConfig(k=5), stop_during_the_first_k, stop=stop)
    assert measure.method_points() == [(1, 0.0)]  # k=1 finished, no other k began
    assert tuned.stopped and tuned.k == 5 and [row.k for row in tuned.table] == [1]
    assert "stopped after 1 of 6" in tuned.reason and "k stays 5" in tuned.reason
    assert not autotune_k("classic", DecodeConfig(), FakeMeasure(), stop=threading.Event()).stopped


def test_autotune_ties_go_to_the_smaller_k_a_tree_tunes_its_size_and_k_auto_refuses_trees():
    k, reason = choose_k([TuneRow(2, 15.0, 1.500, 2.0, 10.0), TuneRow(4, 15.05, 1.505, 2.5, 10.0)])
    assert k == 2 and "ties" in reason
    tree = autotune_k("eagle2", DecodeConfig(), FakeMeasure())
    assert tree.setting == "tree_tokens" and [row.k for row in tree.table] == [4, 8, 16, 32]
    assert tree.reason.startswith(f"tree_tokens={tree.k}:")
    with pytest.raises(SpecdecError, match="tree"):  # `--k auto` has a k to set
        check_tunable("eagle2")


def test_png_heatmap_curve_and_fidelity_panel(tmp_path):
    pytest.importorskip("matplotlib")
    from specdec_core.tuning.sweep_plot import render_png

    grid = Grid({"k": [1, 2], "temperature": [0.0, 1.0], "tree_depth": [2, 3]})
    two_axes = run_sweep("eagle", grid, DecodeConfig(), FakeMeasure({2: 1.3}))
    one_axis = run_sweep("eagle", Grid({"k": [1, 2, 4]}), DecodeConfig(), FakeMeasure())
    lossy = {"lossy": True, "prefix_agreement": 0.5, "mean_logprob": -1.2}
    one_axis.points = [replace(p, aggregate=replace(p.aggregate, **lossy)) for p in one_axis.points]
    for name, result in (("heat.png", two_axes), ("curve.png", one_axis)):
        render_png(result, tmp_path / name)
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


def test_a_real_sweep_on_tiny_models_measures_speedup_and_identity(tiny_target, tiny_draft):
    from specdec_core.tuning.autotune import tune_on_device

    tuned = tune_on_device(
        tiny_target,
        "classic",
        DecodeConfig(max_new_tokens=6),
        {},
        candidates=(1, 2),
        extra=tiny_draft,
    )
    assert tuned.k in (1, 2) and len(tuned.table) == 2
    measure = BenchMeasure(
        tiny_target, ["w1 w5 w9 w2"], {}, raw=True, extras={"classic": tiny_draft}
    )
    config = DecodeConfig(max_new_tokens=8)
    result = run_sweep("classic", Grid({"k": [1, 3]}), config, measure)
    assert [p.point["k"] for p in result.points] == [1, 3]
    for measured in result.points:
        assert measured.speedup_vs_ar > 0 and measured.aggregate.new_tokens == 8
        assert measured.aggregate.identical_to_ar == 1.0  # greedy speculative output equals ar
        assert "token_ids" not in measured.to_record()


def test_cli_sweep_writes_json_and_png_and_resumes(tmp_path, monkeypatch, tiny_target, capsys):
    pytest.importorskip("matplotlib")
    from specdec_core import cli
    from specdec_core.models import loading as models

    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: tiny_target)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "w3 w4 w5 w3 w4"}) + "\n")
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    argv = ["sweep", "--method", "ngram", "--prompts", str(prompts), "--raw"]
    argv += ["--max-new-tokens", "6", "--json-out", str(out), "--png-out", str(png)]
    assert cli.main([*argv, "--k", "1,2", "--temperature", "0"]) == 0
    assert len(json.loads(out.read_text())["points"]) == 2
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "best at T=0.0" in capsys.readouterr().out
    environment = json.loads(out.read_text())["sweep"]["environment"]
    assert environment["command"].startswith("specdec sweep --method ngram")
    assert environment["torch"] and environment["machine"] and environment["date"]
    assert cli.main([*argv, "--k", "1,2,3", "--temperature", "0", "--resume"]) == 0
    assert [p["point"]["k"] for p in json.loads(out.read_text())["points"]] == [1, 2, 3]
    assert cli.main(["sweep", "--method", "ngram", "--prompts", str(prompts)]) == 2


def test_baseline_per_point_measures_ar_before_every_point():
    measure = FakeMeasure()
    grid = Grid({"k": [1, 2, 3]})
    run_sweep("classic", grid, DecodeConfig(), measure, baseline="point")
    assert [m for m, _ in measure.calls] == ["ar", "classic"] * 3
    with pytest.raises(SpecdecError, match="baseline"):
        run_sweep("classic", grid, DecodeConfig(), FakeMeasure(), baseline="never")


def test_cli_k_auto_prints_the_table_and_generates_with_the_chosen_k(
    monkeypatch, tiny_target, capsys
):
    from specdec_core import cli
    from specdec_core.models import loading as models

    monkeypatch.setattr(models, "load_model", lambda *args, **kwargs: tiny_target)
    argv = ["generate", "--method", "ngram", "--k", "auto", "--prompt", "w3 w4 w3 w4", "--raw"]
    assert cli.main([*argv, "--max-new-tokens", "8", "--json"]) == 0
    captured = capsys.readouterr()
    assert "<- chosen" in captured.err and "chosen k=" in captured.err
    chosen = int(captured.err.split("chosen k=")[1].split(":")[0])
    assert json.loads(captured.out)["config"]["k"] == chosen
    assert cli.main(["generate", "--method", "ar", "--k", "auto", "--prompt", "w3"]) == 2


def test_autotune_says_when_no_k_beats_ar():
    tuned = autotune_k("ngram", DecodeConfig(), FakeMeasure(speed={1: 0.9, 2: 0.8}), (1, 2))
    assert tuned.k == 1 and "ar` is faster" in tuned.reason


def test_only_a_tree_method_reports_the_tree_it_used():
    from specdec_core.measurement.measure import tree_label

    config = {"tree_tokens": 12, "tree_depth": 4, "tree_topk": 3, "tree_sizing": "given"}
    assert tree_label("eagle2", config) == "12/4/3"
    assert tree_label("eagle2-lookup", {**config, "tree_sizing": "measured"}) == "12/4/3"
    assert tree_label("ngram", config) is None
