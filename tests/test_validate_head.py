"""`specdec validate`: any EAGLE head measured on the held-out prompts of every kind gives the
table training writes into its card, for both layouts; bad input is one line."""

import json

import pytest

from specdec_core.cli import main
from specdec_core.training.kinds import KINDS
from tests.tiny import tiny_tokenizer, training_dir


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    root = training_dir(tmp_path_factory.mktemp("validate"), layers=4)
    tiny_tokenizer(chat=True).save_pretrained(root / "target")  # held-out prompts are chat turns
    return root


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["eagle1", "eagle3"])
def test_validate_gives_the_table_by_kind_training_wrote(chat_dir, tmp_path, capsys, arch):
    head = tmp_path / "head"
    argv = [
        *("train", "eagle", "--target", str(chat_dir / "target"), "--arch", arch),
        *("--data", str(chat_dir / "data.jsonl"), "--tokens", "600", "--epochs", "1"),
        *("--draft-vocab", "16", "--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--val-prompts", "1", "--val-kinds", "1", "--unroll", "3", "--out", str(head)),
    ]
    assert main(argv) == 0
    card = json.loads((head / "specdec_card.json").read_text())
    capsys.readouterr()
    validate = ["validate", "--head", str(head), "--target", str(chat_dir / "target")]
    validate += ["--per-kind", "1", "--unroll", "3", "--dtype", "float32", "--device", "cpu"]
    assert main([*validate, "--work", str(tmp_path / "fresh"), "--json"]) == 0  # answers anew
    measured = json.loads(capsys.readouterr().out)
    assert measured["by_kind"] == card["validation_by_kind"] and set(measured["by_kind"]) == set(
        KINDS
    )
    assert main([*validate, "--work", str(tmp_path / "fresh")]) == 0  # the table, from the cache
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["kind", "top-1", "tau"] and len(lines) == len(KINDS) + 2
    assert lines[-1].split()[0] == "mean"
    assert main([*validate, "--work", str(tmp_path / "fresh"), "--no-tau", "--json"]) == 0
    top1_only = json.loads(capsys.readouterr().out)
    assert {k: v["teacher_forced_top1"] for k, v in measured["by_kind"].items()} == {
        k: v["teacher_forced_top1"] for k, v in top1_only["by_kind"].items()
    }
    assert "tau" not in top1_only["by_kind"]["qa"] and "mean_tau" not in top1_only


def test_validate_refuses_bad_input_in_one_line(chat_dir, tmp_path, capsys):
    target = ["--target", str(chat_dir / "target"), "--dtype", "float32"]
    assert main(["validate", *target, "--per-kind", "0"]) == 2
    assert "--per-kind 0: give 1 or more" in capsys.readouterr().err
    assert main(["validate", *target, "--head", str(tmp_path / "no-such-head")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("specdec: error:") and "\n" not in error
