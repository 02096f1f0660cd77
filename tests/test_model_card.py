"""The model card of a trained head or draft: read as a `ModelCard` and written back as the JSON
earlier versions wrote, the bundled head's and draft's cards included."""

from __future__ import annotations

import json

import pytest

from specdec_core.errors import SpecdecError
from specdec_core.resources import resource_path
from specdec_core.training.card import (
    CARD,
    EpochRecord,
    ModelCard,
    Validation,
    read_card,
)
from specdec_core.training.train_config import TrainConfig


def test_the_bundled_heads_card_reads_and_writes_back_what_it_holds():
    written = json.loads((resource_path("head") / CARD).read_text())
    card = read_card(resource_path("head"))
    assert (card.kind, card.arch, card.layers, card.draft_vocab) == ("eagle", "eagle1", 1, 8192)
    assert card.epochs == 13.75 and card.device == "NVIDIA H200" and card.init == "resources/head"
    assert card.validation == card.history[-1] and card.validation.stopped == "time"
    assert card.validation.validation.teacher_forced_top1 == pytest.approx(0.7668, abs=1e-4)
    assert card.train_config.trains == "eagle" and card.train_config.lr == 0.0005
    assert card.stages["train"]["epochs"] == 13.75
    assert {"lineage", "data_notes", "model_notes", "validation_notes"} <= set(card.extra)
    again = card.to_record()
    assert {key: again[key] for key in written} == written  # every field as it was
    assert set(again) - set(written) == {"train_seconds"}  # what this card did not record


def test_the_bundled_drafts_card_reads_with_defaults_for_what_it_lacks():
    written = json.loads((resource_path("draft") / CARD).read_text())
    card = read_card(resource_path("draft"))
    assert (card.kind, card.arch, card.init, card.layers) == ("draft", None, None, None)
    assert card.data == ("self", "sharegpt") and card.train_seconds == 1109
    assert card.validation.validation.tau == pytest.approx(1.2925, abs=1e-4)
    assert card.train_config.trains == "draft" and card.train_config.arch == "eagle1"
    assert card.extra["embedding_from_target"] is True
    assert card.to_record()["history"] == written["history"]


def test_a_card_written_now_reads_back_the_same_in_the_same_order():
    history = (
        EpochRecord(1, 10, 1796000000.0, Validation(0.41, 1.6)),
        EpochRecord(1.5, 15, 1796000100.0, Validation(0.45), stopped="time"),
    )
    card = ModelCard(
        kind="eagle", arch="eagle3", target="embedded", command="specdec train eagle",
        data=("self",), tokens=800, sequences=12, epochs=1.5, seed=0, draft_vocab=16, init=None,
        layers=1, history=history, validation=history[-1], train_seconds=3,
        train_config=TrainConfig(arch="eagle3", ce_weight=1.0, noise=0.0),
        data_mix={"by_source": {"self": {"sequences": 12, "tokens": 800}}, "by_kind": {}},
        validation_by_kind={"chat": Validation(0.5, 1.8)},
    )  # fmt: skip
    record = json.loads(json.dumps(card.to_record()))
    assert list(record) == [
        "kind", "arch", "target", "command", "data", "tokens", "sequences", "epochs", "seed",
        "draft_vocab", "init", "layers", "history", "validation", "train_seconds",
        "train_config", "data_mix", "validation_by_kind",
    ]  # fmt: skip
    assert record["history"][1] == {
        "epoch": 1.5, "stopped": "time", "step": 15, "time": 1796000100.0,
        "teacher_forced_top1": 0.45,
    }  # fmt: skip
    assert record["train_config"]["kind"] == "eagle" and "trains" not in record["train_config"]
    assert ModelCard.from_record(record) == card


def test_a_partial_card_says_only_what_a_run_still_training_has():
    card = ModelCard(kind="eagle", arch="eagle1", partial=Validation(0.5))
    record = card.to_record()
    assert record == {"kind": "eagle", "arch": "eagle1", "partial": {"teacher_forced_top1": 0.5}}
    assert ModelCard.from_record(record) == card
    draft = ModelCard(kind="draft", partial=Validation(0.2, 1.1)).to_record()
    assert draft == {"kind": "draft", "partial": {"teacher_forced_top1": 0.2, "tau": 1.1}}


def test_a_directory_without_a_card_is_refused_in_one_line(tmp_path):
    with pytest.raises(SpecdecError, match="no readable model card") as refused:
        read_card(tmp_path)
    assert "\n" not in str(refused.value)
