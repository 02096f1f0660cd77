"""Published EAGLE head configs in every publisher's checkpoint layout, shrunk to tiny shapes.

For each config in tests/fixtures/eagle-heads/heads (copied from SafeAILab/EAGLE, SpecForge,
AngelSlim and speculators; provenance in SOURCES.md), the test shrinks the sizes (hidden 32,
a target vocabulary of 32, a draft vocabulary of 16 where the head has a reduced one, the
target layers an fc reads onto a 4-layer target) while keeping every other field and quirk
(fc bias or not, head_dim * heads != hidden, the inverted vocab convention of speculators
research configs, the nested speculators config, EAGLE 3.1's norms and flags),
builds a state dict with exactly the keys that publisher's files hold (notes/KEY_LAYOUTS.md,
SPECFORGE_FORMAT.md, SPECULATORS_FORMAT.md),
saves it under the publisher's file name and dtype (notes/HUB_FILES.md), then loads it with
`load_head` and decodes on a tiny target: identical to `ar` at T=0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head
from specdec_core.run.runner import run
from tests.tiny import VOCAB, prompt, tiny_loaded

FIXTURES = Path(__file__).parent / "fixtures" / "eagle-heads" / "heads"
H, V, VD = 32, VOCAB, 16  # shrunk hidden size, target vocabulary, reduced draft vocabulary


def folder(name: str) -> str:
    return next(FIXTURES.glob(f"*/{name}")).parent.name


def layout_of(name: str) -> str:
    """The key layout (KEY_LAYOUTS.md section) the publisher of `name` saves."""
    if name.startswith("EAGLE-"):
        return "A"  # yuhuili EAGLE-1/2: pytorch_model.bin, fp32, with embed_tokens
    if name.startswith("yuhuili_EAGLE3"):
        return "B"  # official EAGLE-3: pytorch_model.bin, 16-bit, d2t / t2d
    if name.startswith("specforge_") or folder(name) == "specforge-eagle3":
        return "C"  # model.safetensors, no embed_tokens; EAGLE 3.1 adds fc_norm.{0,1,2}
    if name.startswith("angelslim_"):
        return "D"  # model.safetensors, keys as B
    return "E"  # speculators: model.safetensors, the midlayer as layers.0.*


CONFIGS = sorted(p.name for p in FIXTURES.glob("*/*.json"))


def read_config(name: str) -> dict:
    path = next(FIXTURES.glob(f"*/{name}"))
    config = json.loads(path.read_text())
    config.pop("_comment", None)
    return config


def shrink(config: dict) -> tuple[dict, dict]:
    """(config to save, the decoder layer's fields) with tiny sizes and every quirk kept."""
    config = json.loads(json.dumps(config))
    layer = config.get("transformer_layer_config") or config  # speculators nests it
    heads = layer["num_attention_heads"]
    groups = heads // (layer.get("num_key_value_heads") or heads)
    small = max(4, groups)
    head_dim = H // small
    if "head_dim" in layer and layer["head_dim"] * heads != layer["hidden_size"]:
        head_dim *= 2  # Qwen3-4B: heads x head_dim != hidden, kept so
    layer.update(hidden_size=H, intermediate_size=2 * H, num_attention_heads=small)
    if "num_key_value_heads" in layer:
        layer["num_key_value_heads"] = small // groups
    if "head_dim" in layer:
        layer["head_dim"] = head_dim
    draft = config.get("draft_vocab_size") or layer.get("draft_vocab_size")
    vocab = layer.get("target_vocab_size") or layer["vocab_size"]
    if "target_vocab_size" in layer:  # speculators research: vocab_size is the draft's
        layer.update(vocab_size=VD, target_vocab_size=V)
    else:
        layer["vocab_size"] = V
    if draft is not None:
        key = "draft_vocab_size"
        (config if key in config else layer)[key] = VD if draft < vocab else V
    if config.get("eagle_aux_hidden_state_layer_ids"):  # as many layers of the 4-layer target
        config["eagle_aux_hidden_state_layer_ids"] = list(
            range(len(config["eagle_aux_hidden_state_layer_ids"]))
        )
    return config, layer


def draft_size(config: dict, layer: dict) -> int:
    """The shrunk head's draft vocabulary (V when it drafts over the full vocabulary)."""
    if layer.get("target_vocab_size"):
        return VD
    return config.get("draft_vocab_size") or layer.get("draft_vocab_size") or V


def is_eagle3(name: str) -> bool:
    return folder(name.split("/")[-1]) != "eagle1"


def head_state(name: str, config: dict, layer: dict, layout: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(len(name))
    h, inter = H, layer["intermediate_size"]
    heads, kv = layer["num_attention_heads"], layer.get("num_key_value_heads") or 0
    kv = kv or heads
    hd = layer.get("head_dim") or h // heads

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.2

    if not is_eagle3(name):  # A: EAGLE-1/2
        p = "layers.0."
        state = {"embed_tokens.weight": w(V, h), "fc.weight": w(h, 2 * h)}
        if layer.get("bias", True):
            state["fc.bias"] = w(h)
        qkv_in = h
    else:
        p = "layers.0." if layout == "E" else "midlayer."
        fused = len(config.get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
        state = {"fc.weight": w(h, fused * h)}
        if config.get("fc_norm"):  # EAGLE 3.1: one norm per target layer, not identity
            state.update({f"fc_norm.{i}.weight": 1 + w(h) for i in range(fused)})
        if config.get("norm_before_fc"):  # speculators: one norm over the concatenation
            state["input_norm.weight"] = 1 + w(fused * h)
        qkv_in = 2 * h
        for norm in ("input_layernorm", "hidden_norm"):
            state[p + norm + ".weight"] = 1 + w(h)
        state["norm.weight"] = 1 + w(h)
        draft = draft_size(config, layer)
        state["lm_head.weight"] = w(draft, h) * 10
        if layout == "E":
            state["embed_tokens.weight"] = w(V, h)
        if draft != V or layout != "E":  # speculators writes the maps only for a reduced vocab
            ids = torch.arange(0, 2 * draft, 2) if draft != V else torch.arange(V)
            state["d2t"] = ids - torch.arange(draft)
            state["t2d"] = torch.zeros(V, dtype=torch.bool)
            state["t2d"][ids] = True
    attn = p + "self_attn."
    state.update({
        attn + "q_proj.weight": w(heads * hd, qkv_in),
        attn + "k_proj.weight": w(kv * hd, qkv_in),
        attn + "v_proj.weight": w(kv * hd, qkv_in),
        attn + "o_proj.weight": w(h, heads * hd),
        p + "mlp.gate_proj.weight": w(inter, h),
        p + "mlp.up_proj.weight": w(inter, h),
        p + "mlp.down_proj.weight": w(h, inter),
        p + "post_attention_layernorm.weight": 1 + w(h),
    })  # fmt: skip
    if layer.get("qkv_bias") or layer.get("attention_bias"):
        for name_ in ("q_proj", "k_proj", "v_proj"):
            state[attn + name_ + ".bias"] = w(state[attn + name_ + ".weight"].shape[0])
    if layer.get("attention_bias"):
        state[attn + "o_proj.bias"] = w(h)
    return state


def write_head(directory: Path, config: dict, state: dict, layout: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    if layout in ("A", "B"):
        dtype = torch.float32 if layout == "A" else torch.float16
        cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
        torch.save(cast, directory / "pytorch_model.bin")
    else:
        cast = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in state.items()}
        save_file(
            {k: v.contiguous() for k, v in cast.items()}, str(directory / "model.safetensors")
        )
    return directory


def published(name: str, directory: Path, mutate=None) -> tuple[Path, dict, dict]:
    layout = layout_of(name)
    config, layer = shrink(read_config(name))
    state = head_state(name, config, layer, layout)
    if mutate is not None:
        mutate(config, layer, state)
    return write_head(directory, config, state, layout), config, layer


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=4)  # hidden 32, vocabulary 32; 4 layers for EAGLE-3


def test_every_published_config_is_covered():
    assert len(CONFIGS) == 28
    assert {layout_of(name) for name in CONFIGS} == {"A", "B", "C", "D", "E"}


@pytest.mark.parametrize("name", CONFIGS)
def test_published_head_loads_and_decodes_like_ar(target, tmp_path, name):
    path, config, layer = published(name, tmp_path / "head")
    head = load_head(str(path), target, torch.float32)
    assert head.kind == ("eagle3" if is_eagle3(name) else "eagle1")
    if head.kind == "eagle1":
        assert (head.fc.bias is not None) == layer.get("bias", True)
    else:
        reduced = draft_size(config, layer)
        assert head.draft_vocab == reduced
        if reduced < V:  # the draft vocabulary is the ids the file's d2t names
            assert head.draft_ids().tolist() == list(range(0, 2 * VD, 2))
    assert head.config.head_dim == (layer.get("head_dim") or H // layer["num_attention_heads"])
    ids = prompt(6)
    for method, config_ in (
        ("eagle", DecodeConfig(max_new_tokens=24, k=3)),
        ("eagle2", DecodeConfig(max_new_tokens=24, tree_depth=3, tree_topk=2, tree_tokens=6)),
    ):
        reference = run(target, "ar", ids, config_)
        summary = run(target, method, ids, config_, head)
        assert summary.token_ids == reference.token_ids, method


@pytest.mark.parametrize(
    "name", ["EAGLE-LLaMA3-Instruct-8B.config.json", "specforge_qwen3-4b-eagle3.json"]
)
def test_head_of_another_hidden_size_is_refused_naming_both(tmp_path, name):
    path, _, _ = published(name, tmp_path / "head")
    wide = tiny_loaded(seed=1)
    wide.model.config.hidden_size = 48  # the check reads the target's config
    with pytest.raises(SpecdecError, match=r"hidden size 32 but the target has 48") as error:
        load_head(str(path), wide)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "name",
    [
        "EAGLE-Vicuna-7B-v1.3.config.json",
        "yuhuili_EAGLE3-LLaMA3.1-Instruct-8B.traineagle3-config.json",
        "speculators_eagle3_config.SYNTHESIZED.json",
        "speculators-research_qwen3config.json",
    ],
)
def test_head_of_another_vocabulary_is_refused_naming_both(target, tmp_path, name):
    def wider_vocabulary(config, layer, state):
        for key in ("embed_tokens.weight",):
            state.pop(key, None)
        if "t2d" in state:
            state["t2d"] = torch.cat([state["t2d"], torch.zeros(8, dtype=torch.bool)])
        else:
            layer["vocab_size"] = V + 8

    path, _, _ = published(name, tmp_path / "head", wider_vocabulary)
    with pytest.raises(SpecdecError, match=rf"vocabulary of {V + 8} tokens but the target has {V}"):
        load_head(str(path), target)


def test_modelopt_export_without_t2d_loads_with_the_draft_vocabulary_of_d2t(target, tmp_path):
    name = "yuhuili_EAGLE3-LLaMA3.1-Instruct-8B.traineagle3-config.json"
    path, _, _ = published(name, tmp_path / "head", lambda config, layer, state: state.pop("t2d"))
    head = load_head(str(path), target, torch.float32)
    assert head.draft_ids().tolist() == list(range(0, 2 * VD, 2))
    config = DecodeConfig(max_new_tokens=20, k=3)
    ids = prompt(5)
    assert (
        run(target, "eagle", ids, config, head).token_ids
        == run(target, "ar", ids, config).token_ids
    )


@pytest.mark.parametrize(
    "declared, weights",
    [
        ("specforge_llama3-8B-eagle3.json", "EAGLE-LLaMA3-Instruct-8B.config.json"),
        ("speculators_eagle3_config.SYNTHESIZED.json", "EAGLE-Vicuna-7B-v1.3.config.json"),
    ],
)
def test_a_config_declaring_one_layout_over_weights_in_the_other_is_refused(
    target, tmp_path, declared, weights
):
    path, _, _ = published(weights, tmp_path / "head")
    config, _ = shrink(read_config(declared))
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        SpecdecError, match="declares an EAGLE-3 head but its weights are in the EAGLE-1/2"
    ):
        load_head(str(path), target)


def test_an_eagle1_declaration_over_eagle3_weights_is_refused(target, tmp_path):
    name = "specforge_llama3-8B-eagle3.json"
    path, config, _ = published(name, tmp_path / "head")
    config["architectures"] = ["EagleLlamaForCausalLM"]  # vLLM's EAGLE-1 architecture name
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        SpecdecError, match="declares an EAGLE-1/2 head but its weights are in the EAGLE-3"
    ):
        load_head(str(path), target)
