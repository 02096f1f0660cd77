"""Take docs/screenshot.png: the real window after a Compare run on the embedded model.

Run under a virtual X server so the result matches a desktop (fonts, styles):

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/screenshot.py
    xvfb-run -s "-screen 0 1280x800x24" python scripts/screenshot.py --size 1280x800 \
        --tab Train --out docs/train-tab.png

At 1280×800 (docs/screenshots/, linked from docs/window.md):

    xvfb-run -s "-screen 0 1280x800x24" python scripts/screenshot.py --size 1280x800 \
        --out docs/screenshots/compare-1280.png
    ... --tab Train --train --out docs/screenshots/train-1280.png
    ... --open export --out docs/screenshots/export-1280.png
    ... --open picker --out docs/screenshots/method-picker-1280.png

--train presses Start on the Train tab with the smallest budget (1k answer tokens, 1 min) and
takes the picture once the progress lines report the running job (or after --train-wait
seconds); --open shows File ▸ Export to server… or the method picker's list over the window
and takes the whole screen, so the dialog or the popup is in the picture.

Settings go to a temporary config dir, so the user's own settings are untouched. Methods:
autoregressive, classic with the target itself as draft (or the bundled draft if present),
every registered method that needs no extra model (e.g. n-gram lookup), and the EAGLE methods
when a bundled EAGLE head is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _wait(app, condition, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the window did not get there in time")
        app.processEvents()
        time.sleep(0.01)


def open_window(size: str, prepare=None):
    """(app, window): the real window at `size` ("WxH") on the CPU, settings in a temporary
    dir, `prepare(window)` applied before it shows; returns once the target is loaded."""
    scratch = tempfile.mkdtemp(prefix="specdec-shot-")
    os.environ.setdefault("SPECDEC_CONFIG_DIR", scratch)
    os.environ.setdefault("SPECDEC_DATA_DIR", scratch)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from PySide6.QtWidgets import QApplication

    from app import qt_compat
    from app.main_window import MainWindow

    qt_compat.apply()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = MainWindow()
    width, height = (int(v) for v in size.split("x"))
    window.resize(width, height)
    window.models.device.setCurrentText("cpu")
    if prepare is not None:
        prepare(window)
    window.show()
    _wait(app, window.ready, 300)
    return app, window


def save_grab(app, window, out: Path) -> None:
    """Let throttled redraws and layouts settle, then save the window as a PNG."""
    for _ in range(20):
        app.processEvents()
        time.sleep(0.02)
    out.parent.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(out))
    print(f"wrote {out} ({window.width()}x{window.height()})")


def save_screen(app, out: Path) -> None:
    """Let the window, dialog or popup settle, then save the whole screen as a PNG."""
    for _ in range(20):
        app.processEvents()
        time.sleep(0.02)
    out.parent.mkdir(parents=True, exist_ok=True)
    shot = app.primaryScreen().grabWindow(0)
    shot.save(str(out))
    print(f"wrote {out} ({shot.width()}x{shot.height()}, the screen)")


def train_mid_run(app, window, wait: float) -> None:
    """Start the Train tab's job with its smallest budget; return once its progress lines say
    more than that it is starting (the first generation or training line), or after `wait` s."""
    view = window.training.view
    view.tokens.setValue(view.tokens.minimum())
    view.minutes.setValue(1.0)
    view.start_button.click()

    def reporting() -> bool:
        lines = (view.generation_text.text(), view.training_text.text())
        return any("tokens" in line or "batches" in line for line in lines)

    try:
        _wait(app, reporting, wait)
    except TimeoutError:
        print(f"no progress line after {wait:.0f} s; taking the picture as it is", file=sys.stderr)


def open_over_window(window, what: str) -> None:
    """Show the export dialog or the method picker's list over the window."""
    if what == "export":
        window.server.open_export()
    else:
        window.decoding.method.showPopup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshot.png"))
    parser.add_argument("--prompt", default="Explain speculative decoding in three sentences.")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument(
        "--tab", help="show this tab (e.g. Train) once the target has loaded, not a Compare run"
    )
    parser.add_argument(
        "--train", action="store_true", help="with --tab Train: start a run, picture it mid-run"
    )
    parser.add_argument("--train-wait", type=float, default=240.0)
    parser.add_argument(
        "--methods", help="comma-separated methods to Compare (default: every usable one)"
    )
    parser.add_argument("--compare-wait", type=float, default=600.0)
    parser.add_argument(
        "--open", choices=("export", "picker"), help="show the export dialog or the method picker"
    )
    args = parser.parse_args()

    from specdec_core.resources import resource_path

    bundled_draft = (resource_path("draft") / "config.json").is_file()
    app, window = open_window(
        args.size,
        lambda window: window.models.draft.set_spec("embedded" if bundled_draft else "smollm2"),
    )

    if args.tab:
        names = [window.tabs.tabText(i) for i in range(window.tabs.count())]
        if args.tab not in names:
            print(f"no tab named {args.tab}; choose from {', '.join(names)}", file=sys.stderr)
            return 2
        window.tabs.setCurrentIndex(names.index(args.tab))
        if args.train:
            train_mid_run(app, window, args.train_wait)
    if args.open:
        open_over_window(window, args.open)
        save_screen(app, Path(args.out))
        window.close()
        return 0
    if args.tab:
        save_grab(app, window, Path(args.out))
        window.close()
        return 0

    window.prompt.set_text(args.prompt)
    window.decoding.max_new_tokens.setValue(args.max_new_tokens)
    window.decoding.k.setValue(4)
    registries = window.registries
    bundled_head = (resource_path("head") / "config.json").is_file()
    usable = {None, "draft"} | ({"head"} if bundled_head else set())
    methods = [m.name for m in registries.methods if m.name != "ar" and m.needs in usable]
    if args.methods:
        methods = [m for m in args.methods.split(",") if m in methods]
    window.compare.set_selected(methods)
    window.run_compare()
    _wait(app, lambda: not window.controller.running, args.compare_wait)
    if window.last_error:
        print("error:", window.last_error, file=sys.stderr)
        return 1
    save_grab(app, window, Path(args.out))
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
