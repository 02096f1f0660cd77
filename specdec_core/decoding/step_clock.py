"""The engine's clock: time after the device's queued work, and laps between reads.

`now(device)` synchronises CUDA before reading `time.perf_counter` (on the CPU it only reads
it), so a reading means "the work issued so far is done". `Laps` reads it at each phase
boundary and adds the time since the previous read to the phase just ended: consecutive
reads, so the laps of a stretch add up to its wall time. The decode loop (decode.py) times a
step's phases with it; EAGLE drafters split their draft phase (head forwards, tree building)
with one of their own.
"""

from __future__ import annotations

import time

import torch


def now(device: torch.device) -> float:
    """`time.perf_counter()` after the work queued on `device` (CUDA: synchronised)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class Laps:
    """Seconds by name between consecutive clock reads on `device`, from its creation on."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}
        self.mark = now(device)

    def lap(self, name: str) -> float:
        """Add the time since the previous read to `name`; return this read."""
        read = now(self.device)
        self.seconds[name] = self.seconds.get(name, 0.0) + read - self.mark
        self.mark = read
        return read

    def take(self) -> dict[str, float]:
        """The seconds so far, by name; counting starts again from zero (the mark stays)."""
        seconds, self.seconds = self.seconds, {}
        return seconds
