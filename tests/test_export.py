"""`specdec export`: the vLLM speculative config and the SGLang flags carry the documented names.

Documented names: vLLM `SpeculativeConfig` (vllm/config/speculative.py) and SGLang's
"Full Parameter Reference" (docs/advanced_features/speculative_decoding.md); see
`specdec_core.serving.export` for the mapping table.
"""

from __future__ import annotations

import json
import shlex

import pytest

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.serving.export import export

VLLM_KEYS = {"method", "model", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"}
VLLM_METHODS = {"ngram", "draft_model", "eagle", "eagle3"}
SGLANG_FLAGS = {
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-token-map",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-ngram-min-match-window-size",
    "--speculative-ngram-max-match-window-size",
    "--speculative-ngram-max-bfs-breadth",
}
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "STANDALONE", "NGRAM"}


def head_dir(tmp_path, architecture: str = "LlamaForCausalLM"):
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    return str(head)


def vllm(method: str, config: DecodeConfig, model: str = "") -> dict:
    spec = json.loads(export("vllm", method, config, model=model).payload)
    assert set(spec) <= VLLM_KEYS and spec["method"] in VLLM_METHODS
    return spec


def sglang(method: str, config: DecodeConfig, model: str = "") -> dict[str, str]:
    words = shlex.split(export("sglang", method, config, model=model).payload)
    flags = dict(zip(words[::2], words[1::2], strict=True))
    assert set(flags) <= SGLANG_FLAGS and flags["--speculative-algorithm"] in SGLANG_ALGORITHMS
    return flags


def test_vllm_config_per_method(tmp_path):
    head = head_dir(tmp_path)
    k5 = DecodeConfig(k=5, ngram_max=4)
    assert vllm("eagle", k5, head) == {
        "method": "eagle",
        "num_speculative_tokens": 5,
        "model": head,
    }
    assert vllm("classic", k5, "org/draft") == {
        "method": "draft_model",
        "num_speculative_tokens": 5,
        "model": "org/draft",
    }
    assert vllm("ngram", k5) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }
    tree = DecodeConfig(tree_depth=4, tree_topk=3, tree_tokens=12)
    assert vllm("eagle2", tree, head)["num_speculative_tokens"] == 4


def test_sglang_flags_per_method(tmp_path):
    head = head_dir(tmp_path)
    k3 = DecodeConfig(k=3, ngram_max=5)
    assert sglang("eagle", k3, head) == {
        "--speculative-algorithm": "EAGLE",
        "--speculative-draft-model-path": head,
        "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4",  # counts the root: num_steps + 1 for a chain
    }
    assert sglang("classic", k3, "org/draft")["--speculative-algorithm"] == "STANDALONE"
    ngram = sglang("ngram", k3)
    assert ngram["--speculative-algorithm"] == "NGRAM"
    assert ngram["--speculative-ngram-max-match-window-size"] == "5"
    assert "--speculative-draft-model-path" not in ngram
    tree = sglang("eagle2", DecodeConfig(tree_depth=4, tree_topk=3, tree_tokens=12), head)
    assert (tree["--speculative-num-steps"], tree["--speculative-eagle-topk"]) == ("4", "3")
    assert tree["--speculative-num-draft-tokens"] == "12"


def test_an_eagle3_head_exports_as_eagle3(tmp_path):
    head = head_dir(tmp_path, "LlamaForCausalLMEagle3")
    assert vllm("eagle", DecodeConfig(), head)["method"] == "eagle3"
    assert sglang("eagle2", DecodeConfig(), head)["--speculative-algorithm"] == "EAGLE3"


def test_auto_tree_leaves_the_engine_to_choose_and_a_partial_tree_is_refused(tmp_path):
    head = head_dir(tmp_path)
    result = export("sglang", "eagle2", DecodeConfig(), model=head)
    assert "--speculative-num-steps" not in result.payload
    assert any("auto" in note for note in result.notes)
    with pytest.raises(SpecdecError, match="all three"):
        export("sglang", "eagle2", DecodeConfig(tree_depth=3), model=head)


def test_notes_say_what_does_not_carry_over(tmp_path):
    result = export("vllm", "ngram", DecodeConfig(policy="threshold"))
    assert any("lossy" in note for note in result.notes)
    assert any("HuggingFaceTB/SmolLM2-135M-Instruct" in note for note in result.notes)
    assert result.command.startswith("vllm serve HuggingFaceTB/SmolLM2-135M-Instruct")
    with pytest.raises(SpecdecError, match="no serving-engine equivalent"):
        export("vllm", "ar", DecodeConfig())


def test_cli_export_prints_the_payload_on_stdout(capsys):
    assert main(["export", "--engine", "vllm", "--method", "ngram", "--k", "6"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["num_speculative_tokens"] == 6
    assert "# example: vllm serve" in captured.err
    assert main(["export", "--engine", "sglang", "--method", "ngram", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["engine"] == "sglang" and "NGRAM" in record["payload"]
    assert main(["export", "--engine", "vllm", "--method", "ngram", "--k", "auto"]) == 2


def test_head_layout_is_read_from_the_weight_names(tmp_path):
    import torch
    from safetensors.torch import save_file

    head = head_dir(tmp_path)  # a plain LlamaConfig: the weights decide
    save_file({"midlayer.self_attn.q_proj.weight": torch.zeros(2, 2)}, f"{head}/model.safetensors")
    assert vllm("eagle", DecodeConfig(), head)["method"] == "eagle3"
    save_file(
        {"layers.0.mlp.up_proj.weight": torch.zeros(2, 2), "d2t": torch.zeros(2)},
        f"{head}/model.safetensors",
    )
    result = export("vllm", "eagle", DecodeConfig(), model=head)
    assert json.loads(result.payload)["method"] == "eagle"
    assert any("reduced vocabulary" in note for note in result.notes)


def test_export_from_a_sweep_takes_its_best_point(tmp_path, capsys):
    from specdec_core.tuning.sweep import Grid, run_sweep
    from tests.test_sweep import FakeMeasure

    out = tmp_path / "sweep.json"
    grid = Grid({"k": [1, 2, 4], "temperature": [0.0, 1.0]})
    header = {"target": "embedded", "device": "cpu", "specs": {"draft": "org/draft"}}
    measure = FakeMeasure(speed={1: 1.1, 2: 1.6, 4: 1.3})
    run_sweep("classic", grid, DecodeConfig(), measure, header, json_out=out)
    assert main(["export", "--engine", "vllm", "--from-sweep", str(out)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "method": "draft_model",
        "num_speculative_tokens": 2,
        "model": "org/draft",
    }
    assert "best point" in captured.err and "1.60x" in captured.err
    argv = ["export", "--engine", "vllm", "--from-sweep", str(out), "--at-temperature", "0.5"]
    assert main(argv) == 2


def test_export_from_a_tree_sweep_uses_the_tree_each_point_actually_used(tmp_path):
    from specdec_core.serving.export import best_of_sweep

    point = {"point": {"tree_tokens": None}, "speedup_vs_ar": 1.2, "mean_accept_length": 2.0}
    point.update(config=DecodeConfig().as_dict(), tree="12/4/3")
    sweep = {"method": "eagle2", "target": "embedded", "specs": {"head": "org/head"}}
    data = {"sweep": sweep, "points": [point], "best": point, "best_by_temperature": {}}
    (tmp_path / "s.json").write_text(json.dumps(data))
    best = best_of_sweep(tmp_path / "s.json")
    assert (best.config.tree_tokens, best.config.tree_depth, best.config.tree_topk) == (12, 4, 3)
    flags = shlex.split(export("sglang", best.method, best.config, model=best.model).payload)
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "12"
    assert best.model == "org/head"


def test_a_head_exported_with_sglangs_token_map_is_served_with_it(tmp_path):
    import torch

    from specdec_core.heads.eagle.layouts import TOKEN_MAP

    head = head_dir(tmp_path, "LlamaForCausalLMEagle")
    torch.save([0, 5, 9], f"{head}/{TOKEN_MAP}")
    flags = sglang("eagle", DecodeConfig(k=3), head)
    assert flags["--speculative-token-map"] == f"{head}/{TOKEN_MAP}"
    result = export("vllm", "eagle", DecodeConfig(k=3), model=head)
    assert any("vLLM does not read" in note and "--head-out" in note for note in result.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_default_method_exports_as_its_nearest_equivalent_with_what_differs(engine):
    config = DecodeConfig(tree_tokens=8, tree_depth=3, tree_topk=2)
    merged = export(engine, "eagle2-lookup", config)
    plain = export(engine, "eagle2", config)
    assert merged.payload == plain.payload  # the same head and tree, served as EAGLE
    assert any("nearest equivalent" in n and "prompt-lookup" in n for n in merged.notes)
    assert not any("nearest equivalent" in n for n in plain.notes)
