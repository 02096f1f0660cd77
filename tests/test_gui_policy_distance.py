"""A lossy run in the window is measured for its distance from the target's distribution
after it finishes (one more decode, said on the state line, ended by Stop), and its point
arrives on the Decoding panel's τ-against-distance plot with that distance; a lossless run's
point is at 0 with no extra decode."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from app.worker import MEASURING_DISTANCE
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)
from tests.policy_fake import GatedDistanceEngine


def choose_policy(window, name: str) -> None:
    window.decoding.select(window.decoding.policy, name)
    assert window.decoding.policy_name() == name


def test_a_lossy_runs_point_arrives_with_its_measured_distance(make_window, qtbot):
    engine = GatedDistanceEngine()
    engine.gate.set()
    window = make_window(engine)
    choose_policy(window, "threshold")
    window.generate()
    wait_idle(qtbot, window)
    plot = window.decoding.policy_plot
    run = engine.summaries[0]
    assert run.lossy and run.method == "classic"
    assert [request.method for request in engine.distances] == ["classic"]  # not the reference
    assert len(plot.points) == 1 and plot.unmeasured == 0  # the reference is not drawn
    point = plot.points[0]
    assert point.lossy and point.total_variation == pytest.approx(engine.token_distance)
    assert point.tau == pytest.approx(run.mean_accept_length)
    assert list(plot.lossy.getData()[0]) == [pytest.approx(engine.token_distance)]


def test_the_state_line_says_while_the_distance_is_measured_and_stop_ends_it(make_window, qtbot):
    engine = GatedDistanceEngine()
    window = make_window(engine)
    choose_policy(window, "threshold")
    window.generate()
    qtbot.waitUntil(engine.measuring.is_set, timeout=5000)
    qtbot.waitUntil(lambda: window.status.state.text().startswith(MEASURING_DISTANCE[:30]))
    assert window.controller.running  # the queue waits: nothing else touches the models
    window.stop()
    wait_idle(qtbot, window)
    plot = window.decoding.policy_plot
    assert plot.points == [] and plot.unmeasured == 1  # counted, not drawn
    assert [request.method for request in engine.requests] == ["classic"]  # no reference


def test_a_lossless_run_plots_at_zero_without_an_extra_decode(make_window, qtbot):
    engine = GatedDistanceEngine()  # the gate stays shut: a measurement would hang
    window = make_window(engine)
    choose_policy(window, "lossless")
    window.generate()
    wait_idle(qtbot, window)
    assert engine.distances == [] and not engine.measuring.is_set()
    points = window.decoding.policy_plot.points
    assert [(p.lossy, p.total_variation) for p in points] == [(False, 0.0)]


def test_the_engine_measures_a_lossy_run_as_the_benchmark_does(tiny_target):
    from app.engine import SpecdecEngine
    from app.engine_api import RunRequest
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.decoding.events import Finished
    from specdec_core.measurement.measure import run_distance
    from specdec_core.run.prompts import encode_prompt

    prompt = "w7 w8 w7 w8 w7 w8"
    config = DecodeConfig(max_new_tokens=10, k=3, policy="threshold", policy_params={"tau": 0.01})
    request = RunRequest("ngram", prompt, config, raw=True)
    engine = SpecdecEngine(tiny_target)
    never = threading.Event()
    events = list(engine.events(request, never, lambda message, fraction: None))
    summary = next(event.summary for event in events if isinstance(event, Finished))
    assert summary.lossy
    distance = engine.distance(request, summary, never)
    ids = encode_prompt(tiny_target.tokenizer, prompt, True)
    assert distance == run_distance("ngram", tiny_target, ids, config)
    assert distance.tokens > 0 and distance.total_variation is not None
    stopped = threading.Event()
    stopped.set()
    assert engine.distance(request, summary, stopped) is None  # Stop: no distance
    lossless = replace(request, config=config.lossless())
    assert engine.distance(lossless, replace(summary, lossy=False), never).exact_by_construction


def test_the_engine_process_measures_the_same_distance(tmp_path):
    from app.engine import SpecdecEngine
    from app.engine_api import RunRequest, TargetRequest
    from app.process_engine import ProcessEngine
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.decoding.events import Finished
    from tests.process_engines import SlowEngine
    from tests.tiny import tiny_model, tiny_tokenizer

    tiny_model(1).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    config = DecodeConfig(max_new_tokens=8, k=3, policy="threshold", policy_params={"tau": 0.01})
    request = RunRequest("ngram", "w7 w8 w7 w8 w7 w8", config, raw=True)
    never = threading.Event()
    local, child = SpecdecEngine(), ProcessEngine(SlowEngine)
    try:
        for engine in (local, child):
            engine.load_target(TargetRequest(str(tmp_path), "cpu", "float32"), lambda *_: None)
        events = list(child.events(request, never, lambda *_: None))
        summary = next(event.summary for event in events if isinstance(event, Finished))
        there = child.distance(request, summary, never)
        assert there is not None and there.tokens > 0
        here = local.distance(request, summary, never)
        assert there.tokens == here.tokens  # the same run decoded again
        assert there.total_variation == pytest.approx(here.total_variation, abs=1e-5)
    finally:
        child.close()
