"""`specdec train --progress-file`: progress written atomically as training goes, read back as a
typed record; the end of the run marks it finished."""

from __future__ import annotations

from specdec_core.training.card import EpochRecord, Validation
from specdec_core.training.progress_file import ProgressFile, read_progress


def test_progress_file_reports_steps_rate_eta_and_validation_per_epoch(tmp_path):
    path = tmp_path / "head" / "progress.json"
    assert read_progress(path) is None  # nothing written yet
    progress = ProgressFile(path, tokens=1000)
    progress.update(1, 20, 10, [])
    progress.update(5, 20, 10, [])  # within the write interval: skipped
    history = [EpochRecord(1, 10, 1796000000.0, Validation(0.4, 1.5))]
    progress.update(10, 20, 10, history)  # an epoch ended: always written
    read = read_progress(path)
    assert read is not None and (read.step, read.steps, read.epoch) == (10, 20, 1.0)
    assert read.tokens_per_s and read.tokens_per_s > 0 and read.eta_s is not None
    assert [(v.epoch, v.teacher_forced_top1, v.tau) for v in read.validation] == [(1, 0.4, 1.5)]
    assert not read.finished and not list(path.parent.glob("*.part"))
    progress.finish(history)
    done = read_progress(path)
    assert done is not None and done.finished and done.eta_s == 0.0 and done.step == 10
