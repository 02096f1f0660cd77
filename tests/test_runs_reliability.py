"""Runs under faults: Stop at any moment, out of memory, many runs in a row."""

from __future__ import annotations

import os
import random
import threading

import psutil
import pytest
import torch

from app.engine import SpecdecEngine
from app.engine_api import RunRequest
from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)

CONFIG = DecodeConfig(max_new_tokens=24, k=3)


def _events(engine, method, stop):
    request = RunRequest(method, "w3 w4 w5 w6 w3 w4", CONFIG, raw=True)
    return engine.events(request, stop, lambda *_: None)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "eagle2"])
def test_stop_at_fifty_random_moments_stops_within_one_step_and_leaves_no_trace(
    tiny_target, method, monkeypatch
):
    from tests.eagle_tiny import tiny_head

    head = tiny_head(tiny_target)
    engine = SpecdecEngine(tiny_target)
    monkeypatch.setattr(engine, "extra", lambda *args: head if method == "eagle2" else None)
    fresh = [e for e in _events(engine, method, threading.Event()) if isinstance(e, Finished)]
    expected = fresh[0].summary.token_ids
    chooser = random.Random(0)
    for _ in range(50):
        stop = threading.Event()
        at = chooser.randrange(0, 12)  # steps to let through before Stop
        after, steps, finished = 0, 0, None
        for event in _events(engine, method, stop):
            if isinstance(event, Step):
                steps += 1
                after += stop.is_set()
                if steps == at + 1:
                    stop.set()
            elif isinstance(event, Finished):
                finished = event.summary
        assert after <= 1 and finished is not None
        assert finished.stop_reason in ("stopped", "max_tokens", "eos")
        again = [e for e in _events(engine, method, threading.Event()) if isinstance(e, Finished)]
        assert again[0].summary.token_ids == expected  # the next run is a fresh run


def test_running_out_of_memory_in_the_cli_says_what_to_change(capsys, monkeypatch, tiny_target):
    from specdec_core.models import loading as models
    from specdec_core.run import runner

    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_target)

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(runner, "generate", oom)
    code = main(["generate", "--prompt", "w1 w2", "--raw"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "out of memory" in err and "--dtype bfloat16" in err and "--device-map" in err


def test_running_out_of_memory_in_the_window_is_a_message_and_it_stays_usable(make_window, qtbot):
    window = make_window()
    window.engine.fail_next = torch.OutOfMemoryError("CUDA out of memory")
    window.generate()
    wait_idle(qtbot, window)
    assert "out of memory" in window.last_error and "shorter context" in window.last_error
    window.generate()
    wait_idle(qtbot, window)
    assert window.token_view.tokens and window.ready()


def test_two_hundred_generations_do_not_grow_memory(tiny_target):
    """RSS after 200 runs stays within 64 MiB of what it was after the first 20 (allocator
    warm-up): no run leaves caches, tensors or events behind."""
    engine = SpecdecEngine(tiny_target)
    process = psutil.Process(os.getpid())

    def generations(n: int) -> None:
        for _ in range(n):
            for _event in _events(engine, "ngram", threading.Event()):
                pass

    generations(20)
    before = process.memory_info().rss
    generations(180)
    grown = (process.memory_info().rss - before) / 2**20
    print(f"RSS growth over 180 more generations: {grown:.1f} MiB")
    assert grown < 64


def test_running_out_of_memory_in_a_load_keeps_the_model_loaded_before(make_window, qtbot):
    window = make_window()
    kept = window.session.target.spec

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")

    window.engine.load_target = oom
    window.models.target.set_spec("owner/bigger-model")
    window.load_target()
    qtbot.waitUntil(lambda: window.last_error is not None and window.ready(), timeout=5000)
    assert "out of memory during the model load" in window.last_error
    assert "--dtype bfloat16" in window.last_error
    assert f"{kept} is still loaded" in window.last_error
    window.generate()
    wait_idle(qtbot, window)
    assert window.token_view.tokens and window.session.target.spec == kept


def test_running_out_of_memory_while_loading_in_the_cli_says_what_to_change(capsys, monkeypatch):
    from specdec_core.models import loading as models

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")

    monkeypatch.setattr(models, "load_model", oom)
    code = main(["generate", "--prompt", "w1 w2", "--raw"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "out of memory during `generate`" in err and "--device-map auto" in err
