"""The Qt-free session model: what is loaded and what runs decides what may start."""

from __future__ import annotations

import subprocess
import sys

from app.engine_api import Registries, TargetInfo
from app.session import Activity, Session


def test_nothing_may_start_until_registries_and_a_target_are_there_and_nothing_runs():
    session = Session()
    assert not session.ready() and session.busy
    session.set_registries(Registries((), ()))
    session.end()
    assert not session.ready()  # no model yet
    session.set_target(TargetInfo("embedded", "cpu", "float32", 1))
    assert session.ready()
    for activity in (Activity.RUNNING, Activity.LOADING, Activity.MEASURING):
        session.begin(activity)
        assert not session.ready() and session.busy
        session.end()
        assert session.ready()


def test_observers_hear_each_change_by_name_and_results_are_kept_by_kind():
    session = Session()
    heard: list[str] = []
    session.on_change(heard.append)
    session.begin(Activity.RUNNING, compare=True)
    session.keep("sweep", "a result")
    session.report("the prompt is empty", user=True)
    session.end()
    assert heard == ["activity", "result:sweep", "message", "activity"]
    assert session.compare_mode and session.last_results["sweep"] == "a result"
    assert session.last_message.text == "the prompt is empty" and session.last_message.error


def test_the_session_module_imports_no_qt():
    code = "import sys, app.session; print(any(m.startswith('PySide6') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
