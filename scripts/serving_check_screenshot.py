"""Take docs/export-check.png: File ▸ Export to server… after Check with vLLM here, the
bundled EAGLE-3 head served by a real vLLM (the serving environment `./playground
serving-env` makes) beside the playground on the window's prompt.

    xvfb-run -s "-screen 0 1280x800x24" python scripts/serving_check_screenshot.py

Everything shown is measured: the window loads the embedded model, the check starts vLLM on
this machine (1-4 minutes on a CPU) and sends it the prompt. Settings go to a temporary
config dir, so the user's own settings are untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.screenshot import _wait, open_window, save_screen  # noqa: E402

PROMPT = "Explain in three sentences why the sky is blue."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "export-check.png"))
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--head", default="embedded-eagle3")
    args = parser.parse_args()
    app, window = open_window(args.size)
    window.models.head.set_spec(args.head)
    window.decoding.apply({**window.decoding.values(), "method": "eagle", "k": 3})
    window.decoding.max_new_tokens.setValue(64)
    window.prompt.set_text(PROMPT)
    window.actions.export_server.trigger()
    dialog = window.server.export_dialog
    if not dialog.check():
        print("the check did not start:", dialog.check_status.text(), file=sys.stderr)
        return 1
    _wait(app, lambda: dialog.check_result is not None, 900)
    if isinstance(dialog.check_result, str):
        print("the check failed:", dialog.check_result, file=sys.stderr)
    print(dialog.check_table.toPlainText())
    save_screen(app, Path(args.out))
    dialog.close()
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
