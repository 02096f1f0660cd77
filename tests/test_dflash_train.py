"""`specdec train dflash` on a tiny random target: the blocks it trains on are what drafting
sees, the loss falls, the saved drafter loads in z-lab's layout, drafts losslessly and has a
card; bad settings are refused before a model loads."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from specdec_core.cli.train_dflash import add_parser, request_from_args
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.dflash import DFlashDrafter
from specdec_core.errors import SpecdecError
from specdec_core.heads.dflash.formats import load_dflash
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from specdec_core.training.card import read_card
from specdec_core.training.data_sources import Collected
from specdec_core.training.datasets import Sample
from specdec_core.training.dflash import (
    DFlashRequest,
    block_losses,
    draw_blocks,
    slot_weights,
    starting_draft,
    train_on_sources,
)
from specdec_core.training.online_features import Sequences, target_features
from tests.tiny import prompt


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specdec train")
    add_parser(parser.add_subparsers(dest="kind", required=True))
    return parser.parse_args(["dflash", *argv])


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


def test_a_block_sees_the_context_before_its_anchor_and_its_own_rows():
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    answer = torch.tensor([[False, False, True, True, True, True]])
    attention = torch.ones_like(ids)
    blocks = draw_blocks(ids, answer, attention, 3, 2, 0, torch.Generator().manual_seed(0))
    anchors = blocks.positions[0, ::3].tolist()
    assert all(1 <= a <= 4 for a in anchors)  # the next token is an answer token
    for number, anchor in enumerate(anchors):
        rows = slice(3 * number, 3 * number + 3)
        assert blocks.ids[0, rows].tolist() == [int(ids[0, anchor]), 0, 0]
        seen = blocks.mask[0, 0, rows]  # [3, 6 + 6]
        assert seen[:, :6].tolist() == [[k < anchor for k in range(6)]] * 3
        own = [False] * 6
        own[3 * number : 3 * number + 3] = [True] * 3
        assert seen[:, 6:].tolist() == [own] * 3
        # slot 0 (the anchor) is never counted; slot j predicts the token j after the anchor
        expected = [-1] + [anchor + j if anchor + j < 6 else -1 for j in (1, 2)]
        assert blocks.predicts[0, rows].tolist() == expected


def test_the_loss_weight_decays_with_the_block_position():
    weights = slot_weights(4, 2.0, "cpu")
    assert weights[0] == 0 and weights[1] == 1
    assert torch.allclose(weights[2:], torch.exp(torch.tensor([-0.5, -1.0])))


def test_a_short_run_lowers_the_loss_and_saves_a_drafter_that_drafts(tiny_target, tmp_path):
    samples = answers(tiny_target, 16)
    request = DFlashRequest(
        out=str(tmp_path / "out"), data=("sharegpt",), epochs=8, layers=1, block_size=4,
        draft_vocab=0, anchors=8, batch_tokens=256, lr=3e-3, warmup=5, val_prompts=2,
        val_kinds=0, feature_dtype="float32",
    )  # fmt: skip
    featured = target_features(
        tiny_target, [(s.ids, s.start) for s in samples], (1, 2)
    )  # the tiny target has 2 layers: z-lab's default for 1 draft layer reads layer 1
    lm_head = tiny_target.model.get_output_embeddings()

    def loss_of(draft) -> float:
        draft = draft.float()
        with torch.no_grad():
            generator = torch.Generator().manual_seed(3)
            return float(block_losses(draft, layered(draft), 8, 4.0, generator, lm_head)[0])

    def layered(draft):
        return target_features(
            tiny_target, [(s.ids, s.start) for s in samples], draft.spec.feature_layers
        )

    assert featured.ids.shape[0] == 16
    before = loss_of(starting_draft(request, tiny_target, Sequences.of(samples)))
    held_prompts = [s.ids[: s.start] for s in samples[:2]]
    card = train_on_sources(
        request, tiny_target, [Collected("memory", samples, samples[:3], held_prompts)]
    )
    draft = load_dflash(str(tmp_path / "out"), tiny_target, dtype=torch.float32)
    assert loss_of(draft) < 0.8 * before
    assert card.epochs == 8
    record = json.loads((tmp_path / "out" / "specdec_card.json").read_text())
    assert record["kind"] == "dflash" and record["block_size"] == 4
    assert len(record["teacher_forced_top1_by_position"]) == 3
    assert read_card(tmp_path / "out").to_record() == record
    config = DecodeConfig(max_new_tokens=30)
    ids = prompt(6, offset=2)
    reference = run(tiny_target, "ar", ids, config)
    summary = list(generate(tiny_target, DFlashDrafter(draft), ids, config))[-1].summary
    assert summary.token_ids == reference.token_ids
    assert summary.steps < reference.steps


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--block-size", "1"], "--block-size"),
        (["--layers", "0"], "--layers"),
        (["--anchors", "0"], "--anchors"),
        (["--gamma", "0"], "--gamma"),
        (["--draft-vocab", "-1"], "--draft-vocab"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_a_model_loads(tmp_path, argv, message):
    with pytest.raises(SpecdecError, match=message):
        request_from_args(parse(["--out", str(tmp_path / "o"), *argv]))
