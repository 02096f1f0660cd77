"""`specdec export --head-out`: heads written as vLLM and SGLang load them as they stand.

Every exported file is checked against what the engines' loaders accept, as the fixture notes
give it (tests/fixtures/eagle-heads/notes/ENGINE_LOADERS.md "Export recipes"): the weight names
and shapes of KEY_LAYOUTS.md §A (EAGLE-1, as its rows spell them) and of the DERIVED key lists
of SpecForge's EAGLE 3.1 and speculators' heads (EAGLE-3), their dtypes, the config keys of
the published configs and the recipe's values. Each export is then loaded back here
(`load_head`, which reads SGLang's token map) and drafts exactly as the head it came from: the
same target-vocabulary logits, the same tokens and the same acceptance on a tiny target.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head, read_head, save_head
from specdec_core.heads.eagle.layouts import TOKEN_MAP, flat_config
from specdec_core.resources import resource_path
from specdec_core.run.runner import run
from specdec_core.serving.head_export import export_head
from specdec_core.serving.serve import serve_command
from tests.eagle_tiny import tiny_head
from tests.test_eagle_head_fixtures import CONFIGS, H, is_eagle3, layout_of, published
from tests.tiny import prompt, tiny_loaded

NOTES = Path(__file__).parent / "fixtures" / "eagle-heads" / "notes"
HEADS = Path(__file__).parent / "fixtures" / "eagle-heads" / "heads"

# KEY_LAYOUTS.md §A: an EAGLE-1 head's weights, as the rows spell them ({i}: decoder layer i;
# layer 0 has no input_layernorm; "a / b" is one row for two weights)
EAGLE1 = {
    "fc.weight": "[h, 2h]",
    "fc.bias": "[h]",
    "layers.{i}.self_attn.q_proj.weight": "[nh*hd, h]",
    "layers.{i}.self_attn.k_proj.weight": "[nkv*hd, h]",
    "layers.{i}.self_attn.v_proj.weight": "[nkv*hd, h]",
    "layers.{i}.self_attn.o_proj.weight": "[h, nh*hd]",
    "layers.{i}.mlp.gate_proj.weight / up_proj.weight": "[I, h]",
    "layers.{i}.mlp.down_proj.weight": "[h, I]",
    "layers.{i}.post_attention_layernorm.weight": "[h]",
    "layers.{i}.input_layernorm.weight": "[h]",
}
# an EAGLE-3 head's weights (KEY_LAYOUTS.md §B; n: the target layers fc reads), checked against
# the DERIVED key lists below; EAGLE 3.1 adds fc_norm.{j}, speculators' norm_before_fc input_norm
EAGLE3 = {
    "fc.weight": "[h, n*h]",
    "midlayer.self_attn.q_proj.weight": "[nh*hd, 2h]",
    "midlayer.self_attn.k_proj.weight": "[nkv*hd, 2h]",
    "midlayer.self_attn.v_proj.weight": "[nkv*hd, 2h]",
    "midlayer.self_attn.o_proj.weight": "[h, nh*hd]",
    "midlayer.mlp.gate_proj.weight": "[I, h]",
    "midlayer.mlp.up_proj.weight": "[I, h]",
    "midlayer.mlp.down_proj.weight": "[h, I]",
    "midlayer.input_layernorm.weight": "[h]",
    "midlayer.hidden_norm.weight": "[h]",
    "midlayer.post_attention_layernorm.weight": "[h]",
    "norm.weight": "[h]",
    "lm_head.weight": "[Vd, h]",
    "d2t": "[Vd]",
    "t2d": "[V]",
}
FC_NORM, INPUT_NORM = {"fc_norm.{j}.weight": "[h]"}, {"input_norm.weight": "[n*h]"}
INDEX_DTYPES = {"d2t": torch.int64, "t2d": torch.bool}  # every other weight is a float

# ENGINE_LOADERS.md "Export recipes": (layout, engine) -> config values the loader needs
RECIPES = {
    ("eagle3", "vllm"): {"architectures": ["LlamaForCausalLMEagle3"], "bias": False},
    ("eagle3", "sglang"): {"architectures": ["LlamaForCausalLMEagle3"], "bias": False},
    ("eagle1", "sglang"): {"architectures": ["LlamaForCausalLMEagle"], "bias": True},
    ("eagle1", "vllm"): {"architectures": ["LlamaForCausalLM"], "bias": False},
}
# a published config to match key for key, less the target's attention pattern (a head's own
# layer attends fully; eagle/head.py drops these)
REFERENCE = {
    "eagle1": "EAGLE-LLaMA3-Instruct-8B.config.json",
    "eagle3": "qwen3-30B-A3B-eagle3.1.json",
}
TARGET_ONLY = {"sliding_window", "use_sliding_window", "max_window_layers"}


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=4)  # hidden 32, vocabulary 32; 4 layers for EAGLE-3


def shape(text: str, sizes: dict[str, int]) -> tuple[int, ...]:
    """ "[nh*hd, 2h]" in `sizes` -> (nh * hd, 2 * h)."""
    dims = []
    for term in text.strip("[]").split(","):
        value = 1
        for factor in term.strip().split("*"):
            count, name = re.fullmatch(r"(\d*)(\w*?)", factor).groups()
            value *= int(count or 1) * (sizes[name] if name else 1)
        dims.append(value)
    return tuple(dims)


def sizes_of(config: dict) -> dict[str, int]:
    """KEY_LAYOUTS.md's symbols from a (flat) head config."""
    heads = config["num_attention_heads"]
    return {
        "h": config["hidden_size"],
        "I": config["intermediate_size"],
        "nh": heads,
        "nkv": config.get("num_key_value_heads") or heads,
        "hd": config.get("head_dim") or config["hidden_size"] // heads,
        "V": config["vocab_size"],
        "Vd": config.get("draft_vocab_size") or config["vocab_size"],
        "n": len(config.get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0]),
    }


def expected_weights(config: dict, kind: str, engine: str) -> dict[str, tuple[int, ...]]:
    """The weights an export for `engine` holds, by name, with their shapes, from its config."""
    sizes, rows = sizes_of(config), {}
    if kind == "eagle3":
        rows.update(EAGLE3)
        if config.get("fc_norm"):
            rows.update(
                {key.format(j=j): s for key, s in FC_NORM.items() for j in range(sizes["n"])}
            )
        if config.get("norm_before_fc"):
            rows.update(INPUT_NORM)
        return {key: shape(s, sizes) for key, s in rows.items()}
    for key, s in EAGLE1.items():
        if key == "fc.bias" and engine == "vllm":
            continue  # vLLM's EAGLE-1 fc has no bias
        first, _, second = key.partition(" / ")  # "a.gate_proj.weight / up_proj.weight"
        names = [first, first.rsplit(".", 2)[0] + "." + second] if second else [first]
        for i in range(config["num_hidden_layers"]):
            for name in names:
                if i == 0 and "input_layernorm" in name:
                    continue
                rows[name.format(i=i)] = shape(s, sizes)
    return rows


def derived(name: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """A DERIVED key list: name -> (shape, dtype as written)."""
    rows = {}
    for line in next(HEADS.glob(f"*/{name}")).read_text().splitlines():
        if line and not line.startswith("#"):
            key, dims, dtype = line.split("\t")[:3]
            rows[key] = (tuple(json.loads(dims)), dtype)
    return rows


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


def check_export(directory: Path, engine: str, head, dtype: torch.dtype) -> dict:
    """Every file of an export against the notes; `head` is what was exported, read as stored."""
    kind, reduced = head.kind, bool(head.draft_vocab)
    token_map = kind == "eagle1" and engine == "sglang" and reduced
    files = {"config.json", "model.safetensors"} | ({TOKEN_MAP} if token_map else set())
    assert {path.name for path in directory.iterdir()} == files
    config = json.loads((directory / "config.json").read_text())
    for key, value in RECIPES[kind, engine].items():
        assert config[key] == value, key
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is False
    assert config["hidden_size"] == head.config.hidden_size
    assert config["vocab_size"] == head.config.vocab_size  # the target's
    assert config["head_dim"] == head.config.head_dim and "rope_theta" in config
    assert config["torch_dtype"] == str(dtype).removeprefix("torch.")
    reference = json.loads(next(HEADS.glob(f"*/{REFERENCE[kind]}")).read_text())
    assert set(reference) - TARGET_ONLY <= set(config)
    if kind == "eagle3":
        assert config["num_hidden_layers"] == 1
        assert config["draft_vocab_size"] == head.draft_vocab
        variant = head.variant  # every flag written out, as the head reads it
        assert (config["fc_norm"], config["norm_output"]) == (variant.fc_norm, variant.norm_output)
        assert config["norm_before_fc"] == variant.norm_before_fc
        assert config["norm_before_residual"] == variant.norm_before_residual
        aux = list(head.variant.aux_layers)
        if aux:  # both places: vLLM reads eagle_config, the others the top level
            assert config["eagle_aux_hidden_state_layer_ids"] == aux
            assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == aux
    else:
        assert "draft_vocab_size" not in config  # SGLang takes it from the token map
    weights = read_weights(directory)
    expected = expected_weights(config, kind, engine)
    assert set(weights) == set(expected)
    for key, tensor in weights.items():
        assert tuple(tensor.shape) == expected[key], key
        assert tensor.dtype == INDEX_DTYPES.get(key, dtype), key
    if token_map:
        ids = torch.load(directory / TOKEN_MAP, weights_only=True)
        assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
        assert ids == head.draft_ids().tolist()
    return config


def drafts(head, target) -> tuple[torch.Tensor, tuple]:
    """A head's target-vocabulary logits for fixed features and its greedy decode's record."""
    generator = torch.Generator().manual_seed(0)
    width = head.fc.weight.shape[1] if head.kind == "eagle3" else H
    features = torch.randn(1, 5, width, generator=generator)
    tokens, positions = torch.tensor([[4, 8, 15, 16, 23]]), torch.arange(5)[None]
    with torch.no_grad():
        out = head.step(features, tokens, positions, None, head.new_cache())
        logits = head.to_target(out.logits)
    summary = run(target, "eagle", prompt(6), DecodeConfig(max_new_tokens=16, k=3), head)
    return logits, (summary.token_ids, summary.accepted_per_position, summary.steps)


def assert_same_drafts(source: str, exported: Path, target) -> None:
    original = load_head(source, target, torch.float32)
    again = load_head(str(exported), target, torch.float32)
    assert (again.kind, again.draft_vocab) == (original.kind, original.draft_vocab)
    logits, record = drafts(original, target)
    logits_again, record_again = drafts(again, target)
    assert torch.equal(logits, logits_again)
    assert torch.equal(logits.argmax(-1), logits_again.argmax(-1))
    assert record == record_again


def test_the_key_tables_are_the_fixture_notes():
    text = (NOTES / "KEY_LAYOUTS.md").read_text()
    for key, dims in EAGLE1.items():
        assert f"| {key} | {dims} |" in text
    specforge = json.loads(next(HEADS.glob("*/qwen3-30B-A3B-eagle3.1.json")).read_text())
    speculators = flat_config(
        json.loads(next(HEADS.glob("*/config.speculators-*.issue1065.json")).read_text())
    )
    for config, keys in (
        (specforge, derived("qwen3-30B-A3B-eagle3.1.keys.DERIVED.txt")),
        (speculators, derived("config.speculators-0.8.0.dev0.issue1065.keys.DERIVED.txt")),
    ):
        keys.pop("embed_tokens.weight", None)  # optional on load; no export writes it
        named = {k.replace("layers.0.", "midlayer.", 1): v for k, v in keys.items()}
        expected = expected_weights(config, "eagle3", "vllm")
        assert expected == {key: dims for key, (dims, _) in named.items()}
        assert {k: d for k, (_, d) in named.items() if k in INDEX_DTYPES} == {
            "d2t": "int64",
            "t2d": "bool",
        }


def test_bundled_head_exports_for_sglang_with_its_token_map(tmp_path):
    bundled = str(resource_path("head"))
    result = export_head("sglang", "embedded", tmp_path / "sglang")
    stored = read_head(bundled)
    assert stored.draft_vocab == 8192 and stored.fc.weight.dtype == torch.float16
    check_export(result.directory, "sglang", stored, torch.float16)
    assert result.token_map == tmp_path / "sglang" / TOKEN_MAP
    again = read_head(str(result.directory))  # the same head: weights, d2t and t2d
    original = stored.state_dict()
    assert again.state_dict().keys() == original.keys()
    for key, value in again.state_dict().items():
        assert torch.equal(value, original[key]), key
    command = serve_command("sglang", "eagle", DecodeConfig(k=4), "embedded", str(result.directory))
    words = shlex.split(command.command)
    assert words[words.index("--speculative-draft-model-path") + 1] == str(result.directory)
    assert words[words.index("--speculative-token-map") + 1] == str(result.token_map)
    assert words[words.index("--speculative-algorithm") + 1] == "EAGLE"


def test_bundled_head_is_refused_for_vllm_saying_what_cannot_be_carried(tmp_path):
    with pytest.raises(SpecdecError) as error:
        export_head("vllm", "embedded", tmp_path / "vllm")
    message = str(error.value)
    assert "\n" not in message
    assert "an fc bias and a draft vocabulary of 8192 tokens" in message
    assert "--engine sglang" in message and "specdec train eagle --arch eagle3" in message
    assert not (tmp_path / "vllm").exists()


HEADS_HERE = {  # (layout, reduced draft vocabulary, fc bias) of heads trained here
    "eagle1-reduced": ("eagle1", 12, "trained"),
    "eagle1-full-no-bias": ("eagle1", 0, None),
    "eagle1-full-zero-bias": ("eagle1", 0, "zero"),
    "eagle3-reduced": ("eagle3", 12, None),
}


def head_here(target, name: str, directory: Path) -> str:
    kind, draft_vocab, bias = HEADS_HERE[name]
    head = tiny_head(target, kind, draft_vocab)
    if kind == "eagle1" and bias is None:
        head.fc.bias = None
    elif bias == "zero":
        head.fc.bias.data.zero_()
    return str(save_head(head, directory))  # float16, as heads trained here are saved


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("name", list(HEADS_HERE))
def test_head_trained_here_exports_and_drafts_identically_after_reloading(
    target, tmp_path, name, engine
):
    source = head_here(target, name, tmp_path / "head")
    kind, draft_vocab, bias = HEADS_HERE[name]
    if engine == "vllm" and kind == "eagle1" and (draft_vocab or bias == "trained"):
        with pytest.raises(SpecdecError, match="vLLM cannot serve this EAGLE-1 head"):
            export_head(engine, source, tmp_path / "out")
        return
    result = export_head(engine, source, tmp_path / "out")
    check_export(result.directory, engine, read_head(source), torch.float16)
    if kind == "eagle1" and engine == "sglang" and bias is None:
        assert any("fc.bias is written as zeros" in note for note in result.notes)
        assert not read_weights(result.directory)["fc.bias"].any()
    assert_same_drafts(source, result.directory, target)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("name", CONFIGS)
def test_published_head_exports_and_drafts_identically_after_reloading(
    target, tmp_path, name, engine
):
    path, config, layer = published(name, tmp_path / "head")
    if engine == "vllm" and not is_eagle3(name) and layer.get("bias", True):
        with pytest.raises(SpecdecError, match="an fc bias"):
            export_head(engine, str(path), tmp_path / "out")
        return
    dtype = {"A": torch.float32, "B": torch.float16}.get(layout_of(name), torch.bfloat16)
    result = export_head(engine, str(path), tmp_path / "out")
    check_export(result.directory, engine, read_head(str(path)), dtype)
    assert_same_drafts(str(path), result.directory, target)


def test_an_exported_directory_exports_again_for_the_other_engine(target, tmp_path):
    source = head_here(target, "eagle3-reduced", tmp_path / "head")
    first = export_head("vllm", source, tmp_path / "vllm")
    second = export_head("sglang", str(first.directory), tmp_path / "sglang")
    assert read_weights(first.directory).keys() == read_weights(second.directory).keys()
    assert_same_drafts(source, second.directory, target)


def test_a_folder_holding_other_files_is_refused_and_a_stale_token_map_removed(target, tmp_path):
    eagle1 = head_here(target, "eagle1-reduced", tmp_path / "e1")
    eagle3 = head_here(target, "eagle3-reduced", tmp_path / "e3")
    with pytest.raises(SpecdecError, match="the head's own directory"):
        export_head("sglang", eagle1, eagle1)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(SpecdecError, match="already holds pytorch_model.bin; give a new or empty"):
        export_head("sglang", eagle1, tmp_path / "other")
    out = tmp_path / "out"
    assert export_head("sglang", eagle1, out).token_map is not None
    export_head("sglang", eagle3, out)  # EAGLE-3: no token map; the EAGLE-1 one must go
    assert not (out / TOKEN_MAP).exists()


def test_a_token_map_that_does_not_fit_the_head_is_refused_naming_the_file(target, tmp_path):
    source = head_here(target, "eagle1-reduced", tmp_path / "head")
    out = export_head("sglang", source, tmp_path / "out").directory
    torch.save([0, 1, 99], out / TOKEN_MAP)  # 99: beyond the 32-token vocabulary
    with pytest.raises(SpecdecError, match=rf"{TOKEN_MAP} is not a token map .* below 32"):
        load_head(str(out), target)
    torch.save([3, 1, 2], Path(source, TOKEN_MAP))  # fits, but names other ids than its d2t
    with pytest.raises(SpecdecError, match="different draft vocabularies"):
        load_head(source, target)


def test_cli_writes_the_head_and_prints_the_command_that_serves_it(target, tmp_path, capsys):
    source = head_here(target, "eagle1-reduced", tmp_path / "head")
    out = tmp_path / "for-sglang"
    argv = ["export", "--engine", "sglang", "--method", "eagle", "--k", "3", "--serve"]
    assert main([*argv, "--head", source, "--head-out", str(out), "--target", "org/t"]) == 0
    captured = capsys.readouterr()
    words = shlex.split(captured.out)
    assert words[words.index("--speculative-draft-model-path") + 1] == str(out.resolve())
    assert words[words.index("--speculative-token-map") + 1] == str(out.resolve() / TOKEN_MAP)
    assert f"# wrote config.json, model.safetensors, {TOKEN_MAP} to {out}" in captured.err
    eagle3 = head_here(target, "eagle3-reduced", tmp_path / "e3")
    argv = ["export", "--engine", "vllm", "--method", "eagle", "--k", "3", "--json"]
    assert main([*argv, "--head", eagle3, "--head-out", str(tmp_path / "for-vllm")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert json.loads(record["payload"]) == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": str((tmp_path / "for-vllm").resolve()),
    }
    assert record["head"]["files"] == ["config.json", "model.safetensors"]
    assert main([*argv, "--head", "embedded", "--head-out", str(tmp_path / "no")]) == 2
    assert "vLLM cannot serve this EAGLE-1 head" in capsys.readouterr().err
    assert main(["export", "--engine", "vllm", "--method", "ngram", "--head-out", "x"]) == 2
