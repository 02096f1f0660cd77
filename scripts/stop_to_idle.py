"""Seconds from Stop to idle for every job of the window, on a real model.

A MainWindow (engine in its own process, as `specdec-gui` runs it) on the embedded model is
driven as a user would: each job is started, given a few seconds to be well inside a step (a
decode step, a Tune or sweep point, an answer batch, a training batch), then Run ▸ Stop (the
Train tab's Stop for its children) is pressed, and the time until the window is idle again is
printed. The slow-engine tests (tests/test_stop_within_a_step.py) check the bound; this
measures what a user of the real model sees. Results: docs/window.md, "Stop".

    QT_QPA_PLATFORM=offscreen python scripts/stop_to_idle.py [--jobs generate,compare,...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

JOBS = ("generate", "compare", "chat", "tune", "sweep", "data", "training")
PROMPT = "Write a long story about a dragon who learns to read, chapter by chapter."


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated: {JOBS}")
    parser.add_argument("--method", default="eagle2-lookup")
    parser.add_argument("--inside", type=float, default=3.0, help="seconds into a job to Stop")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.process_engine import ProcessEngine

    folder = Path(tempfile.mkdtemp(prefix="stop-to-idle-"))
    os.environ["SPECDEC_CONFIG_DIR"] = str(folder / "config")
    os.environ["SPECDEC_DATA_DIR"] = str(folder / "data")
    settings = folder / "settings.json"
    values = {"target": "embedded", "head": "embedded", "device": "cpu", "dtype": "float32"}
    values |= {"method": args.method, "compare_methods": ["ar", args.method]}
    values |= {"max_new_tokens": 512, "temperature": 0.0, "prompt": PROMPT, "raw": False}
    settings.write_text(json.dumps(values))

    app = QApplication.instance() or QApplication([sys.argv[0]])
    window = MainWindow(engine=ProcessEngine(), settings_file=settings)
    window.show()

    def wait(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    def wait_until(done, timeout: float, what: str) -> None:
        limit = time.monotonic() + timeout
        while not done():
            if time.monotonic() > limit:
                raise SystemExit(f"{what}: timed out after {timeout:.0f} s")
            wait(0.02)

    def stop_and_time(job: str, busy, stop) -> None:
        wait(args.inside)
        if not busy():
            print(f"{job}: ended before Stop ({args.inside:.0f} s in); nothing measured")
            return
        pressed = time.monotonic()
        stop()
        wait_until(lambda: not busy(), 600, f"{job} after Stop")
        print(f"{job}: stop to idle {time.monotonic() - pressed:.2f} s", flush=True)

    wait_until(window.ready, 900, "loading the embedded model")
    view, train = window.sweep.view, window.training
    stop = window.actions.stop.trigger

    def running() -> bool:
        return window.controller.running

    def sweeping() -> bool:
        return window.sweep.running

    def training() -> bool:
        return train.running

    def in_a_batch() -> bool:
        from app.training_plan import read_training

        progress = read_training(train.plan) if train.plan else None
        return progress is not None and progress.stage == "training"

    for job in args.jobs.split(","):
        if job == "generate":
            window.tabs.setCurrentIndex(0)
            window.generate()
            wait_until(running, 60, job)
            stop_and_time(job, running, stop)
        elif job == "compare":
            window.run_compare()
            wait_until(running, 60, job)
            stop_and_time(job, running, stop)
        elif job == "chat":
            window.show_chat()
            window.generate()
            wait_until(running, 60, job)
            stop_and_time(job, running, stop)
            window.tabs.setCurrentIndex(0)
        elif job == "tune":
            window.decoding.max_new_tokens.setValue(48)
            if not window.sweep.tune():
                raise SystemExit(f"Tune did not start: {view.status.text()}")
            wait_until(lambda: "1/" in view.status.text(), 900, job)
            stop_and_time(job, sweeping, stop)
        elif job == "sweep":
            window.decoding.max_new_tokens.setValue(32)
            view.k_values.setText("1,2,3,4")
            view.temperatures.setText("0")
            if not window.sweep.run_sweep():
                raise SystemExit(f"the sweep did not start: {view.status.text()}")
            wait_until(lambda: len(view.records) >= 1, 900, job)
            stop_and_time(job, sweeping, stop)
        elif job in ("data", "training"):
            window.tabs.setCurrentWidget(train.view)
            train.view.tokens.setValue(1)
            if job == "data":
                from app.training_plan import read_generation

                train.view.start_button.click()
                wait_until(lambda: train.plan is not None, 60, job)
                # the child has loaded the target and begun its first answer batch
                wait_until(lambda: read_generation(train.plan.work) is not None, 600, job)
            else:  # resume past the data job, into training
                if train.view.resume_button.isEnabled():
                    train.view.resume_button.click()
                else:
                    train.view.start_button.click()

                wait_until(lambda: train.step == "training", 1800, job)
                wait_until(in_a_batch, 1800, job)
            stop_and_time(job, training, train.stop)
        else:
            raise SystemExit(f"unknown job {job!r}: choose from {', '.join(JOBS)}")
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
