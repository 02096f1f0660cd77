"""Under a time budget the learning rate is near 0 at the last batch even when each epoch's
save takes a quarter of the budget (a busy disk): the schedule ends where the last batch can
start and reads each batch's rate after the batch and the save that follows it, so the budget
never ends during a save with the rate still high."""

from __future__ import annotations

import time

import torch

from specdec_core.training.common_training import Checkpoint
from tests.tiny import VOCAB

SAVE_S = 0.25


def test_slow_epoch_saves_still_end_the_schedule_near_zero(tiny_target, tmp_path, monkeypatch):
    from specdec_core.eagle.data import Sample
    from specdec_core.training.features import extract_features
    from specdec_core.training.loop import train
    from specdec_core.training.objective import Objective
    from specdec_core.training.starting_model import build_model
    from specdec_core.training.train_config import TrainConfig

    model = tiny_target.model
    generator = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(3, VOCAB, (20,), generator=generator).tolist(), 0)] * 8
    data = extract_features(model, samples, None)
    head = build_model("eagle", model, torch.arange(VOCAB))
    objective = Objective("eagle", head, model.lm_head, torch.arange(VOCAB), 0.2, 2)
    config = TrainConfig(epochs=10**6, batch_tokens=40, warmup=1, seconds=1.0, save_every=10**9)
    save = Checkpoint.save

    def slow_save(self, *args):
        time.sleep(SAVE_S)
        save(self, *args)

    monkeypatch.setattr(Checkpoint, "save", slow_save)
    rates = []
    step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    *epochs, last = train(objective, data, config, tmp_path)
    assert len(epochs) >= 2 and last.stopped == "time"  # an epoch's end timed before the last
    assert rates[-1] < 0.05 * config.lr  # with the saves' time left out of it, the decay ends
    assert rates[0] > 0.99 * config.lr  # the first batch at the peak
