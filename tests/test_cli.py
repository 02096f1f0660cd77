"""`specdec` CLI: the JSON contract, and bad input as one line on stderr with exit code 2."""

import json
import subprocess
import sys

import pytest
import torch

from specdec_core.cli import main
from tests.tiny import VOCAB, tiny_model, tiny_tokenizer

GENERATE_FIELDS = {
    "method", "text", "token_ids", "new_tokens", "steps", "mean_accept_length",
    "tokens_per_second", "wall_seconds", "draft_seconds", "verify_seconds", "prompt_tokens",
    "device", "dtype", "policy", "lossy",
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    """A tiny target and a draft on disk, plus a draft with a different tokenizer."""
    root = tmp_path_factory.mktemp("models")
    for name, seed in (("target", 1), ("draft", 1)):
        tiny_model(seed).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    other = tiny_tokenizer()
    other.add_tokens(["extra"])
    tiny_model(3).save_pretrained(root / "foreign")
    other.save_pretrained(root / "foreign")
    return root


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_generate_json_has_every_contract_field(capsys, tiny_dirs):
    args = ["generate", "--target", str(tiny_dirs / "target"), "--prompt", "w1 w2 w3", "--raw"]
    code, out, _ = cli(capsys, *args, "--max-new-tokens", "12", "--json")
    record = json.loads(out)
    assert code == 0 and record.keys() >= GENERATE_FIELDS
    assert record["new_tokens"] == len(record["token_ids"]) > 0
    assert record["lossy"] is False and record["policy"] == "lossless"


def test_classic_greedy_token_ids_equal_ar(capsys, tiny_dirs):
    common = ["--target", str(tiny_dirs / "target"), "--prompt", "w4 w5", "--raw", "--json"]
    common += ["--dtype", "float32"]  # lossless means ar's very tokens in float32, on any CPU
    _, ar, _ = cli(capsys, "generate", "--method", "ar", *common)
    draft = ["--draft", str(tiny_dirs / "draft"), "--k", "3"]
    _, classic, _ = cli(capsys, "generate", "--method", "classic", *draft, *common)
    assert json.loads(ar)["token_ids"] == json.loads(classic)["token_ids"]


def test_a_draft_with_another_tokenizer_drafts_and_keeps_ars_output(capsys, tiny_dirs):
    common = ["--target", str(tiny_dirs / "target"), "--prompt", "w4 w5", "--raw", "--json"]
    common += ["--dtype", "float32"]  # lossless means ar's very tokens in float32, on any CPU
    _, ar, _ = cli(capsys, "generate", "--method", "ar", *common)
    draft = ["--draft", str(tiny_dirs / "foreign"), "--k", "3"]
    code, classic, _ = cli(capsys, "generate", "--method", "classic", *draft, *common)
    assert code == 0 and json.loads(ar)["token_ids"] == json.loads(classic)["token_ids"]


def test_bench_writes_the_contract_json(capsys, tiny_dirs, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"turns": ["w1 w2"]}\n{"prompt": "w3 w9 w4"}\n')
    out = tmp_path / "bench.json"
    code, table, _ = cli(
        capsys, "bench", "--methods", "ar,classic", "--prompts", str(prompts), "--raw",
        "--target", str(tiny_dirs / "target"), "--draft", str(tiny_dirs / "draft"),
        "--max-new-tokens", "10", "--json-out", str(out), "--dtype", "float32",
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert code == 0 and "classic" in table
    for method in ("ar", "classic"):
        entry = result["methods"][method]
        assert entry["identical_to_ar"] == 1.0 and entry["prompts"] == 2
        assert {"tokens_per_second", "speedup_vs_ar", "mean_accept_length", "new_tokens"} <= set(
            entry
        )
        low, high = entry["speedup_interval"]
        assert low <= entry["speedup_vs_ar"] <= high and len(entry["speedup_per_prompt"]) == 2
    assert len(result["per_prompt"]) == 4
    environment = result["config"]["environment"]  # where the numbers were measured
    assert environment["command"].startswith("specdec bench --methods ar,classic --prompts")
    assert environment["torch"] == torch.__version__ and environment["machine"]
    assert environment["cpu_threads"] == torch.get_num_threads()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "/no/such/model"], "not found"),
        (["--target", "no-such-owner/no-such-model"], "cannot get model"),
        (["--target", "missing.gguf"], "GGUF file not found"),
        (["--prompt", ""], "empty"),
        (["--prompt", " ".join(["w5"] * 300)], "context"),
        (["--temperature", "-1"], "temperature"),
        (["--prompt-file", "/no/such.jsonl"], "not found"),
    ],
)
def test_bad_input_is_one_line_on_stderr_with_exit_2(capsys, tiny_dirs, argv, message):
    argv = [str(tiny_dirs / "foreign") if a == "FOREIGN" else a for a in argv]
    base = ["generate", "--target", str(tiny_dirs / "target"), "--raw"]
    if "--prompt" not in argv and "--prompt-file" not in argv:
        base += ["--prompt", "w1"]
    code, _, err = cli(capsys, *base, *argv)
    lines = [line for line in err.splitlines() if line.startswith("specdec: error")]
    assert code == 2 and len(lines) == 1 and message in lines[0]
    assert "Traceback" not in err


def test_corrupt_gguf_is_a_clear_error(capsys, tmp_path):
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00" * 64)
    code, _, err = cli(capsys, "generate", "--target", str(corrupt), "--prompt", "hi")
    assert code == 2 and "cannot read GGUF" in err and "Traceback" not in err


@pytest.mark.slow
def test_entry_point_prints_no_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "specdec_core.cli", "generate", "--target", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") <= 2


def test_tiny_vocab_is_what_the_fixtures_assume():
    assert len(tiny_tokenizer()) == VOCAB
