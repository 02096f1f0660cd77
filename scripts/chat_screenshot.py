"""Take docs/screenshots/chat-1280.png: the real window's Chat tab after two replies on the
embedded model, each speedup filled in (fresh settings and data in a temporary dir).

    xvfb-run -s "-screen 0 1280x800x24" python scripts/chat_screenshot.py

The default method and settings of a new user; a system prompt; two messages, the second
asking for a list (so the reply shows as markdown). Each reply waits for its autoregressive
reference, so the picture has the speedup under both.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.screenshot import open_window, save_grab  # noqa: E402

SYSTEM = "You are a helpful assistant. Answer briefly."
MESSAGES = (
    "What is speculative decoding?",
    "Give me three tips for writing fast Python code, as a list.",
)


def wait_settled(app, window, timeout: float) -> None:
    """Until the reply and its reference have ended."""
    controller = window.controller
    end = time.monotonic() + timeout
    while controller.running or controller.measuring_reference:
        if time.monotonic() > end:
            raise TimeoutError("the reply or its reference did not end in time")
        app.processEvents()
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots" / "chat-1280.png"))
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--wait", type=float, default=1500.0, help="seconds per reply at most")
    parser.add_argument("--cap", type=int, default=160, help="the reply cap (tokens)")
    args = parser.parse_args()

    app, window = open_window(args.size)
    window.show_chat()
    window.chat_view.system.setText(SYSTEM)
    window.chat_view.max_tokens.setValue(args.cap)
    for message in MESSAGES:
        window.prompt.set_text(message)
        window.generate()
        wait_settled(app, window, args.wait)
        print(
            f"{time.strftime('%H:%M:%S')} {window.chat_view.turns[-1].summary.text()}", flush=True
        )
        if window.last_error:
            print("error:", window.last_error, file=sys.stderr)
            return 1
    for turn in window.chat_view.turns:
        print(turn.summary.text(), flush=True)
    save_grab(app, window, Path(args.out))
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
