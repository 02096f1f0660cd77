"""Training within a time budget (`specdec_core.training.distill`, the stages of
scripts/gpu_distill.py) end to end on a tiny target, on a CPU."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training import distill
from specdec_core.training.datasets import length_calls
from specdec_core.training.distill import DistillSettings, pack, unpack
from tests.tiny import VOCAB, tiny_model, tiny_tokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_distill.py"
COMMAND = "python scripts/gpu_distill.py run"


def _settings(root: Path, **changes) -> DistillSettings:
    """A timed run on the tiny target in `root` (target/, prompts.npz): a fresh head into
    root/out, on the CPU, two epochs of small batches; `changes` says what differs."""
    settings = DistillSettings(
        target=str(root / "target"), prompts=str(root / "prompts.npz"), out=str(root / "out"),
        work=str(root / "work"), init="", device="cpu", batch=4, max_new=6, total_seconds=120,
        reserve_seconds=0, batch_tokens=128, max_epochs=2,
        val_kinds=0,  # the table by kind is tests/test_validate_head.py's
    )  # fmt: skip
    return replace(settings, **changes)


def test_prompts_pack_and_unpack_losslessly():
    lists = [[1, 2, 3], [], [49151, 0]]
    assert unpack(*pack(lists)) == lists


def test_length_calls_respect_the_count_and_the_padded_token_budget():
    prompts = [[1] * n for n in (9, 1, 5, 3, 7, 2, 8)]
    groups = length_calls([len(p) for p in prompts], 3, padded=40, new_tokens=4)
    assert sorted(i for g in groups for i in g) == list(range(len(prompts)))
    for group in groups:
        longest = max(len(prompts[i]) for i in group)
        assert len(group) <= 3 and len(group) * (longest + 4) <= 40
    lengths = [len(prompts[i]) for g in groups for i in g]
    assert lengths == sorted(lengths)  # groups of similar length


def test_length_calls_in_order_keep_the_order_and_pad_to_each_calls_longest():
    lengths = [3, 9, 2, 2, 30, 4]
    calls = length_calls(lengths, padded=20, in_order=True)
    assert [i for call in calls for i in call] == list(range(len(lengths)))  # a prefix each
    assert calls == [[0, 1], [2, 3], [4], [5]]  # two rows of 9 fit in 20, three do not


@pytest.mark.slow
def test_a_timed_run_answers_trains_and_saves_a_lossless_two_layer_head(tmp_path):
    tiny_model(1).save_pretrained(tmp_path / "target")
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    generator = torch.Generator().manual_seed(0)
    prompts = [
        [1, *torch.randint(3, VOCAB, (n,), generator=generator).tolist()] for n in range(2, 14)
    ]
    train, train_offsets = pack(prompts)
    held, held_offsets = pack(prompts[:3])
    np.savez(tmp_path / "prompts.npz", train=train, train_offsets=train_offsets, held=held,
             held_offsets=held_offsets)  # fmt: skip
    out = tmp_path / "out"
    distill.run(_settings(tmp_path, gen_seconds=60, layers=2), COMMAND)
    report = json.loads((out / "report.json").read_text())
    generated = report["stages"]["generate"]
    assert generated["greedy_answers"] == len(prompts) == generated["sampled_answers"]
    assert report["stages"]["train"]["epochs"] == 2
    saved = np.load(out / "greedy_ids.npz")
    answers = unpack(saved["ids"], saved["offsets"])
    assert sorted(a[:s] for a, s in zip(answers, saved["starts"], strict=True)) == sorted(prompts)
    card = json.loads((out / "head" / "specdec_card.json").read_text())
    assert card["epochs"] == 2 and card["init"] is None and card["draft_vocab"] == VOCAB
    target = load_model(str(tmp_path / "target"), device="cpu", dtype="float32")
    head = load_head(str(out / "head"), target)
    assert card["layers"] == len(head.layers) == 2
    config = DecodeConfig(max_new_tokens=16, k=3)
    ids = prompts[4]
    assert (
        run(target, "eagle", ids, config, head).token_ids
        == run(target, "ar", ids, config).token_ids
    )


def test_a_missing_prompts_file_says_how_to_make_it(tmp_path):
    with pytest.raises(SpecdecError, match="gpu_distill.py export"):
        distill.run(DistillSettings(prompts=str(tmp_path / "none.npz"), out="x"), COMMAND)


@pytest.mark.slow
def test_the_script_passes_its_flags_and_says_what_went_wrong_in_one_line(tmp_path):
    missing = str(tmp_path / "none.npz")
    flags = ["--prompts", missing, "--out", "x", "--lr", "1", "--init", "", "--arch", "eagle3"]
    flags += ["--val-kinds", "0"]
    argv = [sys.executable, str(SCRIPT), "run", *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"gpu_distill: {missing} not found; make it with: gpu_distill.py export"
    )


def _saved_answers(root, layers: int, count: int):
    """A tiny target (`layers` layers) in root/target, `count` answers of an earlier run in
    root/answers.npz and the first three's prompts (held out too) in root/prompts.npz."""
    from specdec_core.training.datasets import Sample, save_answers

    tiny_model(1, layers=layers).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    generator = torch.Generator().manual_seed(0)
    answers = [
        Sample([1, *torch.randint(3, VOCAB, (n,), generator=generator).tolist()], 3)
        for n in range(8, 8 + count)
    ]
    save_answers(answers, root / "answers.npz")
    held, held_offsets = pack([a.ids[:3] for a in answers[:3]])
    np.savez(root / "prompts.npz", train=held, train_offsets=held_offsets, held=held,
             held_offsets=held_offsets)  # fmt: skip
    return answers


@pytest.mark.slow
def test_a_run_on_saved_answers_trains_a_fresh_eagle3_head(tmp_path):
    answers = _saved_answers(tmp_path, layers=4, count=12)
    out = tmp_path / "out"
    saved = str(tmp_path / "answers.npz")
    settings = _settings(tmp_path, answers=saved, arch="eagle3", unroll=3, draft_vocab=16)
    distill.run(settings, COMMAND)
    assert not (out / "greedy_ids.npz").exists()  # nothing generated but the held-out answers
    card = json.loads((out / "head" / "specdec_card.json").read_text())
    assert card["arch"] == "eagle3" and card["sequences"] == len(answers)
    assert card["train_config"]["ce_weight"] == 1.0 and card["epochs"] == 2
    target = load_model(str(tmp_path / "target"), device="cpu", dtype="float32")
    head = load_head(str(out / "head"), target)
    assert head.kind == "eagle3" and head.draft_vocab == 16
    config = DecodeConfig(max_new_tokens=16, k=3)
    ids = answers[4].ids[:5]
    assert (
        run(target, "eagle", ids, config, head).token_ids
        == run(target, "ar", ids, config).token_ids
    )


@pytest.mark.slow
def test_a_timed_run_and_specdec_train_write_the_same_card_on_the_same_answers(
    tmp_path, monkeypatch
):
    from specdec_core.cli import main

    _saved_answers(tmp_path, layers=2, count=8)
    distill.run(_settings(tmp_path, answers=str(tmp_path / "answers.npz")), COMMAND)
    argv = [
        *("train", "eagle", "--target", str(tmp_path / "target"), "--data"),
        *(str(tmp_path / "answers.npz"), "--draft-vocab", "0", "--batch-tokens", "128"),
        *("--feature-dtype", "float32", "--val-kinds", "0", "--out", str(tmp_path / "cli")),
    ]
    monkeypatch.setattr(sys, "argv", ["specdec", *argv])
    assert main(argv) == 0
    script = json.loads((tmp_path / "out" / "head" / "specdec_card.json").read_text())
    cli = json.loads((tmp_path / "cli" / "specdec_card.json").read_text())
    assert set(script) - set(cli) == {"device", "stages"} and set(cli) <= set(script)
    assert set(script["train_config"]) == set(cli["train_config"])
    for key in ("kind", "arch", "tokens", "sequences", "epochs", "draft_vocab", "init", "layers"):
        assert script[key] == cli[key], key
    assert script["command"] == COMMAND
    assert cli["command"] == "specdec " + " ".join(argv)
    assert cli["data"] == [str(tmp_path / "answers.npz")] and script["data"][0].startswith("self")
    assert script["stages"]["train"]["epochs"] == script["epochs"] == 2
