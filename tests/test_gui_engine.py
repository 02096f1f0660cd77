"""The GUI's engine facade on a tiny model: registries, events, cached drafts, errors."""

from __future__ import annotations

import threading

import pytest

from app.engine import SpecdecEngine
from app.engine_api import RunRequest
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started, Step
from specdec_core.errors import SpecdecError
from specdec_core.run import runner
from specdec_core.run.methods import METHODS


def _quiet(message: str, fraction: float) -> None:
    pass


def _run(engine: SpecdecEngine, method: str, **config) -> list:
    request = RunRequest(method, "w3 w4 w5 w6", DecodeConfig(max_new_tokens=6, **config), raw=True)
    return list(engine.events(request, threading.Event(), _quiet))


def test_the_registries_are_read_from_the_engine():
    registries = SpecdecEngine().registries()
    assert [m.name for m in registries.methods] == list(METHODS)
    policies = {p.name: p for p in registries.policies}
    assert not policies["lossless"].lossy
    assert all(p.lossy for name, p in policies.items() if name not in ("lossless", "ensemble"))


def test_a_run_yields_started_steps_and_finished(tiny_target):
    events = _run(SpecdecEngine(tiny_target), "ar")
    assert isinstance(events[0], Started) and isinstance(events[-1], Finished)
    assert all(isinstance(e, Step) for e in events[1:-1])
    assert events[-1].summary.new_tokens == sum(len(e.tokens) for e in events[1:-1])


def test_a_draft_is_loaded_once_per_spec(tiny_target, tiny_draft, monkeypatch):
    calls = []

    def loader(spec, target, progress=None):
        calls.append(spec)
        return tiny_draft

    monkeypatch.setitem(runner.EXTRA_LOADERS, "draft", loader)
    engine = SpecdecEngine(tiny_target)
    greedy = _run(engine, "ar")[-1].summary.token_ids
    for _ in range(2):
        assert _run(engine, "classic")[-1].summary.token_ids == greedy  # lossless at T = 0
    assert calls == ["embedded"]


def test_running_without_a_target_is_a_user_error():
    with pytest.raises(SpecdecError, match="press Load"):
        _run(SpecdecEngine(), "ar")


def test_special_tokens_are_labelled_in_plain_words_not_raw_markup(tiny_target):
    from app.engine import END_LABEL, SPECIAL_LABEL

    engine = SpecdecEngine(tiny_target)
    assert engine.token_text(2) == END_LABEL  # </s>, the end of text
    assert engine.token_text(1) == SPECIAL_LABEL  # <s>
    assert engine.token_text(5) == "w2"  # an ordinary token keeps its text
    assert not any("<" in label for label in engine.token_texts())
