"""Method parameters chosen in the window, per method (Tune's pick of an exit layer, a skip
ratio, a lookahead window): what a run's `DecodeConfig.method_params` is given.

Qt-free. The Sweep tab's controller holds one (`SweepController.method_params`): Tune of a
method parameter stores its choice here, and the sweeps and tunings that follow measure with
it; `applied(method, config)` is the config a run of `method` is to use.
"""

from __future__ import annotations

from dataclasses import replace

from specdec_core.decoding.config import DecodeConfig


class MethodParams:
    def __init__(self) -> None:
        self.chosen: dict[str, dict[str, float]] = {}  # method -> parameter -> value

    def set(self, method: str, name: str, value: float) -> None:
        self.chosen.setdefault(method, {})[name] = value

    def of(self, method: str) -> dict[str, float]:
        """The parameters chosen for `method` (a copy; empty where none was)."""
        return dict(self.chosen.get(method, {}))

    def applied(self, method: str, config: DecodeConfig) -> DecodeConfig:
        """`config` with the parameters chosen for `method` over its own `method_params`."""
        chosen = self.chosen.get(method)
        if not chosen:
            return config
        return replace(config, method_params={**config.method_params, **chosen})
