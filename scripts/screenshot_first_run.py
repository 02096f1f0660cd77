"""Take docs/first-run.png and docs/chat.png: the real window on the embedded model as a new
user meets it (fresh settings, the method it selects, one Generate with its measured
speedup), then a chat of two turns.

    xvfb-run -s "-screen 0 1600x1000x24" python scripts/screenshot_first_run.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.screenshot import _wait, open_window, save_grab  # noqa: E402

TURNS = (
    "What is speculative decoding, in two sentences?",
    "And why does it keep the output the same?",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    app, window = open_window(args.size)
    window.decoding.max_new_tokens.setValue(args.max_new_tokens)

    def generate(text: str | None = None) -> bool:
        if text is not None:
            window.prompt.set_text(text)
        window.generate()
        _wait(app, lambda: not window.controller.running, 600)
        if window.last_error:
            print("error:", window.last_error, file=sys.stderr)
        return not window.last_error

    if not generate():
        return 1
    save_grab(app, window, ROOT / "docs" / "first-run.png")
    window.tabs.setCurrentWidget(window.chat_view)
    if not all(generate(text) for text in TURNS):
        return 1
    save_grab(app, window, ROOT / "docs" / "chat.png")
    for turn in window.chat_view.turns:
        print(turn.summary.text())
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
