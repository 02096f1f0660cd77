"""Take docs/screenshot.png: the real window after a Compare run on the embedded model.

Run under a virtual X server so the result matches a desktop (fonts, styles):

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/screenshot.py
    xvfb-run -s "-screen 0 1280x800x24" python scripts/screenshot.py --size 1280x800 \
        --tab Train --out docs/train-tab.png

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshot.png"))
    parser.add_argument("--prompt", default="Explain speculative decoding in three sentences.")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument(
        "--tab", help="show this tab (e.g. Train) once the target has loaded, not a Compare run"
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
    window.compare.set_selected(methods)
    window.run_compare()
    _wait(app, lambda: not window.controller.running, 600)
    if window.last_error:
        print("error:", window.last_error, file=sys.stderr)
        return 1
    save_grab(app, window, Path(args.out))
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
