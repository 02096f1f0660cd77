"""`specdec train mlp-speculator` on a tiny random target: the loss falls, the saved speculator
loads, drafts losslessly and has a card; bad settings are refused before a model loads."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from specdec_core.cli.train_mlp_speculator import add_parser, request_from_args
from specdec_core.config import DecodeConfig
from specdec_core.decode import generate
from specdec_core.drafters.mlp_speculator import MLPSpeculatorDrafter
from specdec_core.eagle.data import Sample
from specdec_core.errors import SpecdecError
from specdec_core.mlp_speculator.formats import load_speculator
from specdec_core.models import load_model
from specdec_core.runner import run
from specdec_core.training.card import read_card
from specdec_core.training.data_sources import Collected
from specdec_core.training.features import extract_features
from specdec_core.training.mlp_speculator import (
    SpeculatorRequest,
    stage_inputs,
    stage_losses,
    starting_speculator,
    train_on_sources,
)
from tests.tiny import prompt, training_dir


def parse(argv: list[str]) -> argparse.Namespace:
    """`specdec train mlp-speculator ARGV` as the train command's subparsers parse it."""
    parser = argparse.ArgumentParser(prog="specdec train")
    add_parser(parser.add_subparsers(dest="kind", required=True))
    return parser.parse_args(["mlp-speculator", *argv])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    prompts = (json.dumps({"prompt": "w1 w2 w3"}), json.dumps({"turns": ["w4 w5", "w6"]}))
    return training_dir(tmp_path_factory.mktemp("tiny"), prompts=prompts)


def answers(target, count: int) -> list[Sample]:
    """The target's greedy continuations of `count` prompts (the loss on the continuation)."""
    samples = []
    for i in range(count):
        ids = prompt(4 + i % 3, offset=i)
        out = target.model.generate(
            torch.tensor([ids]), max_new_tokens=40, do_sample=False, pad_token_id=0
        )
        samples.append(Sample(out[0].tolist(), len(ids)))
    return samples


def mean_loss(speculator, featured) -> float:
    from specdec_core.training.objective import collate

    with torch.no_grad():
        ids, hidden, mask, _ = collate(featured)
        return float(sum(stage_losses(speculator, ids, hidden, mask)) / speculator.n_predict)


def test_stage_i_stands_on_the_token_after_its_position_and_predicts_the_one_after_that():
    ids = torch.tensor([[10, 11, 12, 13, 14, 15]])
    mask = torch.tensor([[False, False, False, True, True, True]])  # answer from position 3
    width, tokens, targets, counted = stage_inputs(ids, mask, 3)
    assert width == 4  # positions 0..3 have a token two ahead
    assert tokens.tolist() == [[11, 12, 13, 14, 15, 0]]  # stage i at t reads tokens[t + i]
    assert targets[0].tolist() == [[12, 13, 14, 15]]  # x_{t+2}
    assert targets[2].tolist() == [[14, 15, 0, 0]]  # x_{t+4}, padded past the end
    assert counted[0].tolist() == [[False, True, True, True]]  # x_{t+2} is an answer token
    assert counted[2].tolist() == [[True, True, False, False]]


def test_a_short_run_lowers_the_loss_and_saves_a_speculator_that_drafts(tiny_target, tmp_path):
    samples = answers(tiny_target, 16)
    featured = extract_features(tiny_target.model, samples, None)
    request = SpeculatorRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), epochs=10,
        n_predict=3, inner_dim=24, batch_tokens=128, lr=1e-2, warmup=5, val_prompts=2,
        val_kinds=0, save_dtype="float32", feature_dtype="float32",
    )  # fmt: skip
    before = mean_loss(starting_speculator(request, tiny_target), featured)
    held_prompts = [s.ids[: s.start] for s in samples[:2]]
    source = Collected("memory", samples, samples[:3], held_prompts)
    card = train_on_sources(request, tiny_target, [source])
    speculator = load_speculator(str(tmp_path / "out"), tiny_target)
    after = mean_loss(speculator, featured)
    assert after < 0.7 * before
    assert card.epochs == 10 and len(card.history) == 10
    assert card.validation.validation.teacher_forced_top1 > 0.3
    assert card.validation.validation.tau > 1.0
    record = json.loads((tmp_path / "out" / "specdec_card.json").read_text())
    assert record["kind"] == "mlp-speculator" and record["speculator"]["n_predict"] == 3
    assert len(record["teacher_forced_top1_by_stage"]) == 3
    assert read_card(tmp_path / "out").to_record() == record  # the card reads back
    ids = prompt(6, offset=2)
    config = DecodeConfig(max_new_tokens=30, k=3)
    reference = run(tiny_target, "ar", ids, config)
    summary = list(generate(tiny_target, MLPSpeculatorDrafter(speculator), ids, config))[-1]
    assert summary.summary.token_ids == reference.token_ids
    assert summary.summary.steps < reference.steps


@pytest.mark.slow
def test_the_command_trains_resumes_and_continues_a_speculator(tiny_dir, tmp_path):
    out = tmp_path / "out"
    common = [
        *("--target", str(tiny_dir / "target"), "--data", str(tiny_dir / "data.jsonl")),
        *("--tokens", "800", "--epochs", "2", "--batch-tokens", "256"),
        *("--feature-dtype", "float32", "--val-kinds", "0"),
    ]
    shape = ["--n-predict", "2", "--inner-dim", "16", "--tie-weights"]
    args = parse([*common, *shape, "--out", str(out)])
    assert args.handler(args) == 0
    card = read_card(out)
    assert card.kind == "mlp-speculator" and card.epochs == 2 and card.tokens >= 800
    assert card.extra["speculator"]["tie_weights"] is True
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    speculator = load_speculator(str(out), target)
    assert speculator.config.n_predict == 2 and speculator.config.tie_weights
    ids = [1, 5, 9, 4]
    config = DecodeConfig(max_new_tokens=20, k=3)
    drafted = list(generate(target, MLPSpeculatorDrafter(speculator), ids, config))[-1]
    assert drafted.summary.token_ids == run(target, "ar", ids, config).token_ids
    assert args.handler(args) == 0  # a rerun resumes from the finished checkpoint
    more = parse([*common, "--init", str(out), "--out", str(tmp_path / "continued")])
    assert more.handler(more) == 0
    assert load_speculator(str(tmp_path / "continued"), target).config == speculator.config


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--init", "x", "--n-predict", "4"], "--n-predict shape a fresh speculator"),
        (["--tie-weights", "--n-predict", "1"], "--tie-weights needs two or more stages"),
        (["--n-predict", "0"], "--n-predict 0: give 1 to 16"),
        (["--data", "nowhere.jsonl"], "no such file"),
        (["--inner-dim", "-1"], "--inner-dim -1"),
        (["--epochs", "0"], "--epochs 0"),
        (["--data", "self,sharegpt", "--tokens", "1k,2k,3k"], "one per --data source"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_a_model_loads(argv, message):
    with pytest.raises(SpecdecError, match=message):
        request_from_args(parse([*argv, "--out", "unused"]))


def test_a_time_budget_too_short_for_one_batch_is_refused_with_the_budget_that_would_do(
    tiny_target, tmp_path
):
    samples = answers(tiny_target, 4)
    request = SpeculatorRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), n_predict=2, inner_dim=16,
        batch_tokens=128, val_kinds=0, feature_dtype="float32", seconds=0.5,
    )  # fmt: skip
    source = Collected("memory", samples, samples[:1], [])
    with pytest.raises(SpecdecError, match=r"cannot cover one training batch.*--seconds \d+"):
        train_on_sources(request, tiny_target, [source])
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


def test_a_time_budget_ends_training_and_the_card_says_so(tiny_target, tmp_path):
    samples = answers(tiny_target, 8)
    request = SpeculatorRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), epochs=100_000, n_predict=2,
        inner_dim=16, batch_tokens=128, val_prompts=0, val_kinds=0, save_dtype="float32",
        feature_dtype="float32", seconds=6.0,
    )  # fmt: skip
    source = Collected("memory", samples, samples[:1], [])
    card = train_on_sources(request, tiny_target, [source])
    assert card.history[-1].stopped == "time"
    assert 0 < card.epochs < 100_000
    assert card.train_config.seconds <= 6.0
