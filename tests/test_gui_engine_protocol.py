"""One narrow `Engine` protocol, fulfilled whole by every engine the window runs on: the
in-process engine, the engine process and the tests' fake offer each of its methods with its
parameters, and the engine process forwards exactly the protocol's methods by name."""

from __future__ import annotations

import inspect

import pytest

from app.engine import SpecdecEngine
from app.engine_api import COMMANDS, Engine
from app.process_engine import CHANNELS, ProcessEngine
from tests.gui_fake import FakeEngine

ENGINES = [SpecdecEngine, ProcessEngine, FakeEngine]


def parameters(signature: inspect.Signature) -> list[str]:
    return [name for name in signature.parameters if name != "self"]


def test_the_commands_are_the_protocols_methods_in_order():
    declared = [name for name, member in vars(Engine).items() if inspect.isfunction(member)]
    assert list(COMMANDS) == [name for name in declared if not name.startswith("_")]
    assert {"sweep", "tune", "events", "load_target", "close"} <= set(COMMANDS)
    assert not {"exclusive", "extra", "sweep_backend"} & set(COMMANDS)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda engine: engine.__name__)
def test_each_engine_offers_every_method_of_the_protocol_with_its_parameters(engine):
    for name, signature in COMMANDS.items():
        method = getattr(engine, name, None)
        assert callable(method), f"{engine.__name__} lacks {name}"
        assert parameters(inspect.signature(method)) == parameters(signature), name


def test_a_callback_or_a_stop_flag_is_always_a_channel_of_the_same_name():
    """The engine process keeps these in the window's process and answers them by message."""
    named = {"Progress": "progress", "OnPoint": "on_point", "StopFlag": "stop"}
    seen = set()
    for signature in COMMANDS.values():
        for parameter in signature.parameters.values():
            kind = str(parameter.annotation).split(" | ")[0]
            if kind in named:
                assert parameter.name == named[kind], parameter
                seen.add(parameter.name)
    assert seen == set(CHANNELS)


def test_the_engine_process_forwards_the_protocols_own_docstrings():
    assert ProcessEngine.forget.__doc__ == Engine.forget.__doc__
    assert ProcessEngine.sweep.__name__ == "sweep"
