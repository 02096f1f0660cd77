"""How long a new user waits for the first answer: one Generate in the real window, timed.

Starts the window as `specdec-gui` does (the engine in its own process) offscreen from fresh
settings (a new config dir each start) on the embedded model, presses Generate once on a fixed
prompt with the method a new user starts on and 64 new tokens, and prints one JSON line:

- `load_s`: from the window's creation to the model loaded (the window ready);
- `decode_s`: the run's own time as the engine timed it (its prefill and decode steps:
  `RunSummary.wall_seconds`);
- `prefill_begun_s`: from the press to the state line's "prefilling" (before it: the head
  loading, and for a tree the forward costs timed, or checked against the kept table);
- `answer_shown_s`, `ready_s`: from the press to the answer's summary on screen, and to
  Generate enabled again;
- `speedup_shown_s`: from the press to a speedup on screen (null: none within `--wait`), and
  the speedup (`speedup`, null where the ratio was a timing disturbance or none came),
  where its reference came from (`reference`: measured, reused or re-timed) and the line.

The run keeps its data dir (`--data-dir`, the run history and the kept references) between
starts, so a second start on the same machine is what a user's second start is: run it with
`--fresh` first (the data dir emptied: nothing kept), then again without.

    QT_QPA_PLATFORM=offscreen python scripts/first_answer.py --fresh
    QT_QPA_PLATFORM=offscreen python scripts/first_answer.py --screenshot docs/first-answer.png
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = "Explain speculative decoding in three sentences."
SPEEDUP = re.compile(r"^×(\d+\.\d+) vs autoregressive")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        default=str(Path(tempfile.gettempdir()) / "specdec-first-answer"),
        help="the user data dir the window keeps between starts (its kept references)",
    )
    parser.add_argument("--fresh", action="store_true", help="empty the data dir first")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for a speedup")
    parser.add_argument("--screenshot", default="", help="a PNG of the window once it is shown")
    parser.add_argument("--size", default="1280x800")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    data = Path(args.data_dir)
    if args.fresh:
        shutil.rmtree(data, ignore_errors=True)
    os.environ["SPECDEC_DATA_DIR"] = str(data)
    os.environ["SPECDEC_CONFIG_DIR"] = tempfile.mkdtemp(prefix="specdec-first-answer-config-")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app import qt_compat
    from app.main_window import MainWindow
    from app.process_engine import ProcessEngine

    qt_compat.apply()
    app = QApplication.instance() or QApplication(sys.argv[:1])

    def wait(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    def until(done, timeout: float) -> float | None:
        """Seconds (monotonic) when `done()` first held, polled every 10 ms; None on timeout."""
        limit = time.monotonic() + timeout
        while not done():
            if time.monotonic() > limit:
                return None
            wait(0.01)
        return time.monotonic()

    opened = time.monotonic()
    window = MainWindow(engine=ProcessEngine())  # fresh settings: nothing saved in its dir
    width, height = (int(v) for v in args.size.split("x"))
    window.resize(width, height)
    window.show()
    loaded = until(window.ready, 900)
    if loaded is None or window.target is None:
        print(json.dumps({"error": window.last_error or "the model did not load"}))
        return 1
    window.prompt.set_text(PROMPT)
    window.decoding.max_new_tokens.setValue(args.max_new_tokens)
    method = window.decoding.method_name()
    summary = window.summary

    def answered() -> bool:
        return window.single.measured is not None

    def speedup_shown() -> bool:
        lines = summary.text().splitlines()
        return bool(lines) and (
            SPEEDUP.match(lines[-1]) is not None or lines[-1].startswith("timing disturbed")
        )

    def settled_line() -> bool:  # the speedup as it stands once nothing runs in the background
        return speedup_shown() and not window.controller.measuring_reference

    def prefilling() -> bool:  # the state line once the run's prompt is being prefilled
        return "prefilling" in window.status.state.text() or answered()

    moments: dict[str, float] = {}
    watched = {
        "prefill": prefilling,
        "answer": answered,
        "ready": lambda: answered() and window.actions.generate.isEnabled(),
        "speedup": speedup_shown,
        "settled": settled_line,  # a reused one's re-timing, a fresh one's fill-in
    }
    pressed = time.monotonic()
    window.generate()
    limit = pressed + 900
    while "settled" not in moments and time.monotonic() < limit:
        for name, done in watched.items():
            if name not in moments and done():
                moments[name] = time.monotonic()
        if "answer" in moments and time.monotonic() > moments["answer"] + args.wait:
            break
        wait(0.01)
    answer, ready, shown = (moments.get(name) for name in ("answer", "ready", "speedup"))
    run = window.single.measured
    line = summary.text().splitlines()[-1] if summary.text() else ""
    match = SPEEDUP.match(line)
    reference = None
    if shown is not None:
        kinds = (("reference re-timed", "re-timed"), ("reference reused", "reused"))
        reference = next((kind for words, kind in kinds if words in line), "measured")

    def since(moment: float | None) -> float | None:
        return round(moment - pressed, 2) if moment is not None else None

    record = {
        "method": method,
        "max_new_tokens": args.max_new_tokens,
        "load_s": round(loaded - opened, 2),
        "decode_s": round(run.wall_seconds, 2) if run else None,
        "prefill_begun_s": since(moments.get("prefill")),
        "answer_shown_s": since(answer),
        "ready_s": since(ready),
        "speedup_shown_s": since(shown),
        "speedup": float(match.group(1)) if match else None,
        "reference": reference,
        "tau": round(run.mean_accept_length, 2) if run else None,
        "tokens_per_second": round(run.tokens_per_second, 1) if run else None,
        "speedup_line": line,
    }
    print(json.dumps(record, ensure_ascii=False), flush=True)
    if args.screenshot:
        for _ in range(20):
            app.processEvents()
            time.sleep(0.02)
        out = Path(args.screenshot)
        out.parent.mkdir(parents=True, exist_ok=True)
        window.grab().save(str(out))
        print(f"wrote {out} ({window.width()}x{window.height()})", file=sys.stderr)
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
