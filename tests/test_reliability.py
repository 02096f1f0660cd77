"""Bad input and faults: a clear one-line message, checked before a model loads, and nothing
the user had is lost (settings, history, results, the loaded model)."""

from __future__ import annotations

import json
import os

import pytest

# import it before the fixture below replaces load_model, so the replacement cannot leak)
from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.files import write_atomic
from specdec_core.models import loading as models  # noqa: F401  (runner binds load_model on import:
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


@pytest.fixture
def no_model_load(monkeypatch):
    """Any model load fails the test: the input must be refused before one."""

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(models, "load_model", refuse)


def _one_line_error(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("specdec: error")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--prompt", ""], "empty"),
        (["--prompt", "   \n\t "], "empty"),
        (["--prompt", "hi", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["--prompt", "hi", "--k", "-1"], "--k"),
        (["--prompt", "hi", "--k", "1000"], "--k"),
        (["--prompt", "hi", "--temperature", "-0.5"], "--temperature"),
        (["--prompt", "hi", "--temperature", "nan"], "--temperature"),
        (["--prompt", "hi", "--temperature", "inf"], "--temperature"),
        (["--prompt", "hi", "--top-p", "nan"], "--top-p"),
        (["--prompt", "hi", "--top-p", "0"], "--top-p"),
        (["--prompt", "hi", "--top-p", "1.5"], "--top-p"),
        (["--prompt", "hi", "--policy", "nonsense"], "unknown policy"),
        (["--prompt", "hi", "--policy-param", "tau"], "NAME=NUMBER"),
    ],
)
def test_bad_generate_settings_are_refused_before_a_model_loads(capsys, no_model_load, argv, says):
    assert says in _one_line_error(capsys, ["generate", *argv])


def test_a_prompt_file_that_is_not_utf8_is_refused_with_its_line(capsys, no_model_load, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "fine"}\n{"prompt": "caf\xe9"}\n')
    line = _one_line_error(capsys, ["bench", "--prompts", str(path)])
    assert "p.jsonl:2" in line and "UTF-8" in line


def test_a_malformed_jsonl_line_is_reported_with_its_number(capsys, no_model_load, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b"\n')
    assert "p.jsonl:3" in _one_line_error(capsys, ["bench", "--prompts", str(path)])


def test_an_interrupted_atomic_write_leaves_the_old_file_readable(tmp_path, monkeypatch):
    path = tmp_path / "bench.json"
    write_atomic(path, json.dumps({"old": True}))

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, json.dumps({"new": True}))
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no scratch file left


def test_a_corrupt_history_file_is_set_aside_with_a_note(make_window, tmp_path):
    history = tmp_path / "data" / "history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text('{"method": "ar"}\n{"method": "cla')  # a crash mid-line
    window = make_window()
    assert "history file" in window.status.currentMessage()
    assert (history.parent / "history.jsonl.corrupt").is_file() and not history.exists()


def test_an_empty_prompt_is_refused_in_the_window_before_anything_runs(make_window, qtbot):
    window = make_window()
    window.prompt.set_text("   ")
    window.generate()
    window.run_compare()
    assert "prompt is empty" in window.last_error
    assert window.engine.requests == [] and window.ready()


def test_an_engine_error_mid_run_leaves_the_window_usable(make_window, qtbot):
    window = make_window()
    window.engine.fail_next = SpecdecError("out of memory; try --dtype bfloat16")
    window.generate()
    wait_idle(qtbot, window)
    assert "out of memory" in window.last_error and window.ready()


def test_closing_the_window_mid_load_leaves_no_live_thread(make_window, qtbot):
    import threading

    window = make_window()
    started, release = threading.Event(), threading.Event()
    load = window.engine.load_target

    def slow(*args, **kwargs):
        started.set()
        release.wait(5)
        return load(*args, **kwargs)

    window.engine.load_target = slow
    window.load_target()
    assert started.wait(5)
    # the load's thread alone (a thread that ran before it may take a moment to end on a
    # loaded machine)
    qtbot.waitUntil(lambda: window.jobs.live_threads() == 1, timeout=5000)
    release.set()  # a load cannot be interrupted mid-file: closing waits for it to end
    window.close()
    assert window.jobs.live_threads() == 0


@pytest.mark.slow
def test_closing_the_window_mid_download_cancels_it_and_leaves_no_live_thread(
    qtbot, tmp_path, monkeypatch
):
    """The first load is a hub model still downloading: closing the window stops the download
    between chunks (long before it would end), no thread is left and no half file is kept."""
    import time

    from app.engine import SpecdecEngine
    from app.main_window import MainWindow
    from tests.hub_cache import FakeHub, tiny_repo, use_cache

    monkeypatch.setenv("SPECDEC_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "data"))
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    served = tmp_path / "served"
    hub = FakeHub(tiny_repo(tmp_path / "source"), served, chunks=40, delay=0.25)
    hub.install(monkeypatch)  # the weights take 10 s to arrive
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"target": "owner/tiny", "device": "cpu", "dtype": "float32"}))
    window = MainWindow(engine=SpecdecEngine(), settings_file=settings)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: "model.safetensors" in hub.asked, timeout=60_000)
    began = time.monotonic()
    window.close()
    assert time.monotonic() - began < 5.0
    assert window.controller.live_threads() == 0
    assert not list(served.rglob("model.safetensors"))  # the cut-off file was never finished


@pytest.mark.parametrize("method", ["ar", "ngram", "classic"])
def test_a_huge_max_new_tokens_stops_at_the_context_identical_to_ar(tiny_target, method):
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.run.runner import run

    ids = [1, 5, 9, 4, 7, 8]
    huge = DecodeConfig(max_new_tokens=10**9, k=3)
    summary = run(tiny_target, method, ids, huge, tiny_target if method == "classic" else None)
    assert summary.stop_reason in ("context", "eos")
    assert len(ids) + len(summary.token_ids) <= tiny_target.context_length
    assert summary.token_ids == run(tiny_target, "ar", ids, huge).token_ids


@pytest.mark.parametrize("method", ["classic", "eagle"])
def test_k_zero_drafts_nothing_and_decodes_like_ar(tiny_target, method):
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.run.runner import run
    from tests.eagle_tiny import tiny_head

    extra = tiny_target if method == "classic" else tiny_head(tiny_target)
    ids, config = [1, 5, 9, 4], DecodeConfig(max_new_tokens=12, k=0)
    summary = run(tiny_target, method, ids, config, extra)
    assert summary.token_ids == run(tiny_target, "ar", ids, config).token_ids
    assert summary.stop_reason in ("max_tokens", "eos")


@pytest.mark.parametrize("method", ["ar", "ngram", "classic", "eagle2"])
def test_a_huge_temperature_samples_without_error(tiny_target, method):
    """At T = 1e6 every distribution is nearly uniform: sampling and the acceptance ratios
    stay finite and the run ends normally."""
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.run.runner import run
    from tests.eagle_tiny import tiny_head

    extra = {"classic": tiny_target, "eagle2": tiny_head(tiny_target)}.get(method)
    config = DecodeConfig(max_new_tokens=16, k=3, temperature=1e6, seed=3)
    summary = run(tiny_target, method, [1, 5, 9, 4], config, extra)
    assert 0 < len(summary.token_ids) <= 16 and summary.stop_reason in ("max_tokens", "eos")


def test_an_unexpected_error_goes_to_the_log_file_whose_path_about_shows(
    make_window, qtbot, tmp_path, monkeypatch
):
    import logging.handlers
    import sys

    from PySide6.QtWidgets import QMessageBox

    from app.logs import log_path, setup_logging

    monkeypatch.setenv("SPECDEC_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # setup_logging routes it to the log
    level = logging.getLogger().level
    path = setup_logging()
    handlers = list(logging.getLogger().handlers)
    try:
        window = make_window()
        window.engine.fail_next = RuntimeError("a bug in a library")
        window.generate()
        wait_idle(qtbot, window)
        assert window.last_error == "RuntimeError: a bug in a library"  # one line, no trace
        for handler in handlers:
            handler.flush()
        logged = path.read_text()
        assert "Traceback" in logged and "RuntimeError: a bug in a library" in logged
        shown = []
        monkeypatch.setattr(QMessageBox, "about", lambda parent, title, text: shown.append(text))
        window.actions.about.trigger()
        assert path == log_path() and str(path) in shown[0]
    finally:
        root = logging.getLogger()
        root.setLevel(level)
        for handler in root.handlers[:]:
            if isinstance(handler, logging.handlers.RotatingFileHandler):
                root.removeHandler(handler)
                handler.close()
