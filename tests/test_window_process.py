"""The window's process never imports torch: the engine process measures, the window shows.

Run in a fresh interpreter: a window on a fake engine builds a sweep grid, and shows a sweep
result and a Tune result (what the engine process sends back), with torch never imported."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import sys
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.main_window import MainWindow
from tests.gui_fake import FakeEngine
from specdec_core.sweep_records import Grid, SweepResult, TuneResult, TuneRow
from pathlib import Path
window = MainWindow(engine=FakeEngine(), settings_file=Path(sys.argv[1]))
grid = Grid({"k": [1, 2], "temperature": [0.0]})
point = grid.points()[0]
record = {"point": point, "config": {"temperature": 0.0}, "speedup_vs_ar": 1.5}
window.sweep._on_result(SweepResult({"method": "eagle"}, [record]))
assert "1.50× vs autoregressive" in window.sweep.view.status.text()
row = TuneRow(2, 30.0, 1.5, 2.0, 20.0)
window.sweep._on_result(TuneResult("eagle", (row,), 2, "k=2: the best"))
print("torch" in sys.modules)
"""


def test_the_window_shows_sweeps_and_tunes_without_importing_torch(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "settings.json")],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
