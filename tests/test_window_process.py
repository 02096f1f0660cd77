"""The window's process never imports torch: the engine process measures and writes, the
window shows.

Each test runs a script in a fresh interpreter: a window on a fake engine that shows a sweep
result and a Tune result (what the engine process sends back), or opens File ▸ Export to
server… and writes a head through it; torch is never imported."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WINDOW = """
import sys, time
from pathlib import Path
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.main_window import MainWindow
from tests.gui_fake import FakeEngine
window = MainWindow(engine=FakeEngine(), settings_file=Path(sys.argv[1]))

def wait_until(condition, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        app.processEvents()
        time.sleep(0.01)
"""

SWEEP_AND_TUNE = """
from specdec_core.decoding.config import DecodeConfig
from specdec_core.measurement.sweep_records import Aggregate, Grid, MeasuredPoint, SweepResult
from specdec_core.measurement.sweep_records import TuneResult, TuneRow
grid = Grid({"k": [1, 2], "temperature": [0.0]})
point = grid.points()[0]
record = MeasuredPoint(point, DecodeConfig(), Aggregate(30.0, 2.0, speedup_vs_ar=1.5))
window.sweep.show_result(SweepResult({"method": "eagle"}, [record]))
assert "1.50× vs autoregressive" in window.sweep.view.status.text()
row = TuneRow(2, 30.0, 1.5, 2.0, 20.0)
window.sweep.show_result(TuneResult("eagle", (row,), 2, "k=2: the best"))
"""

EXPORT = """
from app.widgets.server_export_dialog import HeadExportSource
window.show()
wait_until(window.ready)  # the engine's registries and the target, through the event loop
window.decoding.select(window.decoding.method, "eagle2")
window.actions.export_server.trigger()
dialog = window.server.export_dialog
assert isinstance(dialog.head_source, HeadExportSource)
assert "sglang.launch_server" not in dialog.texts["sglang"].toPlainText()  # the head first
dialog.head_engine.setCurrentIndex(dialog.head_engine.findData("sglang"))
dialog.head_folder.setText(sys.argv[2])
assert dialog.write_head()
wait_until(lambda: dialog.head_status.text().startswith("wrote "))
assert "sglang.launch_server" in dialog.texts["sglang"].toPlainText()
assert sys.argv[2] in dialog.texts["sglang"].toPlainText()
window.decoding.select(window.decoding.method, "classic")
window.actions.export_server.trigger()
assert "drafts without an EAGLE head" in window.server.export_dialog.head_status.text()
window.close()
"""


def torch_imported(*args: str, script: str) -> bool:
    """Run `script` after the window is built; was torch imported by the end?"""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    code = WINDOW + script + "print('torch' in sys.modules)\n"
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1] == "True"


def test_the_window_shows_sweeps_and_tunes_without_importing_torch(tmp_path):
    assert not torch_imported(str(tmp_path / "settings.json"), script=SWEEP_AND_TUNE)


def test_the_window_opens_export_to_server_and_writes_a_head_without_importing_torch(tmp_path):
    settings, folder = str(tmp_path / "settings.json"), str(tmp_path / "head")
    assert not torch_imported(settings, folder, script=EXPORT)
