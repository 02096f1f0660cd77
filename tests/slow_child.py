"""The Train tab's children made slow, for the tests of Stop and of the time budget: the real
`specdec data run` / `specdec train eagle`, each answer batch of the data job (`data`) or each
training step (`train`) taking SECONDS more.

    python tests/slow_child.py SECONDS -m specdec_core.cli data run ...

`slow_argv(argv, seconds)` turns a `TrainingPlan` command (python -m specdec_core.cli ...) into
this one."""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def slow_argv(argv: list[str], seconds: float) -> list[str]:
    """`[python, -m, specdec_core.cli, ...]` run through this script, `seconds` slower a unit."""
    python, *rest = argv
    return [python, str(Path(__file__).resolve()), f"{seconds:g}", *rest]


def _slowed(function, seconds: float):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)

    return slow


def main() -> int:
    seconds = float(sys.argv[1])
    sys.path.insert(0, str(ROOT))
    from specdec_core.cli import main as cli
    from specdec_core.training import datasets as data
    from specdec_core.training import loop

    assert sys.argv[2:4] == ["-m", "specdec_core.cli"], sys.argv
    command = sys.argv[4]
    if command == "data":
        data.answer_batch = _slowed(data.answer_batch, seconds)
    else:
        loop.train_step = _slowed(loop.train_step, seconds)
    return cli(sys.argv[4:])


if __name__ == "__main__":
    raise SystemExit(main())
