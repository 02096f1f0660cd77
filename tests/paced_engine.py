"""An engine for the engine process in the engine-death tests, built there by
`ProcessEngine(PacedEngine)`: the fake engine's runs, and a load, a sweep and labels of its own,
none of which imports torch (so a fresh process starts in well under a second), each paced so
that a kill at a random moment can land anywhere inside it."""

from __future__ import annotations

import time

from app.engine_api import OnPoint, Progress, StopFlag, SweepRequest, TargetInfo
from specdec_core.measurement.sweep_records import (
    Aggregate,
    MeasuredPoint,
    SweepProgress,
    SweepResult,
    apply_point,
)
from tests.gui_fake import FakeEngine

LOAD_STAGES, STAGE_SECONDS = 10, 0.02  # a load: progress at each stage
RUN_STEPS, STEP_SECONDS = 20, 0.01  # a run: steps
POINT_SECONDS = 0.03  # a sweep: each point's measurement
LABELS = 512  # token ids with a label


class PacedEngine(FakeEngine):
    def __init__(self) -> None:
        super().__init__(steps=RUN_STEPS, delay=STEP_SECONDS)

    def load_target(self, target, progress: Progress, stop=None):
        for stage in range(LOAD_STAGES):
            if stop is not None and stop.is_set():
                break
            progress(f"loading {target.spec}: stage {stage + 1}", stage / LOAD_STAGES)
            time.sleep(STAGE_SECONDS)
        info = super().load_target(target, progress, stop)
        return TargetInfo(info.spec, info.device, info.dtype, info.parameters)

    def token_texts(self) -> list[str]:
        return [self.token_text(token_id) for token_id in range(LABELS)]

    def sweep(self, request: SweepRequest, on_point: OnPoint, stop: StopFlag) -> SweepResult:
        """Every point 1.5× autoregressive, one `POINT_SECONDS` each (no measurement)."""
        self.sweeps.append(request)
        points = request.grid.points()
        records = []
        for done, point in enumerate(points, 1):
            if stop.is_set():
                break
            time.sleep(POINT_SECONDS)
            config = apply_point(request.base, point)
            record = MeasuredPoint(point, config, Aggregate(30.0, 2.0, speedup_vs_ar=1.5))
            records.append(record)
            on_point(SweepProgress(done, len(points), point, record, None))
        return SweepResult({"method": request.method, "source": "gui"}, records)
