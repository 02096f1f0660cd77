"""Published EAGLE-3 layouts draft with their publisher's arithmetic, not just load.

Each test takes a fixture config (tests/fixtures/eagle-heads, shrunk by
tests/test_eagle_head_fixtures.py to hidden 32 over a 4-layer target), writes a random head
in its publisher's files, and writes the same weights again in the official EAGLE-3 layout
(yuhuili/EAGLE3-*: `midlayer.*`, d2t / t2d, pytorch_model.bin) with none of the publisher's
flags: the twin. A layout that only renames must draft exactly as its twin. A layout that
changes the arithmetic must draft as its twin does when the change is made by hand around it,
with the norms written out here from the publishers' code (SpecForge llama3_eagle.py,
speculators models/eagle3/core.py and model_definitions.py; notes/SPECFORGE_FORMAT.md,
SPECULATORS_FORMAT.md), and differently from the twin left alone: the norm weights are not
the identity, so a norm skipped or put elsewhere shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from specdec_core.decoding.attention_mask import causal
from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.eagle import feature_layers
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head, save_head
from specdec_core.heads.eagle.head import Eagle3Variant, EagleHead
from specdec_core.heads.eagle.layouts import flat_config
from specdec_core.run.runner import run
from tests.test_eagle_head_fixtures import H, V, head_state, layout_of, read_config, shrink
from tests.test_eagle_head_fixtures import write_head as write_published
from tests.tiny import prompt, tiny_loaded

TARGET_LAYERS = 4
EPS = 1e-6  # rms_norm_eps of every config used here but the synthesized one
FLAGS = ("fc_norm", "norm_before_fc", "norm_before_residual", "norm_output")
SPECFORGE_31 = "qwen3-30B-A3B-eagle3.1.json"
SPECULATORS = "speculators_eagle3_config.SYNTHESIZED.json"  # RedHatAI-style, converted
SPECULATORS_TRAINER = "config.speculators-0.8.0.dev0.issue1065.json"  # 4 layers, input_norm

Edit = Callable[[dict, dict], None]  # (config, its decoder layer's fields) -> None, in place
Transform = Callable[[torch.Tensor], torch.Tensor]


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=TARGET_LAYERS)


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """RMSNorm as every publisher writes it."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def publish(name: str, directory: Path, edit: Edit | None = None) -> tuple[dict, dict]:
    """Fixture config `name` shrunk (and edited), a random head in its publisher's files;
    returns the config and the weights, as 16-bit values so that every file holds them."""
    config, layer = shrink(read_config(name))
    if edit is not None:
        edit(config, layer)
    state = head_state(name, config, layer, layout_of(name))
    state = {k: v.bfloat16().float() if v.is_floating_point() else v for k, v in state.items()}
    write_published(directory, config, state, layout_of(name))
    return config, state


def official_twin(
    directory: Path, config: dict, state: dict[str, torch.Tensor], keep: tuple[str, ...] = ()
) -> Path:
    """The same weights in the official layout, without the publisher's flags (but those in
    `keep`) and the weights only those flags use; the target layers fc reads stay."""
    directory.mkdir(parents=True)
    plain = {**flat_config(config), **dict.fromkeys(set(FLAGS) - set(keep), False)}
    plain["architectures"] = ["LlamaForCausalLMEagle3"]
    weights = {
        key.replace("layers.0.", "midlayer.", 1): value
        for key, value in state.items()
        if not key.startswith(("fc_norm.", "input_norm."))
    }
    (directory / "config.json").write_text(json.dumps(plain))
    torch.save(weights, directory / "pytorch_model.bin")
    return directory


def heads(name: str, tmp_path: Path, target, edit: Edit | None = None, keep=()):
    """(the published head, its official twin, the weights) loaded in float32."""
    config, state = publish(name, tmp_path / "published", edit)
    twin = official_twin(tmp_path / "official", config, state, keep)
    published = load_head(str(tmp_path / "published"), target, torch.float32)
    return published, load_head(str(twin), target, torch.float32), state


def first_inputs(fused: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[1, 5, fused * h] target features and [1, 5] tokens for a head's first pass."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, 5, fused * H, generator=g) * 3, torch.randint(3, V, (1, 5), generator=g)


def drive(
    head: EagleHead,
    prefuse: Transform = lambda features: features,
    feedback: Transform = lambda hidden: hidden,
    steps: int = 3,
) -> torch.Tensor:
    """[5 + steps, Vd] logits: a pass over 5 positions of target features (through
    `prefuse`), then `steps` draft steps, each fed the last hidden state (through `feedback`)
    as the drafters feed it."""
    features, tokens = first_inputs(head.variant.fused)
    cache = head.new_cache()
    with torch.no_grad():
        out = head.step(prefuse(features), tokens, torch.arange(5)[None], None, cache)
        logits = [out.logits[0]]
        for i in range(steps):
            token, position = torch.tensor([[3 + 2 * i]]), torch.tensor([[5 + i]])
            out = head.step(feedback(out.hidden[:, -1:]), token, position, None, cache)
            logits.append(out.logits[0])
    return torch.cat(logits)


def per_layer_norms(state: dict[str, torch.Tensor]) -> Transform:
    """SpecForge / speculators `fc_norm`: each target layer's chunk normed by its own weight."""
    weights = [state[f"fc_norm.{i}.weight"] for i in range(3)]
    return lambda f: torch.cat(
        [rms(x, w) for x, w in zip(f.chunk(3, -1), weights, strict=True)], -1
    )


def final_norm(state: dict[str, torch.Tensor]) -> Transform:
    """`norm_output`: the state fed back is the head's final norm of its output."""
    return lambda hidden: rms(hidden, state["norm.weight"])


def same_drafts(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b)
    assert a.argmax(-1).tolist() == b.argmax(-1).tolist()


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    return not torch.allclose(a, b, atol=1e-3)


def decode_stats(target, head) -> tuple:
    """Greedy tokens and where drafts were accepted: equal stats mean equal drafts."""
    summary = run(target, "eagle", prompt(6), DecodeConfig(max_new_tokens=24, k=3), head)
    return summary.token_ids, summary.steps, summary.accepted_per_position


# -- layouts that only rename: the same drafts as the official layout ----------------------


@pytest.mark.parametrize(
    "name, norm_output",
    [
        ("specforge_llama3-8B-eagle3.json", None),
        ("qwen3-4b-eagle3.json", None),  # heads x head_dim != hidden
        ("gemma3-1b-eagle3.json", False),  # norm_output written out as SpecForge now asks
        ("phi4-mini-eagle3.json", None),  # model_type phi3, tie_word_embeddings true
    ],
)
def test_specforge_eagle3_head_drafts_as_the_official_layout(tmp_path, target, name, norm_output):
    def written(config, layer):
        if norm_output is not None:
            config["norm_output"] = norm_output

    published, twin, _ = heads(name, tmp_path, target, written)
    assert published.variant == Eagle3Variant()
    same_drafts(drive(published), drive(twin))
    assert decode_stats(target, published) == decode_stats(target, twin)


def test_speculators_head_without_norm_before_residual_drafts_as_the_official_layout(
    tmp_path, target
):
    def residual_before_norm(config, layer):
        config["norm_before_residual"] = False

    published, twin, state = heads(SPECULATORS, tmp_path, target, residual_before_norm)
    assert "layers.0.hidden_norm.weight" in state and "embed_tokens.weight" in state
    assert "transformer_layer_config" in read_config(SPECULATORS)  # nested config
    same_drafts(drive(published), drive(twin))
    assert decode_stats(target, published) == decode_stats(target, twin)


# -- SpecForge EAGLE 3.1: fc_norm and norm_output -------------------------------------------


def test_eagle31_fc_norm_normalises_each_target_layer_before_fc(tmp_path, target):
    def fc_norm_only(config, layer):
        config["norm_output"] = False

    published, twin, state = heads(SPECFORGE_31, tmp_path, target, fc_norm_only)
    assert published.variant == Eagle3Variant(fc_norm=True)
    by_hand = drive(twin, prefuse=per_layer_norms(state))
    same_drafts(drive(published), by_hand)
    assert differs(drive(published), drive(twin))  # the norms are not the identity
    one_norm = torch.cat([state[f"fc_norm.{i}.weight"] for i in range(3)])
    over_all = drive(twin, prefuse=lambda f: rms(f, one_norm))  # one norm over the concatenation
    assert differs(drive(published), over_all)


def test_eagle31_norm_output_feeds_back_the_normed_state_and_drafts_from_it(tmp_path, target):
    def norm_output_only(config, layer):
        config["fc_norm"] = False

    published, twin, state = heads(SPECFORGE_31, tmp_path, target, norm_output_only)
    assert published.variant == Eagle3Variant(norm_output=True)
    same_drafts(drive(published), drive(twin, feedback=final_norm(state)))
    ours, official = drive(published), drive(twin)
    torch.testing.assert_close(ours[:5], official[:5])  # the first pass drafts from norm(h) too
    assert differs(ours[5:], official[5:])  # later steps see norm(h), not h


def test_eagle31_head_as_published_applies_both(tmp_path, target):
    published, twin, state = heads(SPECFORGE_31, tmp_path, target)
    assert published.variant == Eagle3Variant(fc_norm=True, norm_output=True)
    by_hand = drive(twin, prefuse=per_layer_norms(state), feedback=final_norm(state))
    same_drafts(drive(published), by_hand)


# -- speculators: norm_before_residual, norm_before_fc, its own target layers ----------------


def residual_after_hidden_norm(twin: EagleHead, eps: float) -> torch.Tensor:
    """speculators' first layer with norm_before_residual (Eagle3FirstLayerMixin.forward),
    written out over the twin's weights for the first pass of `drive`: the residual is
    hidden_norm(h), not h."""
    features, tokens = first_inputs(3)
    layer = twin.midlayer
    with torch.no_grad():
        emb, hidden = twin.embedding(tokens), twin.fc(features)
        normed = rms(hidden, layer.hidden_norm.weight, eps)
        x = torch.cat([rms(emb, layer.input_layernorm.weight, eps), normed], -1)
        rope = twin.rotary(emb, torch.arange(5)[None])
        attention, _ = layer.self_attn(x, rope, causal(5, 0, x.dtype, x.device))
        hidden = normed + attention
        hidden = hidden + layer.mlp(rms(hidden, layer.post_attention_layernorm.weight, eps))
        return twin.lm_head(rms(hidden, twin.norm.weight, eps))[0]


def test_speculators_norm_before_residual_takes_the_residual_after_hidden_norm(tmp_path, target):
    published, twin, _ = heads(SPECULATORS, tmp_path, target)  # norm_before_residual: true
    assert published.variant == Eagle3Variant(norm_before_residual=True)
    eps = read_config(SPECULATORS)["transformer_layer_config"]["rms_norm_eps"]
    first_pass = drive(published, steps=0)
    torch.testing.assert_close(first_pass, residual_after_hidden_norm(twin, eps))
    assert differs(first_pass, drive(twin, steps=0))


def test_speculators_trainer_head_reads_its_own_target_layers_through_one_input_norm(
    tmp_path, target
):
    residual = ("norm_before_residual",)  # also set; tested above
    published, twin, state = heads(SPECULATORS_TRAINER, tmp_path, target, keep=residual)
    assert published.variant == Eagle3Variant(
        aux_layers=(0, 1, 2, 3),
        norm_before_fc=True,
        norm_before_residual=True,
        norm_output=True,
        window=2048,
    )
    assert feature_layers(published, TARGET_LAYERS) == (0, 1, 2, 3)
    by_hand = drive(
        twin, prefuse=lambda f: rms(f, state["input_norm.weight"]), feedback=final_norm(state)
    )
    same_drafts(drive(published), by_hand)
    assert differs(drive(published), drive(twin, feedback=final_norm(state)))
    reference = run(target, "ar", prompt(6), DecodeConfig(max_new_tokens=24))
    assert decode_stats(target, published)[0] == reference.token_ids


def test_a_head_naming_target_layers_the_target_lacks_is_refused(tmp_path, target):
    published, _, _ = heads(SPECULATORS_TRAINER, tmp_path, target)
    with pytest.raises(SpecdecError, match=r"target layers \[0, 1, 2, 3\] .* has 3 layers"):
        feature_layers(published, 3)


def test_drafting_past_a_sliding_window_is_refused_rather_than_done_without_it(tmp_path, target):
    def small_window(config, layer):
        layer["sliding_window"] = 6

    published, _, _ = heads(SPECULATORS_TRAINER, tmp_path, target, small_window)
    assert published.variant.window == 6
    drive(published, steps=1)  # positions 0..5: inside the window, exact
    with pytest.raises(SpecdecError, match="sliding window of 6 positions"):
        drive(published, steps=2)


@pytest.mark.parametrize("name", [SPECFORGE_31, SPECULATORS, SPECULATORS_TRAINER])
def test_a_published_head_saved_here_reloads_with_identical_drafts(tmp_path, target, name):
    published, _, _ = heads(name, tmp_path, target)
    save_head(published, tmp_path / "saved", dtype=torch.float32)
    again = load_head(str(tmp_path / "saved"), target, torch.float32)
    assert again.variant == published.variant
    same_drafts(drive(again), drive(published))


# -- a weight the head does not read is an error that names it -------------------------------


def with_weight(name: str, key: str, value: torch.Tensor, tmp_path: Path) -> Path:
    config, layer = shrink(read_config(name))
    state = head_state(name, config, layer, layout_of(name))
    state[key] = value
    return write_published(tmp_path / "head", config, state, layout_of(name))


@pytest.mark.parametrize(
    "name, key, message",
    [
        (  # EAGLE 3.1 norms under a config that does not ask for them
            "specforge_qwen3-8b-eagle3.json",
            "fc_norm.0.weight",
            r'fc_norm\.0\.weight; its config.json does not set "fc_norm": true',
        ),
        (
            "specforge_qwen3-8b-eagle3.json",
            "input_norm.weight",
            r'input_norm\.weight; its config.json does not set "norm_before_fc": true',
        ),
        (  # a Qwen3 decoder layer's q_norm: named as the speculators file spells it
            SPECULATORS,
            "layers.0.self_attn.q_norm.weight",
            r"layers\.0\.self_attn\.q_norm\.weight; dropping them would make it draft wrongly",
        ),
        (
            "yuhuili_EAGLE3-LLaMA3.1-Instruct-8B.traineagle3-config.json",
            "lm_head.bias",
            r"lm_head\.bias; dropping them",
        ),
    ],
)
def test_a_weight_the_head_does_not_read_is_refused_by_name(tmp_path, target, name, key, message):
    path = with_weight(name, key, torch.ones(H), tmp_path)
    with pytest.raises(SpecdecError, match=message) as error:
        load_head(str(path), target)
    assert "holds weights its eagle3 layout does not read: " in str(error.value)
    assert "\n" not in str(error.value)


def test_a_weight_the_config_asks_for_but_the_file_lacks_is_refused_by_name(tmp_path, target):
    config, layer = shrink(read_config(SPECFORGE_31))
    state = head_state(SPECFORGE_31, config, layer, "C")
    del state["fc_norm.1.weight"]
    write_published(tmp_path / "head", config, state, "C")
    with pytest.raises(SpecdecError, match=r"lacks fc_norm\.1\.weight"):
        load_head(str(tmp_path / "head"), target)


def test_an_fc_over_more_target_layers_than_the_config_names_is_refused(tmp_path, target):
    config, layer = shrink(read_config(SPECULATORS_TRAINER))
    state = head_state(SPECULATORS_TRAINER, config, layer, "E")  # fc over 4 target layers
    config["eagle_aux_hidden_state_layer_ids"] = None  # the config no longer says which
    write_published(tmp_path / "head", config, state, "E")
    with pytest.raises(SpecdecError, match=r"fc reads 128 features, 4 target hidden states"):
        load_head(str(tmp_path / "head"), target)
