"""EAGLE heads in the official checkpoint layouts: save, reload, recognise, refuse misfits."""

import json

import pytest
import torch
from safetensors.torch import save_file

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import head_from_state, load_head, save_head
from specdec_core.models.prepacked_linear import fast_bf16
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import VOCAB, prompt, tiny_config

H = 32  # tiny hidden size
INTER = 2 * H
KV = 16  # 2 KV heads x head_dim 8


def official_eagle1_state(bias: bool = True) -> dict[str, torch.Tensor]:
    """Keys as in yuhuili/EAGLE-* (EAGLE-1/2): fc over cat(emb, feature); no input norm."""
    g = torch.Generator().manual_seed(5)
    state = {
        "fc.weight": torch.randn(H, 2 * H, generator=g) * 0.2,
        "layers.0.self_attn.q_proj.weight": torch.randn(H, H, generator=g) * 0.2,
        "layers.0.self_attn.k_proj.weight": torch.randn(KV, H, generator=g) * 0.2,
        "layers.0.self_attn.v_proj.weight": torch.randn(KV, H, generator=g) * 0.2,
        "layers.0.self_attn.o_proj.weight": torch.randn(H, H, generator=g) * 0.2,
        "layers.0.mlp.gate_proj.weight": torch.randn(INTER, H, generator=g) * 0.2,
        "layers.0.mlp.up_proj.weight": torch.randn(INTER, H, generator=g) * 0.2,
        "layers.0.mlp.down_proj.weight": torch.randn(H, INTER, generator=g) * 0.2,
        "layers.0.post_attention_layernorm.weight": torch.ones(H),
    }
    if bias:
        state["fc.bias"] = torch.zeros(H)
    return state


def official_eagle3_state(draft_vocab: int = 12) -> dict[str, torch.Tensor]:
    """Keys as in yuhuili/EAGLE3-*: fc over 3 target layers, midlayer, norm, lm_head, d2t/t2d."""
    g = torch.Generator().manual_seed(6)
    ids = torch.arange(0, 2 * draft_vocab, 2)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[ids] = True
    return {
        "fc.weight": torch.randn(H, 3 * H, generator=g) * 0.2,
        "midlayer.self_attn.q_proj.weight": torch.randn(H, 2 * H, generator=g) * 0.2,
        "midlayer.self_attn.k_proj.weight": torch.randn(KV, 2 * H, generator=g) * 0.2,
        "midlayer.self_attn.v_proj.weight": torch.randn(KV, 2 * H, generator=g) * 0.2,
        "midlayer.self_attn.o_proj.weight": torch.randn(H, H, generator=g) * 0.2,
        "midlayer.mlp.gate_proj.weight": torch.randn(INTER, H, generator=g) * 0.2,
        "midlayer.mlp.up_proj.weight": torch.randn(INTER, H, generator=g) * 0.2,
        "midlayer.mlp.down_proj.weight": torch.randn(H, INTER, generator=g) * 0.2,
        "midlayer.input_layernorm.weight": torch.ones(H),
        "midlayer.hidden_norm.weight": torch.ones(H),
        "midlayer.post_attention_layernorm.weight": torch.ones(H),
        "norm.weight": torch.ones(H),
        "lm_head.weight": torch.randn(draft_vocab, H, generator=g),
        "d2t": ids - torch.arange(draft_vocab),
        "t2d": t2d,
    }


def write_official(directory, state, config_extra, as_bin=False):
    directory.mkdir(parents=True)
    config = {**tiny_config(layers=1).to_dict(), **config_extra}
    (directory / "config.json").write_text(json.dumps(config, default=str))
    if as_bin:
        torch.save(state, directory / "pytorch_model.bin")
    else:
        save_file(state, str(directory / "model.safetensors"))
    return directory


def _greedy(target, head, k=3):
    config = DecodeConfig(max_new_tokens=24, k=k)
    return run(target, "eagle", prompt(), config, head)


def test_official_eagle1_checkpoint_loads_and_decodes_losslessly(tiny_target, tmp_path):
    state = official_eagle1_state()
    state["embed_tokens.weight"] = torch.zeros(VOCAB, H)  # some checkpoints ship it: ignored
    path = write_official(tmp_path / "e1", state, {"bias": True}, as_bin=True)
    head = load_head(str(path), tiny_target, torch.float32)
    assert head.kind == "eagle1" and head.fc.bias is not None and head.draft_vocab == 0
    torch.testing.assert_close(head.fc.weight, state["fc.weight"])
    reference = run(tiny_target, "ar", prompt(), DecodeConfig(max_new_tokens=24))
    assert _greedy(tiny_target, head).token_ids == reference.token_ids


def test_official_eagle1_checkpoint_without_fc_bias_loads(tiny_target, tmp_path):
    path = write_official(tmp_path / "e1", official_eagle1_state(bias=False), {"bias": False})
    assert load_head(str(path), tiny_target).fc.bias is None


def test_official_eagle3_checkpoint_loads_and_decodes_losslessly(tiny_target, tmp_path):
    state = official_eagle3_state()
    extra = {"draft_vocab_size": 12, "architectures": ["LlamaForCausalLMEagle3"]}
    path = write_official(tmp_path / "e3", state, extra)
    head = load_head(str(path), tiny_target)
    assert head.kind == "eagle3" and head.draft_vocab == 12
    assert head.target_ids(torch.tensor([0, 5])).tolist() == [0, 10]
    reference = run(tiny_target, "ar", prompt(), DecodeConfig(max_new_tokens=24))
    assert _greedy(tiny_target, head).token_ids == reference.token_ids


@pytest.mark.parametrize("kind, draft_vocab", [("eagle1", 0), ("eagle1", 12), ("eagle3", 12)])
def test_saved_head_reloads_with_identical_outputs(tiny_target, tmp_path, kind, draft_vocab):
    head = tiny_head(tiny_target, kind, draft_vocab)
    save_head(head, tmp_path / "head", card={"note": "test"}, dtype=torch.float32)
    again = load_head(str(tmp_path / "head"), tiny_target, torch.float32)
    features = torch.randn(1, 5, 3 * H if kind == "eagle3" else H)
    tokens, positions = torch.tensor([[4, 8, 15, 16, 23]]), torch.arange(5)[None]
    with torch.no_grad():
        a = head.step(features, tokens, positions, None, head.new_cache())
        b = again.step(features, tokens, positions, None, again.new_cache())
    torch.testing.assert_close(a.logits, b.logits)
    torch.testing.assert_close(head.to_target(a.logits), again.to_target(b.logits))
    assert _greedy(tiny_target, head).token_ids == _greedy(tiny_target, again).token_ids


def test_head_of_another_hidden_size_is_refused_naming_both(tiny_target):
    state = {k: v for k, v in official_eagle1_state().items()}
    state["fc.weight"] = torch.zeros(64, 128)
    config = tiny_config(layers=1)
    config.hidden_size = 64
    with pytest.raises(SpecdecError, match=r"hidden size 64 .* 32"):
        head_from_state(config, state, target_hidden=32, target_vocab=VOCAB)


def test_head_of_another_vocabulary_is_refused_naming_both(tiny_target):
    config = tiny_config(layers=1)
    config.vocab_size = 100
    with pytest.raises(SpecdecError, match=r"100 tokens .* 32"):
        head_from_state(config, official_eagle1_state(), target_hidden=H, target_vocab=VOCAB)


def test_a_hub_id_not_in_the_cache_gives_a_clear_offline_error(tiny_target):
    with pytest.raises(SpecdecError, match="offline|cannot get"):
        load_head("nobody-here/no-such-eagle-head", tiny_target)


def test_a_directory_without_head_weights_is_refused(tiny_target, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_config(layers=1).to_dict()))
    with pytest.raises(SpecdecError, match="model.safetensors"):
        load_head(str(tmp_path), tiny_target)


@pytest.mark.skipif(not fast_bf16(torch.device("cpu")), reason="this CPU has no native bf16")
def test_head_runs_in_bf16_on_a_cpu_with_native_bf16_and_keeps_rope_in_float32(
    tiny_target, tmp_path
):
    head = tiny_head(tiny_target, "eagle1", 12)
    save_head(head, tmp_path / "head", dtype=torch.float32)
    fast = load_head(str(tmp_path / "head"), tiny_target)
    assert fast.fc.weight.dtype == torch.bfloat16
    assert fast.rotary.inv_freq.dtype == torch.float32
    torch.testing.assert_close(fast.rotary.inv_freq, head.rotary.inv_freq)
    reference = run(tiny_target, "ar", prompt(), DecodeConfig(max_new_tokens=24))
    assert _greedy(tiny_target, fast).token_ids == reference.token_ids
