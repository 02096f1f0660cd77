"""Forward costs measured on this device, for sizing EAGLE-2 trees (`tree_sizing`).

`ForwardCosts` measures each model's costs once and keeps them for whoever owns it (a run, a
benchmark, an engine: it is handed to the drafters that size trees with it): `target(model)`,
seconds per target forward over n tree tokens after a cached prefix; `head(key, step)`, seconds
per head step over k beam rows. A fresh `ForwardCosts` measures again, so what it returns never
depends on what ran before it elsewhere in the process. `fastest` keeps the fastest of several
rounds (a busy shared CPU only ever adds time) and `monotone` makes costs never fall with size.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from specdec_core.target import Target

TARGET_SIZES = (1, 2, 4, 8, 16, 32, 60)  # tokens per measured target forward
HEAD_ROWS = (1, 2, 4, 7, 10)  # beam widths per measured head step
PREFIX = 128  # cached tokens under the measured forwards (a short chat prompt)


class ForwardCosts:
    """Costs measured once per model (the target) or head key, then reused."""

    def __init__(self) -> None:
        self._target: dict[tuple, dict[int, float]] = {}
        self._head: dict[tuple, dict[int, float]] = {}

    def target(self, model) -> dict[int, float]:
        """Seconds per target forward over n tree tokens after a cached prefix."""
        key = _model_key(model)
        if key not in self._target:
            self._target[key] = _measure_target(model)
        return self._target[key]

    def head(self, key: tuple, step: Callable[[int], None]) -> dict[int, float]:
        """Seconds per head step over k rows; `step(k)` runs one (measured once per `key`)."""
        if key not in self._head:
            runs = {k: (lambda k=k: step(k)) for k in HEAD_ROWS}
            self._head[key] = monotone(fastest(runs))
        return self._head[key]


@torch.inference_mode()
def _measure_target(model) -> dict[int, float]:
    runner = Target(model)
    vocab = int(model.config.vocab_size)
    prefix = min(PREFIX, int(getattr(model.config, "max_position_embeddings", 2048)) // 2)
    runner.prefill([i % vocab for i in range(prefix)])
    sizes = [n for n in TARGET_SIZES if prefix + n < 2 * prefix]

    def forward(n: int) -> None:
        chain = tuple(range(-1, n - 2))  # a chain through the tree path: same cost as a tree
        runner.forward([7 % vocab] * n, chain if n > 1 else None)
        runner.keep(prefix, [])

    return monotone(fastest({n: (lambda n=n: forward(n)) for n in sizes}))


def fastest(
    runs: dict[int, Callable[[], None]], repeats: int = 4, clock=time.perf_counter
) -> dict[int, float]:
    """Seconds of the fastest of `repeats` runs of each of `runs`: other processes only ever
    add time (a busy shared CPU). The repeats go round all the sizes in turn, so a burst of
    load inflates one round of every size, not every run of the sizes it falls on. (Timed
    size by size, such a burst once made a benchmark run choose trees several times larger
    than the fastest size; docs/benchmarks.md.)"""
    for run in runs.values():
        run()  # warm-up
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for n, run in runs.items():
            _sync()
            start = clock()
            run()
            _sync()
            best[n] = min(best[n], clock() - start)
    return best


def monotone(costs: dict[int, float]) -> dict[int, float]:
    """Costs that never fall with size: more tokens (or rows) never cost less, so a size timed
    above a larger one was slowed by something else and takes the larger one's time."""
    out, lowest = {}, float("inf")
    for n in sorted(costs, reverse=True):
        lowest = min(lowest, costs[n])
        out[n] = lowest
    return dict(sorted(out.items()))


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _model_key(model) -> tuple:
    config = model.config
    return (
        getattr(config, "_name_or_path", ""),
        config.hidden_size,
        config.num_hidden_layers,
        config.vocab_size,
        str(model.device),
        str(model.dtype),
        id(model),
    )
