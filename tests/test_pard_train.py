"""`specdec train pard`: PARD's training layout gives every row what the drafter feeds at
inference (the same logits), conditional drop-token keeps each row's chain, and a short run
on a tiny target's own answers saves a draft the playground drafts with, losslessly, better
at the masked positions than it started."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training.job_plan import JobPlan, prepare
from specdec_core.training.job_shards import Answered, Shard
from specdec_core.training.pard import (
    PardTrainRequest,
    kept_positions,
    layout,
    mask_token_for,
    plain_copy,
    train_pard,
)
from tests.tiny import VOCAB, chat_target, prompt, tiny_model, tiny_tokenizer

MASK = 0


def test_each_training_row_sees_exactly_what_the_drafter_feeds():
    model = tiny_model(3, layers=2).float()
    ids = [1, 7, 12, 5, 9, 22, 4, 17, 8, 30]
    rows = layout(ids, MASK, kept_positions(len(ids), 4, 1.0, 1.0, random.Random(0)))
    with torch.no_grad():
        together = model(
            input_ids=rows.input_ids[None],
            position_ids=rows.position_ids[None],
            attention_mask=rows.mask[None, None],
        ).logits[0]
        for row in range(len(rows.input_ids)):
            i, p = int(rows.copy[row]), int(rows.position_ids[row])
            fed = ids[: p - i + 1] + [MASK] * i  # the committed tokens, then i masks
            alone = model(torch.tensor([fed])).logits[0, -1]
            torch.testing.assert_close(together[row], alone, atol=1e-5, rtol=1e-4)
            label = int(rows.labels[row])
            assert label == (ids[p + 1] if p + 1 < len(ids) else -100)


def test_conditional_drop_token_keeps_each_rows_chain_and_its_share():
    length = 200
    kept = kept_positions(length, 8, 0.7, 0.2, random.Random(1))
    assert kept[0] == list(range(length))
    for i in range(1, len(kept)):
        candidates = [p + 1 for p in kept[i - 1] if p + 1 <= length - 2]  # chain whole
        assert len(kept[i]) == min(int(length * max(0.7**i, 0.2)), len(candidates))
        assert all(p - 1 in kept[i - 1] and i <= p <= length - 2 for p in kept[i])


def test_a_truncated_copy_keeps_the_first_layers_weights_and_ties_its_head():
    target = tiny_model(1, layers=3)
    target.config.tie_word_embeddings = True
    target.tie_weights()
    draft = plain_copy(target, layers=1)
    assert draft.config.num_hidden_layers == 1
    torch.testing.assert_close(
        draft.model.layers[0].mlp.up_proj.weight, target.model.layers[0].mlp.up_proj.weight
    )
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    with pytest.raises(SpecdecError, match="a draft keeps fewer"):
        plain_copy(target, layers=3)


# --- a short run on a tiny target's own answers --------------------------------------------------


def tiny_job(root: Path, target: Path, texts: int = 48) -> Path:
    """A `specdec data` job folder of the tiny target's greedy answers to random prompts."""
    work = root / "job"
    prepare(work, JobPlan(target=str(target), tokens=10_000, mix={"magpie": 1.0}))
    model = load_model(str(target), device="cpu", dtype="float32")
    rng = random.Random(0)
    samples = []
    for _ in range(texts):
        ids = [1] + [rng.randrange(3, 32) for _ in range(4)]
        answer = run(model, "ar", ids, DecodeConfig(max_new_tokens=24)).token_ids
        samples.append(Answered([*ids, *answer], len(ids), "writing"))
    Shard("magpie", 0, texts, True, [], {}, 1.0, samples).write(work)
    return work


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("pard")
    target = chat_target(root)
    request = PardTrainRequest(
        out=str(root / "draft"),
        data=str(tiny_job(root, target)),
        target=str(target),
        layers=1,
        block=4,
        mask_token=MASK,  # the tiny target writes every id, <unk> too (see the test below)
        epochs=30,
        lr=3e-3,
        batch_tokens=256,
        held_out=8,
    )
    card = train_pard(request, log=lambda message: None)
    return root, target, card


@pytest.mark.slow
def test_a_short_run_learns_the_masked_positions_and_drafts_losslessly(trained):
    root, target_dir, card = trained
    assert card.mask_token == MASK
    assert card.losses[-1] < card.losses[0]
    assert all(a > b for a, b in zip(card.top1_by_position[1:], card.top1_before[1:], strict=True))
    config = json.loads((root / "draft" / "config.json").read_text())
    assert config["pard_token"] == MASK and config["spd_type"] == "pard"
    target = load_model(str(target_dir), device="cpu", dtype="float32")
    draft = load_model(str(root / "draft"), device="cpu", dtype="float32")
    greedy = DecodeConfig(max_new_tokens=40, k=4)
    reference = run(target, "ar", prompt(), greedy)
    speculative = run(target, "pard", prompt(), greedy, draft)
    assert speculative.token_ids == reference.token_ids
    assert speculative.accepted_per_position[1] > 0  # a masked position's draft was taken
    card_file = json.loads((root / "draft" / "specdec_card.json").read_text())
    assert card_file["kind"] == "pard" and card_file["top1_by_position"] == card.top1_by_position


def test_the_mask_token_is_the_highest_special_id_without_a_role_the_data_never_holds():
    tokenizer = tiny_tokenizer()  # <unk> 0, <s> 1 (BOS), </s> 2 (EOS)
    assert mask_token_for(tokenizer, [[1, 5, 6, 2]], VOCAB) == 0
    with pytest.raises(SpecdecError, match="--mask-token ID"):
        mask_token_for(tokenizer, [[1, 0, 6, 2]], VOCAB)


def test_a_folder_without_a_job_is_refused_before_any_model_loads(tmp_path):
    with pytest.raises(SpecdecError, match="job folder"):
        PardTrainRequest(out=str(tmp_path / "o"), data=str(tmp_path))


def test_the_command_line_trains_pard_and_refuses_eagle_flags(tmp_path, capsys):
    job = tmp_path / "job"
    prepare(job, JobPlan(tokens=1000, mix={"magpie": 1.0}))
    args = ["train", "pard", "--out", str(tmp_path / "o"), "--data", str(job)]
    assert main([*args, "--arch", "eagle3"]) == 2
    assert "--arch belongs to EAGLE heads" in capsys.readouterr().err
    assert main([*args, "--block", "1"]) == 2
    assert "--block 1" in capsys.readouterr().err
