"""Under a time budget the held-out samples still validate: they are the first samples cut to
a small part of the training tokens, so when slow target forwards end training by the budget,
every epoch's record still has its teacher-forced top-1."""

from __future__ import annotations

import time

import pytest

from specdec_core.models.loading import load_model
from specdec_core.training import driver, online_features, training_set
from specdec_core.training.data_sources import Collected
from specdec_core.training.datasets import Sample
from specdec_core.training.driver import train_on_samples
from specdec_core.training.request import TrainRequest
from specdec_core.training.time_budget import held_within
from tests.tiny import VOCAB, tiny_model, tiny_tokenizer


def _samples(count: int, length: int, seed: int) -> list[Sample]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [
        Sample(torch.randint(3, VOCAB, (length,), generator=generator).tolist(), 4)
        for _ in range(count)
    ]


def test_held_out_samples_are_cut_to_a_share_of_the_training_tokens():
    held = _samples(6, 40, seed=1)
    taken = held_within(held, 1000)  # room: a tenth, 100 tokens
    assert [len(s.ids) for s in taken] == [40, 40, 20]
    assert [s.ids for s in taken] == [held[0].ids, held[1].ids, held[2].ids[:20]]
    assert all(s.start == 4 for s in taken)
    assert sum(len(s.ids) for s in held_within(held, 10)) == 64  # never under 64 tokens


def test_no_held_out_sample_without_an_answer_token():
    assert held_within([Sample(list(range(3, 80)), 70)], 100) == []  # the cut leaves none


@pytest.mark.slow
def test_a_budget_spent_on_slow_forwards_still_validates_on_held_out_samples(tmp_path, monkeypatch):
    tiny_model(1).save_pretrained(tmp_path / "target")
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    target = load_model(str(tmp_path / "target"), "cpu", "float32")
    forward = online_features.target_features

    def slow_forward(*args, **kwargs):  # the epochs asked outlast the budget
        time.sleep(0.4)
        return forward(*args, **kwargs)

    monkeypatch.setattr(online_features, "target_features", slow_forward)
    for module in (driver, training_set):
        monkeypatch.setattr(module, "log", lambda message: None)
    (tmp_path / "tiny.jsonl").write_text("")  # the request checks its source is there
    data = str(tmp_path / "tiny.jsonl")
    source = Collected(data, _samples(60, 30, seed=0), _samples(16, 30, seed=1))
    request = TrainRequest(
        "eagle", out=str(tmp_path / "head"), target=str(tmp_path / "target"), data=(data,),
        tokens=(1800,), epochs=1000, draft_vocab=16, batch_tokens=128,
        feature_dtype="float32", seconds=12.0, val_prompts=0, val_kinds=0,
    )  # fmt: skip
    began = time.monotonic()
    card = train_on_samples(request, target, [source])
    assert time.monotonic() - began < 12.0 + 0.4 + 3.0
    assert card.sequences == 60 and card.epochs < 1000  # the budget ended training
    assert card.validation is not None and card.validation.stopped == "time"
    assert card.validation.validation.teacher_forced_top1 is not None
