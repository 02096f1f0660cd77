"""`specdec export --serve`: whole server command lines with the engines' documented flags.

The speculative part is checked against the names tests/test_export.py checks (vLLM
`SpeculativeConfig`, SGLang's "Full Parameter Reference"); the rest against vLLM's engine
arguments (`--dtype`, `--tensor-parallel-size`) and SGLang's server arguments (`--model-path`,
`--dtype`, `--tp`, `--enable-metrics`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.serving.serve import (
    serve_command,
    shell_script,
    tensor_parallel_size,
    write_script,
)
from tests.test_export import SGLANG_ALGORITHMS, SGLANG_FLAGS, VLLM_KEYS, VLLM_METHODS, head_dir

SETTINGS = {
    "eagle": DecodeConfig(k=5),
    "eagle2": DecodeConfig(tree_depth=4, tree_topk=3, tree_tokens=12),
    "classic": DecodeConfig(k=3),
    "ngram": DecodeConfig(k=6, ngram_max=4),
}
VLLM_SERVE_FLAGS = {"--speculative-config", "--dtype", "--tensor-parallel-size"}
SGLANG_SERVE_FLAGS = SGLANG_FLAGS | {"--model-path", "--dtype", "--tp", "--enable-metrics"}


def _model(method: str, tmp_path) -> str:
    if method in ("eagle", "eagle2"):
        return head_dir(tmp_path)
    return "org/draft" if method == "classic" else ""


def _flags(words: list[str]) -> dict[str, str]:
    flags, i = {}, 0
    while i < len(words):
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[words[i]], i = words[i + 1], i + 2
        else:
            flags[words[i]], i = "", i + 1
    return flags


def _served(engine: str, method: str, tmp_path, dtype: str) -> tuple[list[str], dict, str]:
    """(the program's words, its flags, the draft / head) of the serve command for `method`."""
    model = _model(method, tmp_path)
    command = serve_command(engine, method, SETTINGS[method], "org/target", model, dtype)
    words = shlex.split(command.command)
    return words[:3], _flags(words[3:]), model


@pytest.mark.parametrize("method", list(SETTINGS))
def test_vllm_serve_command_per_method(method, tmp_path):
    program, flags, _ = _served("vllm", method, tmp_path, "bfloat16")
    assert program == ["vllm", "serve", "org/target"]
    assert set(flags) <= VLLM_SERVE_FLAGS and flags["--dtype"] == "bfloat16"
    spec = json.loads(flags["--speculative-config"])
    assert set(spec) <= VLLM_KEYS and spec["method"] in VLLM_METHODS
    assert (
        spec["num_speculative_tokens"]
        == {"eagle": 5, "eagle2": 4, "classic": 3, "ngram": 6}[method]
    )
    assert "--tensor-parallel-size" not in flags  # left out at 1


@pytest.mark.parametrize("method", list(SETTINGS))
def test_sglang_serve_command_per_method(method, tmp_path):
    program, flags, model = _served("sglang", method, tmp_path, "float16")
    assert program == ["python", "-m", "sglang.launch_server"]
    assert set(flags) <= SGLANG_SERVE_FLAGS
    assert flags["--model-path"] == "org/target" and flags["--dtype"] == "float16"
    assert flags["--speculative-algorithm"] in SGLANG_ALGORITHMS
    assert "--enable-metrics" in flags and "--tp" not in flags
    if model:
        assert flags["--speculative-draft-model-path"] == model


def test_tensor_parallel_size_is_passed_when_above_one():
    vllm = serve_command("vllm", "ngram", DecodeConfig(), "org/t", tensor_parallel_size=4)
    assert vllm.argv[-2:] == ("--tensor-parallel-size", "4")
    sglang = serve_command("sglang", "ngram", DecodeConfig(), "org/t", tensor_parallel_size=2)
    assert _flags(list(sglang.argv[3:]))["--tp"] == "2"
    with pytest.raises(SpecdecError, match="at least 1"):
        serve_command("vllm", "ngram", DecodeConfig(), tensor_parallel_size=0)
    with pytest.raises(SpecdecError, match="no serving-engine equivalent"):
        serve_command("vllm", "ar", DecodeConfig())


def test_a_device_map_over_several_gpus_gives_the_tensor_parallel_size():
    assert tensor_parallel_size({"model.embed_tokens": 0, "model.layers.0": 1, "lm_head": 1}) == 2
    assert tensor_parallel_size("cuda:0,cuda:1,cuda:2") == 3
    assert tensor_parallel_size(["cuda", "cpu", "disk"]) == 1
    assert tensor_parallel_size("cpu") == tensor_parallel_size(None) == 1


def test_a_path_with_spaces_and_the_json_survive_the_shell(tmp_path):
    head = tmp_path / "my heads"
    head.mkdir()
    command = serve_command("vllm", "eagle", DecodeConfig(k=2), "org/t", head_dir(head))
    spec = json.loads(shlex.split(command.command)[4])
    assert spec["model"].endswith("my heads/head")


def test_the_shell_script_is_executable_and_runs_the_command(tmp_path):
    command = serve_command("sglang", "ngram", DecodeConfig(k=2), "org/t")
    script = write_script(command, tmp_path / "serve.sh")
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and command.command in text
    assert text == shell_script(command)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text('#!/usr/bin/env bash\necho "$@"\n')
    (fake / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"}
    out = subprocess.run([str(script), "--port", "30001"], env=env, capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.split() == [*command.argv[1:], "--port", "30001"]


def test_cli_export_serve_prints_the_whole_command(capsys):
    argv = ["export", "--engine", "vllm", "--method", "ngram", "--k", "3", "--serve"]
    assert main([*argv, "--dtype", "bfloat16", "--tensor-parallel-size", "2"]) == 0
    captured = capsys.readouterr()
    words = shlex.split(captured.out)
    assert words[:3] == ["vllm", "serve", "HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert json.loads(words[4])["num_speculative_tokens"] == 3
    assert words[5:] == ["--dtype", "bfloat16", "--tensor-parallel-size", "2"]
    assert "# temperature / top-p" in captured.err
    argv = ["export", "--engine", "sglang", "--method", "ngram", "--serve", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert "--dtype" in record["argv"] and "--tp" not in record["argv"]
    bad = ["export", "--engine", "vllm", "--method", "ngram", "--serve"]
    assert main([*bad, "--tensor-parallel-size", "0"]) == 2
