"""Measured target forward costs kept between runs, per machine, model and dtype.

Timing a target's forwards to size a tree takes seven sizes five times over (seconds on a
quiet CPU, tens of seconds on a busy one), and it gave the same table at every load of the same
model on the same machine. `CostStore` keeps each measured table in the user cache dir
(`forward-costs.json`), under a key of the machine (CPU model, instructions, torch threads and
version) and the model (its path, sizes, device and dtype). A later load times only the
smallest and the largest size (`CHECK_REPEATS` rounds): when both lie within `CHECK_FIT` of the
kept table it is used as it is; when both are slower (or faster) by one ratio, within
`CHECK_FIT` of each other (the machine is busier or quieter than when it was measured), the
table is used scaled by it; else the model is measured again and the new table kept. The
newest `KEEP` tables are kept.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from pathlib import Path

from specdec_core.files import write_atomic

STORE_FILE = "forward-costs.json"
CHECK_FIT = 0.25  # a kept table fits when its checked sizes are within 25 % of a new timing
CHECK_REPEATS = 3
KEEP = 64


class CostStore:
    """Tables of seconds per target forward over n tokens, by a machine-and-model key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def default(cls) -> CostStore:
        """The store in the user cache dir (`SPECDEC_CACHE_DIR` where set)."""
        from specdec_core.models.loading import cache_root

        return cls(cache_root() / STORE_FILE)

    def _read(self) -> dict:
        try:
            saved = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: measured again and rewritten
        return saved if isinstance(saved, dict) else {}

    def get(self, key: str) -> dict[int, float] | None:
        entry = self._read().get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("target"), dict):
            return None
        try:
            return {int(n): float(s) for n, s in entry["target"].items()}
        except (TypeError, ValueError):
            return None

    def put(self, key: str, table: dict[int, float]) -> None:
        saved = self._read()
        saved.pop(key, None)
        saved[key] = {"target": {str(n): s for n, s in sorted(table.items())},
                      "measured": time.time()}  # fmt: skip
        newest = dict(list(saved.items())[-KEEP:])
        with contextlib.suppress(OSError):  # a read-only cache dir: measured at every load
            write_atomic(self.path, json.dumps(newest, indent=1).encode())


def scaled(
    kept: dict[int, float], checked: dict[int, float], tolerance: float = CHECK_FIT
) -> dict[int, float] | None:
    """The kept table as it holds now, or None where its shape no longer does.

    Every checked size within `tolerance` of the kept table: the table as it is. Every checked
    size slower (or faster) by about one ratio, the ratios within `tolerance` of each other (a
    busier or quieter machine): the table times their geometric mean. Else None: the sizes
    moved apart, and the table is timed again."""
    if not checked or any(n not in kept for n in checked):
        return None
    ratios = [s / kept[n] for n, s in checked.items()]
    if all(abs(r - 1) <= tolerance for r in ratios):
        return dict(kept)
    if max(ratios) / min(ratios) > 1 + tolerance:
        return None
    factor = math.prod(ratios) ** (1 / len(ratios))
    return {n: s * factor for n, s in kept.items()}


def machine_key() -> str:
    """This machine and torch as they change forward costs."""
    import torch

    from specdec_core.environment import cpu_isa, cpu_model

    threads = torch.get_num_threads()
    return f"{cpu_model()} | {cpu_isa()} | {threads} threads | torch {torch.__version__}"


def model_key(model) -> str | None:
    """A model as it changes forward costs: where it was read from, its sizes, device, dtype;
    None for a model read from nowhere (built in memory), which is no model a later run meets."""
    config = model.config
    source = getattr(config, "_name_or_path", "")
    if not source:
        return None
    parts = (type(model).__name__, source, config.hidden_size, config.num_hidden_layers,
             config.vocab_size, model.device, model.dtype)  # fmt: skip
    return " | ".join(str(p) for p in parts)
