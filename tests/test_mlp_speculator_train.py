"""`specdec train mlp-speculator` on a tiny random target: the loss falls, the saved speculator
loads, drafts losslessly and has a card; bad settings are refused before a model loads; a
speculator as wide as the target starts from its tables, which stay frozen unless asked."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest
import torch

from specdec_core.cli.train_mlp_speculator import add_parser, request_from_args
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.mlp_speculator import MLPSpeculatorDrafter
from specdec_core.errors import SpecdecError
from specdec_core.heads.mlp_speculator.formats import load_speculator
from specdec_core.loop.decode import generate
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training.card import read_card
from specdec_core.training.data_sources import Collected
from specdec_core.training.datasets import Sample
from specdec_core.training.mlp_speculator import (
    SpeculatorRequest,
    stage_inputs,
    stage_losses,
    starting_speculator,
    tables_are_targets,
    train_on_sources,
)
from specdec_core.training.online_features import target_features
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


def featured_batch(target, samples):
    """The target's features of `samples`, one padded batch."""
    return target_features(target, [(s.ids, s.start) for s in samples])


def mean_loss(speculator, featured) -> float:
    with torch.no_grad():
        ids, hidden, mask = featured.ids, featured.hidden, featured.loss_mask
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
    featured = featured_batch(tiny_target, samples)
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


@pytest.mark.parametrize("inner_dim", [16, None])  # random; from the target, tables frozen
def test_a_time_budget_ends_training_and_the_card_says_so(tiny_target, tmp_path, inner_dim):
    samples = answers(tiny_target, 8)
    request = SpeculatorRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), epochs=100_000, n_predict=2,
        inner_dim=inner_dim, batch_tokens=128, val_prompts=0, val_kinds=0, save_dtype="float32",
        feature_dtype="float32", seconds=6.0,
    )  # fmt: skip
    source = Collected("memory", samples, samples[:1], [])
    card = train_on_sources(request, tiny_target, [source])
    assert card.history[-1].stopped == "time"
    assert 0 < card.epochs < 100_000
    assert card.train_config.seconds <= 6.0


def fresh(tiny_target, **fields) -> SpeculatorRequest:
    return SpeculatorRequest(
        out="unused", data=("sharegpt",), n_predict=3, val_kinds=0, feature_dtype="float32",
        **fields,
    )  # fmt: skip


def test_a_speculator_as_wide_as_the_target_starts_from_its_embedding_head_and_final_norm(
    tiny_target,
):
    model = tiny_target.model
    speculator = starting_speculator(fresh(tiny_target), tiny_target)
    for stage in range(3):
        assert torch.equal(speculator.emb[stage].weight, model.get_input_embeddings().weight)
        assert torch.equal(speculator.head[stage].weight, model.get_output_embeddings().weight)
        assert torch.equal(speculator.ln[stage].weight, model.model.norm.weight * 0.25)
        assert not speculator.ln[stage].bias.any()
    # stage 0 passes the target's state through: its state is the target's final-norm state
    # (a quarter of it) up to the token's term, which is removed here
    samples = answers(tiny_target, 2)
    (row,) = samples[:1]
    hidden = featured_batch(tiny_target, [row]).hidden.float().clone()
    with torch.no_grad():
        speculator.emb[0].weight.zero_()
        tokens = torch.zeros(hidden.shape[:2], dtype=torch.long)
        state = speculator.advance(0, speculator.first_state(hidden), tokens)
    # (the target's norm has an epsilon of its own: equal within 1%)
    assert torch.allclose(state, torch.nn.functional.gelu(hidden * 0.25), atol=1e-2)


def test_a_narrower_speculator_starts_random(tiny_target):
    speculator = starting_speculator(fresh(tiny_target, inner_dim=24), tiny_target)
    assert speculator.config.width == 24  # cannot hold the target's 32-wide tables
    assert not tables_are_targets(speculator, tiny_target)


@pytest.mark.parametrize("train_tables", [False, True])
def test_the_targets_tables_stay_frozen_unless_asked_to_train_while_projections_and_norms_learn(
    tiny_target, tmp_path, train_tables
):
    samples = answers(tiny_target, 8)
    request = SpeculatorRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), epochs=2, n_predict=2, batch_tokens=128,
        lr=1e-2, warmup=1, val_prompts=0, val_kinds=0, save_dtype="float32",
        feature_dtype="float32", train_vocab_tables=train_tables,
    )  # fmt: skip
    before = starting_speculator(request, tiny_target)
    card = train_on_sources(request, tiny_target, [Collected("memory", samples, samples[:1], [])])
    after = load_speculator(str(tmp_path / "out"), tiny_target, dtype=torch.float32)
    model = tiny_target.model
    for stage in range(2):
        assert not torch.equal(after.proj[stage].weight, before.proj[stage].weight)
        assert not torch.equal(after.ln[stage].weight, before.ln[stage].weight)
        embedding_kept = torch.equal(after.emb[stage].weight, model.get_input_embeddings().weight)
        head_kept = torch.equal(after.head[stage].weight, model.get_output_embeddings().weight)
        assert embedding_kept is head_kept is (not train_tables)
    assert card.extra["start"] == "from the target's embedding and head"
    assert card.extra["vocab_tables"] == ("trained" if train_tables else "frozen (the target's)")
    checkpoint = torch.load(tmp_path / "out" / "checkpoint.pt", weights_only=True)["model"]
    assert any(key.startswith("emb.") for key in checkpoint) is train_tables
    again = train_on_sources(request, tiny_target, [Collected("memory", samples, samples[:1], [])])
    assert again.epochs == card.epochs  # a rerun resumes from the finished checkpoint
    again_loaded = load_speculator(str(tmp_path / "out"), tiny_target, dtype=torch.float32)
    assert torch.equal(again_loaded.proj[0].weight, after.proj[0].weight)
    other = replace(request, train_vocab_tables=not train_tables)
    with pytest.raises(SpecdecError, match="cannot resume this one"):
        train_on_sources(other, tiny_target, [Collected("memory", samples, samples[:1], [])])


def test_from_the_target_a_speculator_starts_nearer_the_targets_text_than_from_random(
    tiny_target,
):
    featured = featured_batch(tiny_target, answers(tiny_target, 16))
    from_target = starting_speculator(fresh(tiny_target), tiny_target)
    from_random = starting_speculator(fresh(tiny_target), tiny_target)
    from_random.reset_parameters(torch.Generator().manual_seed(0))  # fms-extras' init
    assert mean_loss(from_target, featured) < mean_loss(from_random, featured)


def test_a_stage_from_the_target_passes_its_state_through_with_the_token_at_vllms_share():
    from specdec_core.heads.mlp_speculator.head import MLPSpeculator, SpeculatorConfig

    generator = torch.Generator().manual_seed(0)
    width, vocab = 16, 40
    table = torch.randn(vocab, width, generator=generator) * 0.1
    w = torch.rand(width, generator=generator) + 0.5  # a final norm that is not the identity
    speculator = MLPSpeculator(SpeculatorConfig(width, vocab, n_predict=3))
    speculator.start_from_target(table, table * 2, w)
    u = torch.randn(64, width, generator=generator)
    u = u / u.pow(2).mean(-1, keepdim=True).sqrt()  # rms 1: a target's normalised state
    with torch.no_grad():
        state = speculator.proj[0](u * w)  # the target's final-norm state h = u * w
        token = speculator.emb[0].weight * speculator.config.emb_weight
        token = token / speculator.config.state_weight
    rms = lambda x: float(x.pow(2).mean().sqrt())  # noqa: E731
    assert torch.allclose(state / rms(state), u, atol=1e-5)  # the norm's weight undone
    share = speculator.config.state_weight**2  # the state's share of the sum's variance
    assert rms(token) ** 2 / (rms(state) ** 2 + rms(token) ** 2) == pytest.approx(1 - share)
    assert torch.equal(speculator.head[2].weight, table * 2)
