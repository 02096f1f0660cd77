"""`specdec export` for Medusa, the MLP speculator, native MTP, lookahead, layer skipping and a
classic draft of another tokenizer: each engine's payload or flags are what its loader rules
take, what it cannot serve is one line naming why, and `--head-out` writes Medusa heads and an
MLP speculator that the families' own readers read back identically.

The engines' rules, as read in their source (specdec_core/serving/export.py lists the lines):
- vLLM `SpeculativeConfig`: `method` one of `VLLM_METHODS`; `num_speculative_tokens` a positive
  integer; Medusa builds num_speculative_tokens heads from a config.json whose "num…heads" key
  gives how many are stored (MedusaConfig.from_pretrained), and reads only `blocks.*` /
  `lm_heads.*` / `token_map`; an MLP speculator drafts at most n_predict tokens; method "mtp"
  without a model drafts from the target's checkpoint, for the configs `hf_config_override`
  maps (`vllm_mtp_model_type` below); a draft_model of another vocabulary needs
  `use_heterogeneous_vocab`.
- SGLang: `--speculative-algorithm` one of `SGLANG_ALGORITHMS` (no Medusa, MLP speculator,
  lookahead or layer skipping); NEXTN drafts with the MTP layer of the architectures
  `_config_draft_model` maps (`sglang_mtp_draft` below); STANDALONE needs the target's
  vocabulary.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.medusa.formats import (
    export_vllm as medusa_export_vllm,
)
from specdec_core.heads.medusa.formats import (
    read_medusa,
    save_fasterdecoding,
    vllm_config,
)
from specdec_core.heads.medusa.head import MedusaConfig, MedusaHeads
from specdec_core.heads.mlp_speculator.formats import export_vllm as speculator_export_vllm
from specdec_core.heads.mlp_speculator.formats import read_speculator, save_speculator
from specdec_core.heads.mlp_speculator.head import MLPSpeculator, SpeculatorConfig
from specdec_core.serving.export import SERVING, export
from specdec_core.serving.head_export import export_for_method
from specdec_core.serving.serve import serve_command

VLLM_METHODS = {
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "mtp",
}  # fmt: skip
VLLM_KEYS = {"method", "model", "num_speculative_tokens", "use_heterogeneous_vocab"}
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}
SGLANG_FLAGS = {
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
}
TREE = DecodeConfig(tree_depth=2, tree_topk=3, tree_tokens=6)
H, V = 16, 32


def vllm(method: str, config: DecodeConfig, target: str = "org/target", model: str = "") -> dict:
    """The vLLM JSON, parsed, checked against SpeculativeConfig's fields and methods."""
    spec = json.loads(export("vllm", method, config, target, model).payload)
    assert set(spec) <= VLLM_KEYS and spec["method"] in VLLM_METHODS
    assert isinstance(spec["num_speculative_tokens"], int) and spec["num_speculative_tokens"] > 0
    return spec


def sglang(method: str, config: DecodeConfig, target: str = "org/target", model: str = "") -> dict:
    """The SGLang flags, split into flag -> value, checked against its server arguments."""
    words = shlex.split(export("sglang", method, config, target, model).payload)
    flags = dict(zip(words[::2], words[1::2], strict=True))
    assert set(flags) <= SGLANG_FLAGS and flags["--speculative-algorithm"] in SGLANG_ALGORITHMS
    steps = flags.get("--speculative-num-steps")
    if steps is not None and flags["--speculative-eagle-topk"] == "1":  # SGLang's own rule
        assert int(flags["--speculative-num-draft-tokens"]) == int(steps) + 1
    return flags


def refusal(engine: str, method: str, config: DecodeConfig, target="org/target", model="") -> str:
    with pytest.raises(SpecdecError) as caught:
        export(engine, method, config, target, model)
    line = str(caught.value)
    assert "\n" not in line
    return line


def medusa_heads(heads: int = 3, draft_vocab: int = 0, seed: int = 0) -> MedusaHeads:
    torch.manual_seed(seed)
    token_map = torch.randperm(V)[:draft_vocab] if draft_vocab else None
    medusa = MedusaHeads(MedusaConfig(H, V, heads, draft_vocab=draft_vocab), token_map)
    for param in medusa.parameters():
        param.data.normal_()
    return medusa.eval()


def speculator(n_predict: int = 3, tie: bool = False) -> MLPSpeculator:
    model = MLPSpeculator(
        SpeculatorConfig(emb_dim=H, vocab_size=V, n_predict=n_predict, tie_weights=tie)
    )
    model.reset_parameters(torch.Generator().manual_seed(0))
    return model.eval()


def target_dir(tmp_path: Path, name: str, **config) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


# --- Medusa ------------------------------------------------------------------------------------


def test_medusa_for_vllm_is_a_chain_of_at_most_its_heads_from_vllms_layout(tmp_path):
    folder = str(medusa_export_vllm(medusa_heads(3), tmp_path / "medusa"))
    stored = vllm_config(json.loads(Path(folder, "config.json").read_text()))["num_heads"]
    spec = vllm("medusa", TREE, model=folder)
    assert spec == {"method": "medusa", "model": folder, "num_speculative_tokens": 2}
    auto = export("vllm", "medusa", DecodeConfig(), "org/target", folder)
    assert json.loads(auto.payload)["num_speculative_tokens"] == stored == 3
    deep = export(
        "vllm",
        "medusa",
        DecodeConfig(tree_depth=5, tree_topk=2, tree_tokens=8),
        "org/target",
        folder,
    )
    assert json.loads(deep.payload)["num_speculative_tokens"] == 3  # vLLM loads no 4th head
    assert any("capped" in note for note in deep.notes)
    assert any("chain" in note and "top-1" in note for note in auto.notes)


def test_medusa_in_fasterdecodings_layout_or_for_sglang_is_one_line(tmp_path):
    folder = str(save_fasterdecoding(medusa_heads(3), tmp_path / "fd"))
    line = refusal("vllm", "medusa", TREE, model=folder)
    assert "FasterDecoding" in line and "--head-out" in line
    line = refusal("sglang", "medusa", TREE, model=folder)
    assert "SGLang serves no Medusa heads" in line and "spec_info.py" in line


def test_medusa_head_out_writes_vllms_layout_read_back_identically(tmp_path, capsys):
    source = save_fasterdecoding(medusa_heads(3), tmp_path / "fd")
    out = tmp_path / "for vllm"
    argv = ["export", "--engine", "vllm", "--method", "medusa", "--medusa", str(source)]
    argv += ["--head-out", str(out), "--tree-depth", "2", "--tree-topk", "3", "--tree-tokens", "6"]
    assert main([*argv, "--target", "org/target"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {
        "method": "medusa",
        "model": str(out),
        "num_speculative_tokens": 2,
    }
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert "wrote config.json, model.safetensors" in captured.err
    before, after = read_medusa(str(source)), read_medusa(str(out))
    assert after.config == before.config
    assert before.state_dict().keys() == after.state_dict().keys()
    for name, value in before.state_dict().items():
        assert torch.equal(after.state_dict()[name], value), name
    hidden = torch.randn(4, H)
    assert torch.equal(before(hidden), after(hidden))  # the same drafts from either layout


def test_medusa_with_a_token_map_round_trips_through_head_out(tmp_path):
    source = medusa_export_vllm(medusa_heads(2, draft_vocab=8), tmp_path / "reduced")
    written = export_for_method("vllm", "medusa", str(source), tmp_path / "out", TREE)
    assert written.layout == "medusa" and written.engine == "vllm"
    before, after = read_medusa(str(source)), read_medusa(str(written.directory))
    assert torch.equal(before.token_map, after.token_map)
    for name, value in before.state_dict().items():
        assert torch.equal(after.state_dict()[name], value), name


def test_head_out_for_sglang_medusa_is_refused_and_writes_nothing(tmp_path):
    source = save_fasterdecoding(medusa_heads(2), tmp_path / "fd")
    with pytest.raises(SpecdecError, match="SGLang serves no Medusa heads"):
        export_for_method("sglang", "medusa", str(source), tmp_path / "out", TREE)
    assert not (tmp_path / "out").exists()


# --- MLP speculator ----------------------------------------------------------------------------


def test_mlp_speculator_for_vllm_drafts_at_most_n_predict_and_says_the_v1_registry_line(
    tmp_path,
):
    folder = str(save_speculator(speculator(3), tmp_path / "spec", dtype=None))
    result = export("vllm", "mlp-speculator", DecodeConfig(k=2), "org/target", folder)
    spec = json.loads(result.payload)
    assert spec == {"method": "mlp_speculator", "model": folder, "num_speculative_tokens": 2}
    assert any("MLPSpeculatorPreTrainedModel" in n and "V0" in n for n in result.notes)
    line = refusal("vllm", "mlp-speculator", DecodeConfig(k=4), model=folder)
    assert "at most 3 tokens (n_predict)" in line
    assert "no MLP speculator" in refusal(
        "sglang", "mlp-speculator", DecodeConfig(k=2), model=folder
    )


def test_mlp_speculator_head_out_matches_the_familys_own_vllm_export(tmp_path, capsys):
    source = save_speculator(speculator(3, tie=True), tmp_path / "spec", dtype=None)
    out = tmp_path / "out"
    argv = ["export", "--engine", "vllm", "--method", "mlp-speculator", "--k", "2"]
    assert main([*argv, "--speculator", str(source), "--head-out", str(out)]) == 0
    spec = json.loads(capsys.readouterr().out)
    family = speculator_export_vllm(read_speculator(str(source)), tmp_path / "family", 2)
    assert spec == {**family.speculative_config, "model": str(out)}
    before, after = read_speculator(str(source)), read_speculator(str(out))
    assert after.config == before.config
    for name, value in before.weights().items():
        assert torch.equal(after.weights()[name], value), name
    with pytest.raises(SpecdecError, match="at most 3 tokens"):
        export_for_method("vllm", "mlp-speculator", str(source), tmp_path / "k4", DecodeConfig(k=4))
    assert not (tmp_path / "k4").exists()


# --- native MTP --------------------------------------------------------------------------------

MTP_CONFIGS = {
    "deepseek": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
                 "num_nextn_predict_layers": 1},
    "glm": {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
            "num_nextn_predict_layers": 1},
    "qwen3-next": {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
                   "num_nextn_predict_layers": 1},
    "qwen3.5": {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                "text_config": {"mtp_num_hidden_layers": 1}},
    "qwen3.5-text": {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
                     "mtp_num_hidden_layers": 1},
    "mimo": {"architectures": ["MiMoForCausalLM"], "model_type": "mimo",
             "num_nextn_predict_layers": 1},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "deepseek-v2": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2"},
}  # fmt: skip


def vllm_mtp_model_type(config: dict) -> str | None:
    """vLLM's SpeculativeConfig.hf_config_override for these families (None: not an MTP model)."""
    arch, model_type = config["architectures"][0], config["model_type"]
    if model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa"):
        return "deepseek_mtp"
    if arch == "MiMoForCausalLM":
        return "mimo_mtp"
    if arch == "Glm4MoeForCausalLM":
        return "glm4_moe_mtp"
    if model_type == "qwen3_next":
        return "qwen3_next_mtp"
    if model_type in ("qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"):
        return "qwen3_5_mtp"
    return None


def sglang_mtp_draft(config: dict) -> str | None:
    """SGLang's ModelConfig._config_draft_model for these families (None: unmapped)."""
    return {
        "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN",
        "Glm4MoeForCausalLM": "Glm4MoeForCausalLMNextN",
        "Qwen3NextForCausalLM": "Qwen3NextForCausalLMMTP",
        "Qwen3_5ForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
        "Qwen3_5MoeForConditionalGeneration": "Qwen3_5ForCausalLMMTP",
        "MiMoForCausalLM": "MiMoMTP",
    }.get(config["architectures"][0])


@pytest.mark.parametrize("name", list(MTP_CONFIGS))
def test_mtp_is_served_exactly_where_each_engines_loader_maps_the_target(name, tmp_path):
    config = MTP_CONFIGS[name]
    target = target_dir(tmp_path, name, **config)
    if vllm_mtp_model_type(config) is None:
        assert "no MTP layer" in refusal("vllm", "mtp", DecodeConfig(k=3), target)
    else:
        assert vllm("mtp", DecodeConfig(k=3), target) == {
            "method": "mtp",
            "num_speculative_tokens": 3,
        }
        assert vllm("mtp-tree", TREE, target)["num_speculative_tokens"] == 2  # the depth
    if sglang_mtp_draft(config) is None:
        line = refusal("sglang", "mtp", DecodeConfig(k=3), target)
        assert "no MTP layer" in line or "_config_draft_model" in line
    else:
        assert sglang("mtp", DecodeConfig(k=3), target) == {
            "--speculative-algorithm": "NEXTN",
            "--speculative-draft-model-path": target,
            "--speculative-num-steps": "3",
            "--speculative-eagle-topk": "1",
            "--speculative-num-draft-tokens": "4",
        }
        tree = sglang("mtp-tree", TREE, target)
        assert [
            tree[f"--speculative-{f}"] for f in ("num-steps", "eagle-topk", "num-draft-tokens")
        ] == ["2", "3", "6"]


def test_mtp_from_another_copy_names_it_and_a_target_without_the_layer_is_refused(tmp_path):
    target = target_dir(tmp_path, "ds", **MTP_CONFIGS["deepseek"])
    copy = target_dir(tmp_path, "copy", **MTP_CONFIGS["deepseek"])
    assert vllm("mtp", DecodeConfig(k=2), target, copy)["model"] == copy
    assert sglang("mtp", DecodeConfig(k=2), target, copy)["--speculative-draft-model-path"] == copy
    none = target_dir(
        tmp_path, "none", **{**MTP_CONFIGS["deepseek"], "num_nextn_predict_layers": 0}
    )
    assert "gives no MTP layer" in refusal("vllm", "mtp", DecodeConfig(k=2), none)
    assert "has no MTP layer" in refusal("sglang", "mtp", DecodeConfig(k=2), "embedded")
    auto = export("vllm", "mtp-tree", DecodeConfig(k=4), target)
    assert json.loads(auto.payload)["num_speculative_tokens"] == 4  # never null
    assert any("auto" in note for note in auto.notes)


# --- no equivalent -----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lookahead_and_layer_skipping_have_no_equivalent_and_say_the_nearest(engine):
    line = refusal(engine, "lookahead", DecodeConfig())
    assert "no lookahead decoding" in line and "--method ngram" in line
    for method in ("layer-skip", "swift"):
        line = refusal(engine, method, DecodeConfig())
        assert "layer skipping" in line and "assistant_early_exit" in line
    assert SERVING["lookahead"].vllm is None and SERVING["swift"].sglang is None


def test_cli_refuses_a_method_without_equivalent_in_one_line(capsys):
    assert main(["export", "--engine", "sglang", "--method", "lookahead", "--k", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no lookahead decoding" in err
    assert main(["export", "--engine", "vllm", "--method", "ngram", "--head-out", "x"]) == 2
    assert "drafts with none" in capsys.readouterr().err


# --- a classic draft of another tokenizer ------------------------------------------------------


def model_dir(tmp_path: Path, name: str, words: list[str], vocab_size: int | None = None) -> str:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    folder = tmp_path / name
    folder.mkdir()
    Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0])).save(
        str(folder / "tokenizer.json")
    )
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": vocab_size or len(words)}
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_draft_of_another_tokenizer_takes_vllms_intersection_and_sglang_refuses(tmp_path):
    words = ["<unk>", "a", "b", "c"]
    target = model_dir(tmp_path, "target", words)
    same = model_dir(tmp_path, "same", words)
    other = model_dir(tmp_path, "other", ["<unk>", "b", "a", "c"])  # same size, other ids
    k3 = DecodeConfig(k=3)
    assert vllm("classic", k3, target, same) == {
        "method": "draft_model",
        "num_speculative_tokens": 3,
        "model": same,
    }
    assert sglang("classic", k3, target, same)["--speculative-algorithm"] == "STANDALONE"
    result = export("vllm", "classic", k3, target, other)
    assert json.loads(result.payload) == {
        "method": "draft_model",
        "num_speculative_tokens": 3,
        "model": other,
        "use_heterogeneous_vocab": True,
    }
    assert any("token-level intersection" in note for note in result.notes)
    line = refusal("sglang", "classic", k3, target, other)
    assert "another tokenizer" in line and "23838" in line


def test_a_draft_vocabulary_size_alone_decides_where_no_tokenizer_file_is_here(tmp_path):
    target = target_dir(tmp_path, "t", architectures=["LlamaForCausalLM"], vocab_size=32)
    bigger = target_dir(tmp_path, "d", architectures=["LlamaForCausalLM"], vocab_size=48)
    equal = target_dir(tmp_path, "e", architectures=["LlamaForCausalLM"], vocab_size=32)
    k2 = DecodeConfig(k=2)
    assert vllm("classic", k2, target, bigger)["use_heterogeneous_vocab"] is True
    assert "use_heterogeneous_vocab" not in vllm("classic", k2, target, equal)
    assert "use_heterogeneous_vocab" not in vllm("classic", k2, "org/target", "org/draft")


def test_serve_commands_carry_the_new_families(tmp_path):
    target = target_dir(tmp_path, "mimo", **MTP_CONFIGS["mimo"])
    command = serve_command("sglang", "mtp-tree", TREE, target, "", "bfloat16", 2)
    words = command.argv
    assert words[words.index("--speculative-algorithm") + 1] == "NEXTN"
    assert words[-1] == "--enable-metrics" and "--tp" in words
    folder = str(save_speculator(speculator(3), tmp_path / "spec", dtype=None))
    vllm_cmd = serve_command("vllm", "mlp-speculator", DecodeConfig(k=3), target, folder, "auto", 2)
    assert any("unsharded" in note for note in vllm_cmd.notes)
