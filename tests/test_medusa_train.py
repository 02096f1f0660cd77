"""`specdec train medusa` on a tiny random target: the loss falls, the saved heads load in the
layout they were written in and decode exactly as the target."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.medusa import MedusaDrafter
from specdec_core.errors import SpecdecError
from specdec_core.heads.medusa.formats import load_medusa
from specdec_core.loop.decode import generate
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training.card import read_card
from specdec_core.training.data_sources import Collected
from specdec_core.training.datasets import Sample, generate_answers
from specdec_core.training.medusa import (
    MedusaTrainRequest,
    medusa_losses,
    starting_heads,
    train_medusa_on,
)
from specdec_core.training.online_features import Sequences, target_features
from tests.tiny import VOCAB, prompt, training_dir


@torch.no_grad()
def _divergence(heads, target, samples) -> float:
    """Σ over heads of KL(the target's distribution of token t + i + 2 ‖ head i at t), the
    part of the training objective (medusa_losses) that training can lower."""
    featured = target_features(target, [(s.ids, s.start) for s in samples])
    rows = target.model.get_output_embeddings().weight[heads.draft_ids()].float()
    ids, hidden, mask = featured.ids, featured.hidden, featured.loss_mask
    loss, ces, _ = medusa_losses(heads, rows, ids, hidden, mask)
    teacher = torch.softmax(hidden.float() @ rows.T, dim=-1)
    total = 0.0
    for i, ce in enumerate(ces):
        p = teacher[:, i + 1 :][mask[:, i + 1 :]]
        total += ce + float((p * p.log()).sum(-1).mean())  # CE − H(p)
    return total


def test_training_lowers_the_loss_and_the_heads_decode_as_the_target(tiny_target, tmp_path):
    prompts = [prompt(length=4 + i % 3, offset=i) for i in range(24)]
    samples = generate_answers(
        tiny_target.model, tiny_target.tokenizer, prompts, 24, 8, tmp_path / "gen"
    )
    request = MedusaTrainRequest(
        out=str(tmp_path / "heads"), target="tiny", heads=3, draft_vocab=0, epochs=12,
        batch_tokens=64, lr=1e-2, val_prompts=1, val_kinds=0,
    )  # fmt: skip
    source = Collected("memory", samples, held=samples[:4], held_prompts=prompts[:2])
    fresh = starting_heads(tiny_target, Sequences.of(samples), 3, 1, 0)
    before = _divergence(fresh, tiny_target, samples)
    card = train_medusa_on(request, tiny_target, [source])
    heads = load_medusa(str(tmp_path / "heads"), tiny_target)
    assert (tmp_path / "heads" / "medusa_lm_head.safetensors").is_file()  # FasterDecoding's
    assert heads.config.num_heads == 3 and heads.token_map is None
    assert _divergence(heads.float(), tiny_target, samples) < 0.5 * before
    assert card.kind == "medusa" and card.extra["medusa"]["layout"] == "fasterdecoding"
    assert len(card.extra["medusa"]["teacher_forced_top1_by_head"]) == 3
    ids = prompts[0]
    config = DecodeConfig(max_new_tokens=24, tree_tokens=16)
    reference = run(tiny_target, "ar", ids, config)
    drafter = MedusaDrafter(heads, tiny_target.model)
    summary = list(generate(tiny_target, drafter, ids, config))[-1].summary
    assert summary.token_ids == reference.token_ids
    assert summary.mean_accept_length > 1.2  # trained heads are taken


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    prompts = (json.dumps({"prompt": "w1 w2 w3"}), json.dumps({"turns": ["w4 w5", "w6"]}))
    return training_dir(tmp_path_factory.mktemp("tiny"), prompts=prompts)


def test_specdec_train_medusa_saves_heads_in_vllms_layout_with_a_reduced_vocabulary(
    tiny_dir, tmp_path
):
    out = tmp_path / "medusa"
    argv = [
        *("train", "medusa", "--target", str(tiny_dir / "target")),
        *("--data", str(tiny_dir / "data.jsonl"), "--tokens", "800", "--epochs", "2"),
        *("--heads", "3", "--draft-vocab", "16", "--batch-tokens", "256"),
        *("--feature-dtype", "float32", "--val-kinds", "0", "--out", str(out)),
    ]
    assert main(argv) == 0
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["kind"] == "medusa" and card["epochs"] == 2 and card["draft_vocab"] == 16
    assert read_card(out).to_record() == card
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "medusa" and config["truncated_vocab_size"] == 16
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    heads = load_medusa(str(out), target)
    assert heads.config.draft_vocab == 16 and len(heads.token_map) == 16
    ids = [1, 5, 9, 4]
    decode = DecodeConfig(max_new_tokens=20, tree_tokens=12)
    reference = run(target, "ar", ids, decode)
    drafter = MedusaDrafter(heads, target.model)
    assert list(generate(target, drafter, ids, decode))[-1].summary.token_ids == (
        reference.token_ids
    )
    assert main(argv) == 0  # a rerun resumes from the finished checkpoint


def test_flags_of_eagle_heads_are_refused_for_medusa(tiny_dir, tmp_path, capsys):
    argv = ["train", "medusa", "--target", str(tiny_dir / "target"), "--out", str(tmp_path)]
    assert main([*argv, "--arch", "eagle3"]) == 2
    assert "--arch belongs to EAGLE heads" in capsys.readouterr().err
    with pytest.raises(SpecdecError, match="--heads 0"):
        MedusaTrainRequest(out=str(tmp_path), heads=0)
    with pytest.raises(SpecdecError, match="--lm-head"):
        MedusaTrainRequest(out=str(tmp_path), lm_head="mine")


def test_a_shared_target_lm_head_is_kept_and_saved_once(tiny_target, tmp_path):
    samples = [Sample([1, *torch.randint(3, VOCAB, (30,)).tolist()], 1) for _ in range(8)]
    request = MedusaTrainRequest(
        out=str(tmp_path / "h"), target="tiny", heads=2, draft_vocab=16, lm_head="target",
        epochs=1, batch_tokens=256, val_prompts=0, val_kinds=0,
    )  # fmt: skip
    train_medusa_on(request, tiny_target, [Collected("memory", samples)])
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    assert config["original_lm_head"] is True
    heads = load_medusa(str(tmp_path / "h"), tiny_target)
    rows = tiny_target.model.lm_head.weight[heads.token_map]
    torch.testing.assert_close(  # fp16 on disk; bf16 drafting on a CPU with native bf16
        heads.lm_heads[0].weight.float(), rows.float(), atol=1e-2, rtol=1e-2
    )
