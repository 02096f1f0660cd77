"""How a sweep or Tune measures, without Qt: the backends that `app/sweep_worker.py` runs.

`MeasureBackend` runs `specdec_core.sweep.run_sweep` and `specdec_core.autotune.autotune_k` on
any `Measure` (tests inject a fake one, so no model loads); `EngineBackend` builds the real
`BenchMeasure` on the engine's loaded target and holds the engine's lock while it measures, so
a sweep and a Generate never share the models. Qt-free, so the engine process
(app/process_engine.py) measures with the same code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from app.engine import Engine, StopFlag
from specdec_core.config import DecodeConfig

if TYPE_CHECKING:  # the engine modules import torch: only where the measuring runs
    from specdec_core.methods import Extra
    from specdec_core.models import LoadedModel
    from specdec_core.sweep import Grid, Measure, SweepProgress, SweepResult
    from specdec_core.sweep_records import TuneResult

OnPoint = Callable[["SweepProgress"], None]


class SweepBackend(Protocol):
    def sweep(
        self,
        method: str,
        grid: Grid,
        base: DecodeConfig,
        prompts: Sequence[str],
        specs: dict[str, str],
        on_point: OnPoint,
        stop: StopFlag,
    ) -> SweepResult: ...

    def tune(
        self,
        method: str,
        config: DecodeConfig,
        specs: dict[str, str],
        on_point: OnPoint,
        stop: StopFlag,
    ) -> TuneResult:
        """Tune k; `stop` ends it after the point being measured (`TuneResult.stopped`)."""
        ...


class MeasureBackend:
    """Sweeps and tunes with a given measure factory: (method, prompts, specs) -> Measure."""

    def __init__(self, make_measure: Callable[[str, Sequence[str], dict[str, str]], Measure]):
        self.make_measure = make_measure

    @contextlib.contextmanager
    def _session(self) -> Iterator[None]:
        yield

    def sweep(self, method, grid, base, prompts, specs, on_point, stop) -> SweepResult:
        from specdec_core.sweep import run_sweep

        with self._session():
            measure = self.make_measure(method, prompts, specs)
            header = {"prompts": len(prompts), "source": "gui"}
            return run_sweep(
                method, grid, base, measure, header=header, progress=on_point, stop=stop
            )

    def tune(self, method, config, specs, on_point, stop) -> TuneResult:
        with self._session():
            return self._tune(method, config, specs, on_point, stop)

    def _tune(self, method, config, specs, on_point, stop) -> TuneResult:
        from specdec_core.autotune import TUNING_PROMPTS, autotune_k

        measure = self.make_measure(method, TUNING_PROMPTS, specs)
        return autotune_k(method, config, measure, None, on_point, stop)


class EngineBackend(MeasureBackend):
    """The real measurement on the engine's loaded target (and its cached extras), inside
    `Engine.exclusive()`, so a sweep and a Generate never share the models."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(self._bench_measure)
        self.engine = engine
        self._target: LoadedModel | None = None  # while a session holds it

    @contextlib.contextmanager
    def _session(self) -> Iterator[None]:
        with self.engine.exclusive() as target:
            self._target = target
            try:
                yield
            finally:
                self._target = None

    def _held(self) -> LoadedModel:
        if self._target is None:
            raise RuntimeError("EngineBackend measures only inside its session")
        return self._target

    def _extra(self, method: str, specs: dict[str, str]) -> Extra:
        return self.engine.extra(method, specs, lambda *_: None)

    def _bench_measure(self, method: str, prompts: Sequence[str], specs: dict[str, str]):
        from specdec_core.baselines import HF_METHODS
        from specdec_core.sweep import BenchMeasure

        # the HF baselines are not engine methods: the benchmark loads what they need
        extras = None if method in HF_METHODS else {method: self._extra(method, specs)}
        return BenchMeasure(self._held(), prompts, specs, raw=False, extras=extras)

    def _tune(self, method, config, specs, on_point, stop) -> TuneResult:
        from specdec_core.autotune import tune_on_device

        extra = self._extra(method, specs)
        target = self._held()
        return tune_on_device(
            target, method, config, specs, progress=on_point, extra=extra, stop=stop, trees=True
        )
