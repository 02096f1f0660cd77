"""The engine in its own process: the same events and results as in-process, Stop and errors
across the process boundary, sweeps measured there, and no process left after close."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from dataclasses import replace

import pytest

from app.engine import SpecdecEngine
from app.engine_api import HeadExportRequest, RunRequest, SweepRequest, TargetRequest, TuneRequest
from app.main_window import MainWindow
from app.process_engine import EngineProcessError, ProcessEngine
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started, Step, StepPhases
from specdec_core.errors import SpecdecError
from tests.process_engines import BOOM, SlowEngine
from tests.test_gui_head_export import assert_refused_without_a_head, file_in_the_way
from tests.tiny import VOCAB, tiny_model, tiny_tokenizer

PROMPT = "w1 w2 w3 w4"


def nothing(*_) -> None:
    return None


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tiny_model(1).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def slow(tiny_dir):
    """One engine process (SlowEngine: a pause after each step, one torch thread like the
    tests' own process) with the tiny target."""
    engine = ProcessEngine(SlowEngine)
    engine.load_target(TargetRequest(str(tiny_dir), "cpu", "float32"), nothing)
    yield engine
    engine.close()


def request(method: str = "ar", tokens: int = 12, prompt: str = PROMPT, **specs) -> RunRequest:
    return RunRequest(method, prompt, DecodeConfig(max_new_tokens=tokens), raw=True, specs=specs)


def untimed(events: list) -> list:
    """The events without their timings, which differ from run to run."""
    out = []
    for event in events:
        if isinstance(event, Step):
            event = replace(event, phases=StepPhases())
        elif isinstance(event, Finished):
            times = dict.fromkeys(("wall", "prefill"), 0.0)
            fields = {f"{name}_seconds": value for name, value in times.items()}
            event = Finished(replace(event.summary, **fields, phases=StepPhases()))
        out.append(event)
    return out


def test_the_events_and_labels_are_the_in_process_engines(slow, tiny_dir):
    local = SpecdecEngine()
    assert slow.registries() == local.registries()
    progress: list[tuple[str, float]] = []
    info = slow.load_target(
        TargetRequest(str(tiny_dir), "cpu", "float32"), lambda *a: progress.append(a)
    )
    assert info == local.load_target(TargetRequest(str(tiny_dir), "cpu", "float32"), nothing)
    assert progress[-1] == (f"loaded {tiny_dir}", 1.0)  # load progress comes across
    draft = {"draft": str(tiny_dir)}
    for run in (request("ar"), request("classic", **draft)):
        there = list(slow.events(run, threading.Event(), nothing))
        here = list(local.events(run, threading.Event(), nothing))
        assert isinstance(there[0], Started) and isinstance(there[-1], Finished)
        assert untimed(there) == untimed(here)
    ids = range(VOCAB)
    assert [slow.token_text(i) for i in ids] == [local.token_text(i) for i in ids]


def test_stop_ends_the_child_run_within_one_step(slow):
    stop = threading.Event()
    events = slow.events(request(tokens=200), stop, nothing)
    steps = 0
    for event in events:
        if isinstance(event, Step):
            steps += 1
            if steps == 3:
                stop.set()
        if isinstance(event, Finished):
            break
    assert isinstance(event, Finished)
    assert event.summary.stop_reason == "stopped"
    assert event.summary.steps <= 4  # the step in flight when Stop came, at most


def test_closing_the_stream_early_stops_the_child_and_the_next_run_is_clean(slow):
    events = slow.events(request(tokens=200), threading.Event(), nothing)
    assert isinstance(next(events), Started)
    assert isinstance(next(events), Step)
    began = time.monotonic()
    events.close()  # 200 steps would take 10 s
    assert time.monotonic() - began < 2.0
    again = list(slow.events(request(tokens=5), threading.Event(), nothing))
    assert isinstance(again[0], Started) and again[-1].summary.new_tokens == 5


def test_errors_come_across_as_the_window_shows_them(slow):
    with pytest.raises(SpecdecError, match="prompt"):  # a user error: the dialog says what to do
        list(slow.events(request(prompt=" "), threading.Event(), nothing))
    with pytest.raises(EngineProcessError) as caught:  # a failure: named like the original
        list(slow.events(request(prompt=BOOM), threading.Event(), nothing))
    assert f"{type(caught.value).__name__}: {caught.value}" == "ValueError: the engine broke"
    assert "Traceback" in caught.value.remote_traceback
    with pytest.raises(SpecdecError, match="not found"):
        slow.load_target(TargetRequest("/nonexistent/model", "cpu", "float32"), nothing)
    assert list(slow.events(request(tokens=3), threading.Event(), nothing))[-1].summary


def test_a_sweep_and_a_tune_run_in_the_engine_process(slow, tiny_dir):
    from specdec_core.measurement.sweep_records import Grid

    points = []
    specs = {"draft": str(tiny_dir)}
    base = DecodeConfig(max_new_tokens=6)
    grid = Grid({"k": [1, 2]})
    sweep = SweepRequest("classic", grid, base, (PROMPT,), specs)
    result = slow.sweep(sweep, points.append, threading.Event())
    assert [p.done for p in points] == [1, 2]
    assert [p.point for p in result.points] == [{"k": 1}, {"k": 2}]
    assert result.points[0].speedup_vs_ar > 0
    with pytest.raises(SpecdecError):  # ar has no k; the error comes across
        slow.tune(TuneRequest("ar", base, specs), points.append, threading.Event())
    stopped = threading.Event()
    stopped.set()  # Stop reaches the child's tuning: it ends after the point being measured
    tuned = slow.tune(TuneRequest("classic", base, specs), points.append, stopped)
    assert tuned.stopped and len(tuned.table) <= 1


def test_the_engine_process_ends_with_close_and_a_dead_one_is_reported():
    engine = ProcessEngine()  # forget() needs no torch: the processes start fast
    engine.forget("chat")
    process = engine.process
    assert process is not None and process.is_alive()
    process.kill()
    with pytest.raises(EngineProcessError, match="ended unexpectedly"):
        engine.forget("chat")
    engine.forget("chat")  # the next request starts a fresh process
    assert engine.process is not process
    process = engine.process
    engine.close()
    assert not process.is_alive() and process not in multiprocessing.active_children()
    assert engine.process is None
    engine.close()  # twice is harmless


def test_a_command_to_a_killed_engine_says_it_ended_and_how_to_start_it_again():
    engine = ProcessEngine()
    engine.forget("chat")
    process = engine.process
    process.kill()
    process.join()
    with pytest.raises(
        EngineProcessError, match=r"ended unexpectedly \(exit code -9\); press Restart engine"
    ):
        engine.forget("chat")
    engine.forget("chat")  # the next request starts a fresh process
    assert engine.process is not process and engine.process.is_alive()
    engine.close()


def test_a_broken_pipe_to_an_engine_not_yet_seen_dead_is_reported_as_ended(monkeypatch):
    engine = ProcessEngine()
    engine.forget("chat")
    process = engine.process
    process.kill()
    process.join()  # its end of the Pipe is closed: a send meets a broken pipe
    monkeypatch.setattr(process, "is_alive", lambda: True)  # the window has not noticed yet
    with pytest.raises(EngineProcessError, match=r"ended unexpectedly \(exit code -9\)"):
        engine.forget("chat")
    assert engine.process is None  # forgotten: the next request starts a fresh one
    engine.close()


@pytest.mark.slow
def test_the_window_stops_and_reports_errors_across_the_process(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "data"))
    model = tmp_path / "tiny"
    tiny_model(1).save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    settings = tmp_path / "settings.json"
    values = {"target": str(model), "device": "cpu", "dtype": "float32", "method": "ar"}
    settings.write_text(json.dumps({**values, "raw": True, "prompt": PROMPT}))
    engine = ProcessEngine(SlowEngine)
    window = MainWindow(engine=engine, settings_file=settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(window.ready, timeout=120_000)  # the child imports torch, loads the model
    process = engine.process

    window.decoding.max_new_tokens.setValue(200)
    window.generate()
    qtbot.waitUntil(lambda: len(window.token_view.tokens) >= 3, timeout=30_000)
    window.stop()
    shown = len(window.token_view.tokens)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=10_000)
    summary = window.session.last_results["run"]
    assert summary.stop_reason == "stopped" and "stopped by the user" in window.summary.text()
    assert summary.steps <= shown + 1  # ar: a token a step; the one in flight at most
    assert window.last_error is None

    window.decoding.select(window.decoding.method, "classic")
    window.models.draft.set_spec(str(tmp_path / "missing"))
    window.decoding.max_new_tokens.setValue(4)
    window.generate()
    qtbot.waitUntil(lambda: not window.controller.running, timeout=30_000)
    assert window.last_error is not None and "not found" in window.last_error
    assert window.error_box is not None and window.error_box.windowTitle() == "Cannot do that"

    window.decoding.select(window.decoding.method, "ar")
    window.generate()  # the next run works
    qtbot.waitUntil(lambda: not window.controller.running, timeout=30_000)
    assert window.session.last_results["run"].stop_reason == "max_tokens"

    window.close()
    assert engine.process is None and not process.is_alive()
    assert process not in multiprocessing.active_children()


@pytest.mark.slow
def test_writing_a_head_refused_in_the_engine_process_is_a_one_line_user_error(tmp_path):
    engine = ProcessEngine()  # the protocol's export_head, forwarded by its own name
    try:
        folder = str(tmp_path / "head")
        request = HeadExportRequest("sglang", folder, "ngram", DecodeConfig(k=3), "org/target")
        assert_refused_without_a_head(engine, request)
        a_file = file_in_the_way(tmp_path)
        unwritable = replace(request, method="eagle", folder=str(a_file / "head"))
        with pytest.raises(SpecdecError, match="choose a folder you can write to$"):
            engine.export_head(unwritable)
        written = engine.export_head(replace(request, method="eagle", folder=folder))
        words = written.argv
        assert words[words.index("--speculative-draft-model-path") + 1] == folder
    finally:
        engine.close()
