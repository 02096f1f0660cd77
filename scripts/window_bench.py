"""Tokens/s of one setting headless and in the window, interleaved run by run; medians.

Three configurations of the same greedy run (method, prompt, tree, new tokens), each measured
in a fresh process, so each is a first run after a model load:

- `headless`: `specdec generate … --json`;
- `window-process`: a MainWindow with the engine in its own process (the default);
- `window-in-process`: a MainWindow with the engine in the window's process (`--in-process`).

The window runs are driven like a user would: Generate, with the token view and the plots
painting; the tokens/s is the run summary's. Rounds rotate the order of the configurations, so
a change in the machine's load hits all three alike. Results: docs/benchmarks.md, section
"The window against a headless run".

    xvfb-run -a -s "-screen 0 1920x1080x24" python scripts/window_bench.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = ("headless", "window-process", "window-in-process")
PROMPT = "Write a long story about a dragon who learns to read."


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--method", default="eagle2")
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--tree", default="16,5,4", help="tree tokens,depth,top-k (fixed)")
    parser.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (0: torch's)")
    parser.add_argument("--out", type=Path, help="write every run and the medians as JSON")
    parser.add_argument("--window", choices=("process", "in-process"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def tree(args: argparse.Namespace) -> dict[str, int]:
    tokens, depth, topk = (int(v) for v in args.tree.split(","))
    return {"tree_tokens": tokens, "tree_depth": depth, "tree_topk": topk}


def measure(config: str, args: argparse.Namespace) -> dict:
    """One run of `config` in a fresh process -> its summary record."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    common = ["--method", args.method, "--max-new-tokens", str(args.max_new_tokens)]
    if config == "headless":
        shape = tree(args)
        command = [sys.executable, "-m", "specdec_core.cli", "generate", *common]
        command += ["--prompt", args.prompt, "--device", "cpu", "--dtype", "float32", "--json"]
        for name, value in shape.items():
            command += [f"--{name.replace('_', '-')}", str(value)]
    else:
        command = [sys.executable, __file__, "--window", config.removeprefix("window-")]
        command += [*common, "--prompt", args.prompt, "--tree", args.tree]
        env["QT_QPA_PLATFORM"] = "xcb" if env.get("DISPLAY") else "offscreen"
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{config} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def window_run(args: argparse.Namespace) -> dict:
    """In this process: a window on the chosen engine; Generate once; the run's record."""
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.engine import SpecdecEngine
    from app.main_window import MainWindow
    from app.process_engine import ProcessEngine

    folder = Path(tempfile.mkdtemp(prefix="window-bench-"))
    os.environ["SPECDEC_CONFIG_DIR"] = str(folder / "config")
    os.environ["SPECDEC_DATA_DIR"] = str(folder / "data")
    settings = folder / "settings.json"
    values = {"target": "embedded", "head": "embedded", "device": "cpu", "dtype": "float32"}
    values |= {"method": args.method, "max_new_tokens": args.max_new_tokens, **tree(args)}
    values |= {"temperature": 0.0, "prompt": args.prompt, "raw": False}
    settings.write_text(json.dumps(values))

    app = QApplication.instance() or QApplication([sys.argv[0]])
    engine = ProcessEngine() if args.window == "process" else SpecdecEngine()
    window = MainWindow(engine=engine, settings_file=settings)
    window.show()

    def wait_until(done, timeout: float) -> None:
        loop, timer, limit = QEventLoop(), QTimer(), time.monotonic() + timeout
        timer.timeout.connect(lambda: (done() or time.monotonic() > limit) and loop.quit())
        timer.start(20)
        loop.exec()
        timer.stop()
        if not done():
            raise SystemExit(f"timed out after {timeout:.0f} s")

    wait_until(window.ready, 900)
    summaries = []
    window.controller.finished.connect(summaries.append)
    window.generate()  # the run, then the autoregressive reference for the speedup
    wait_until(lambda: any(s.method == args.method for s in summaries), 1800)
    window.close()
    app.processEvents()
    summary = next(s for s in summaries if s.method == args.method)
    return summary.to_record()


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    if args.window:
        record = window_run(args)
        print(json.dumps({k: v for k, v in record.items() if k != "token_ids"}))
        return 0
    runs: dict[str, list[dict]] = {config: [] for config in CONFIGS}
    for round_ in range(args.rounds):
        shift = round_ % len(CONFIGS)
        for config in CONFIGS[shift:] + CONFIGS[:shift]:
            record = measure(config, args)
            runs[config].append(record)
            print(
                f"round {round_ + 1} {config:18} {record['tokens_per_second']:7.2f} tok/s "
                f"({record['new_tokens']} tokens, {record['steps']} steps, "
                f"{record['stop_reason']})",
                flush=True,
            )
    medians = {c: statistics.median(r["tokens_per_second"] for r in runs[c]) for c in CONFIGS}
    for config in CONFIGS:
        ratio = medians[config] / medians["headless"]
        print(f"median {config:18} {medians[config]:7.2f} tok/s  {ratio:6.1%} of headless")
    if args.out:
        report = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "window")}}
        report |= {"medians": medians, "runs": runs}
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
