"""Every method of every family runs from the command line as a user runs it: `specdec bench`
with each method's own model flag, on a tiny target, greedy output identical to `ar`."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.heads.medusa.formats import save_fasterdecoding
from specdec_core.heads.mlp_speculator.formats import save_speculator
from specdec_core.run.methods import METHODS
from tests.mtp_tiny import write_checkpoint
from tests.test_medusa import random_heads
from tests.test_mlp_speculator import random_speculator
from tests.tiny import tiny_model, tiny_tokenizer

PROMPTS = ('{"prompt": "w1 w2 w3 w1 w2"}', '{"turns": ["w4 w5 w6 w4 w5 w6 w4"]}')


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    tiny_model(1, layers=4).save_pretrained(root / "target")  # SWIFT skips inner layers
    tiny_tokenizer().save_pretrained(root / "target")
    save_fasterdecoding(random_heads(), root / "medusa", base_model="tiny")
    save_speculator(random_speculator(), root / "speculator", dtype=torch.float32)
    (root / "prompts.jsonl").write_text("\n".join(PROMPTS) + "\n")
    return root


def _on_tiny(models) -> tuple[str, ...]:
    """The flags that run a command on the fixture's target (in float32, where lossless means
    ar's very tokens on any CPU) and prompts."""
    target = ("--target", str(models / "target"), "--dtype", "float32")
    return (*target, "--prompts", str(models / "prompts.jsonl"))


def _written(capsys, out, *argv: str) -> dict:
    """`specdec ARGV --json-out OUT --raw`, which succeeds: the JSON it wrote to OUT."""
    assert main([*argv, "--json-out", str(out), "--raw"]) == 0, capsys.readouterr().err
    return json.loads(out.read_text())


# the methods that need no bundled model, or whose model the test gives by flag
NO_EXTRA = [m.name for m in METHODS.values() if m.needs is None and m.name != "ar"]
FLAGS = {"medusa": "--medusa", "speculator": "--speculator"}
GIVEN = [m.name for m in METHODS.values() if m.needs in FLAGS]


@pytest.mark.parametrize("method", NO_EXTRA + GIVEN)
def test_bench_runs_the_method_identical_to_ar(models, tmp_path, capsys, method):
    entry = _written(
        capsys, tmp_path / "bench.json",
        "bench", *_on_tiny(models), "--methods", f"ar,{method}", "--max-new-tokens", "16",
        *("--medusa", str(models / "medusa"), "--speculator", str(models / "speculator")),
    )["methods"][method]  # fmt: skip
    assert entry["identical_to_ar"] == 1.0
    assert entry["new_tokens"] > 0


@pytest.mark.parametrize("method", [m.name for m in METHODS.values() if m.needs == "mtp"])
def test_bench_drafts_with_the_targets_own_mtp_layer_identical_to_ar(tmp_path, capsys, method):
    """No model flag: the MTP layer is read from the target's own checkpoint."""
    target = write_checkpoint("deepseek_v3", tmp_path / "deepseek", aligned=True).directory
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    entry = _written(
        capsys, tmp_path / "bench.json",
        "bench", "--target", str(target), "--methods", f"ar,{method}", "--prompts", str(prompts),
        "--max-new-tokens", "16", "--dtype", "float32",
    )["methods"][method]  # fmt: skip
    assert entry["identical_to_ar"] == 1.0 and entry["mean_accept_length"] > 1.0


def test_a_sweep_over_a_method_parameter_runs_each_value(models, tmp_path, capsys):
    points = _written(
        capsys, tmp_path / "sweep.json",
        "sweep", *_on_tiny(models), "--method", "lookahead", "--max-new-tokens", "12",
        "--method-param-grid", "window=2,4",
    )["points"]  # fmt: skip
    assert [p["config"]["method_params"]["window"] for p in points] == [2.0, 4.0]
    assert all(p["identical_to_ar"] == 1.0 for p in points)
    assert "window" in capsys.readouterr().out


def test_a_method_parameter_no_method_reads_is_refused_before_a_sweep(models, capsys):
    argv = ["sweep", *_on_tiny(models), "--method", "ngram", "--method-param-grid", "window=2,4"]
    assert main(argv) == 2
    assert "--method-param window" in capsys.readouterr().err


def test_the_windows_engine_writes_medusa_heads_for_vllm_and_serves_the_folder(models, tmp_path):
    """Export to server… on a Medusa method writes vLLM's layout and the command serving it."""
    import json as json_module

    from app.engine import SpecdecEngine
    from app.engine_api import HeadExportRequest
    from specdec_core.decoding.config import DecodeConfig

    out = tmp_path / "medusa-vllm"
    specs = {"medusa": str(models / "medusa")}
    request = HeadExportRequest(
        "vllm", str(out), "medusa", DecodeConfig(tree_depth=2, tree_topk=2, tree_tokens=5),
        str(models / "target"), specs,
    )  # fmt: skip
    command = SpecdecEngine().export_head(request)
    config = json_module.loads((out / "config.json").read_text())
    assert config["model_type"] == "medusa"
    payload = json_module.loads(command.argv[command.argv.index("--speculative-config") + 1])
    assert payload["method"] == "medusa" and payload["model"] == str(out)


def test_an_exit_layer_given_as_a_method_parameter_drafts_identical_to_ar(models, tmp_path, capsys):
    written = _written(
        capsys, tmp_path / "bench.json",
        "bench", *_on_tiny(models), "--methods", "ar,layer-skip", "--max-new-tokens", "12",
        "--method-param", "exit_layer=2",
    )  # fmt: skip
    assert written["methods"]["layer-skip"]["identical_to_ar"] == 1.0
