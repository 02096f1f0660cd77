"""P-EAGLE heads read exactly: speculators' peagle layout and the EAGLE-3 layout plus mask_hidden
draft identically, and one drafting pass equals a forward written out here from speculators'
P-EAGLE code (models/peagle/core.py, attention.py; models/eagle3/model_definitions.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target, TargetOutput
from specdec_core.drafters.peagle import PEagleDrafter
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head
from specdec_core.heads.eagle.head import Eagle3Variant, fused_layers
from specdec_core.heads.eagle.peagle import PEagleHead, save_peagle
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import VOCAB, prompt, tiny_config, tiny_loaded

H = 32
MASK = 5  # the mask token of the tiny heads
EPS = 1e-6  # LlamaConfig's rms_norm_eps
TARGET_LAYERS = 4


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=TARGET_LAYERS)


def tiny_peagle(
    target,
    layers: int = 1,
    draft_vocab: int = 12,
    own_embedding: bool = False,
    variant: Eagle3Variant | None = None,
    seed: int = 3,
) -> PEagleHead:
    """A random P-EAGLE head on `target` (norm weights not 1, so a norm misplaced shows)."""
    torch.manual_seed(seed)
    variant = variant or Eagle3Variant()
    config = tiny_config(layers=1)
    head = PEagleHead(config, MASK, draft_vocab, layers, variant, own_embedding).eval()
    with torch.no_grad():
        for param in head.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.2)
            else:
                param.copy_(1 + 0.3 * torch.randn_like(param))
        head.mask_hidden.normal_(0, 2.0)
        head.lm_head.weight.mul_(4.0)
    step = 2 if draft_vocab < VOCAB else 1  # every other id, or the whole vocabulary
    head.set_draft_vocab(torch.arange(VOCAB)[: step * draft_vocab : step])
    model = target.model
    return head.bind(model.get_input_embeddings(), model.get_output_embeddings())


def write_speculators(head: PEagleHead, directory: Path, k: int = 4) -> Path:
    save_peagle(head, directory, k, "tiny", ["LlamaForCausalLM"], torch.float32)
    return directory


def write_eagle3_layout(head: PEagleHead, directory: Path) -> Path:
    """The same weights in the official EAGLE-3 layout (`midlayer.*`, flat config) plus
    P-EAGLE's mask_hidden [n_aux * h] and mask_token_id."""
    directory.mkdir(parents=True)
    config = {
        **tiny_config(layers=1).to_dict(),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": head.draft_vocab,
        "mask_token_id": head.mask_token_id,
    }
    (directory / "config.json").write_text(json.dumps(config, default=str))
    state = {k: v.detach().clone().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"))
    return directory


def features_of(target, ids: list[int]) -> TargetOutput:
    """The target's rows for ids[:-1] at the official EAGLE-3 layers, as the loop gives them."""
    return Target(target.model, fused_layers(TARGET_LAYERS)).prefill(ids[:-1])


def q_rows(head: PEagleHead, target, ids: list[int], k: int) -> torch.Tensor:
    """[k, V] draft distributions (T = 1) of the drafter's one pass after prefill of `ids`."""
    drafter = PEagleDrafter(head, TARGET_LAYERS)
    drafter.begin(ids, features_of(target, ids))
    proposal = drafter.propose(ids, DecodeConfig(k=k, temperature=1.0), torch.Generator())
    return proposal.q


# -- a P-EAGLE pass written out from speculators' code --------------------------------------


def rms(x, weight):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rope(x, positions, theta=10000.0):
    """Llama rotary embedding of x [heads, n, d] at `positions` [n] (rotate_half convention)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = positions[:, None].float() * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + half * sin


def attention(state, prefix, x, positions, allowed, heads=4, kv_heads=2):
    q = (x @ state[f"{prefix}q_proj.weight"].T).view(len(x), heads, -1).transpose(0, 1)
    k = (x @ state[f"{prefix}k_proj.weight"].T).view(len(x), kv_heads, -1).transpose(0, 1)
    v = (x @ state[f"{prefix}v_proj.weight"].T).view(len(x), kv_heads, -1).transpose(0, 1)
    q, k = rope(q, positions), rope(k, positions)
    k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(0, 1).reshape(len(x), -1)
    return out @ state[f"{prefix}o_proj.weight"].T


def mlp(state, prefix, x):
    gate = torch.nn.functional.silu(x @ state[f"{prefix}gate_proj.weight"].T)
    return (gate * (x @ state[f"{prefix}up_proj.weight"].T)) @ state[f"{prefix}down_proj.weight"].T


def speculators_pass(directory: Path, target, ids: list[int], k: int) -> torch.Tensor:
    """[k, V] target-vocabulary logits of drafts 1..k, from the files in `directory`, as
    speculators' PEagleDraftModel.forward computes the rows of one rollout: anchor n-2 (the
    pending token's pair), depths 0..k-1; depth 0 rows are the context's real pairs, deeper
    rows take embed(mask_token_id) and mask_hidden through fc, at position anchor + depth, and
    row (a, d) sees (a', d') when d' = 0 and a' <= a, or a' = a and d' <= d
    (create_peagle_mask_mod)."""
    state = load_file(str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    layers = config["transformer_layer_config"]["num_hidden_layers"]
    out = features_of(target, ids)
    features = torch.cat(out.layer_hidden, -1)  # [n, 3h]
    tokens = torch.tensor(ids[1:])
    n = len(tokens)
    anchor = torch.cat([torch.arange(n), torch.full((k - 1,), n - 1)])
    depth = torch.cat([torch.zeros(n, dtype=torch.long), torch.arange(1, k)])
    allowed = ((depth[None] == 0) & (anchor[:, None] >= anchor[None])) | (
        (anchor[:, None] == anchor[None]) & (depth[:, None] >= depth[None])
    )
    embedding = state.get("embed_tokens.weight", target.model.get_input_embeddings().weight)
    is_mask = depth > 0
    token_ids = torch.where(is_mask, MASK, torch.cat([tokens, tokens[:1].repeat(k - 1)]))
    emb = embedding[token_ids]
    mask_hidden = state["mask_hidden"].reshape(-1)
    hidden_in = torch.cat([features, mask_hidden[None].expand(k - 1, -1)])
    hidden = hidden_in @ state["fc.weight"].T
    positions = anchor + depth
    p = "layers.0."
    residual = hidden
    x = torch.cat([rms(emb, state[p + "input_layernorm.weight"]),
                   rms(hidden, state[p + "hidden_norm.weight"])], -1)  # fmt: skip
    hidden = residual + attention(state, p + "self_attn.", x, positions, allowed)
    hidden = hidden + mlp(
        state, p + "mlp.", rms(hidden, state[p + "post_attention_layernorm.weight"])
    )
    for i in range(1, layers):
        p = f"layers.{i}."
        x = rms(hidden, state[p + "input_layernorm.weight"])
        hidden = hidden + attention(state, p + "self_attn.", x, positions, allowed)
        x = rms(hidden, state[p + "post_attention_layernorm.weight"])
        hidden = hidden + mlp(state, p + "mlp.", x)
    logits = rms(hidden, state["norm.weight"]) @ state["lm_head.weight"].T  # [rows, Vd]
    draft_ids = torch.arange(logits.shape[-1]) + state["d2t"]
    full = torch.full((len(logits), VOCAB), float("-inf"))
    full[:, draft_ids] = logits
    return full[n - 1 :]


@pytest.mark.parametrize("layers, own_embedding", [(1, False), (2, True), (3, False)])
def test_one_pass_drafts_equal_speculators_forward(target, tmp_path, layers, own_embedding):
    head = tiny_peagle(target, layers=layers, own_embedding=own_embedding)
    directory = write_speculators(head, tmp_path / "peagle")
    loaded = load_head(str(directory), target, torch.float32)
    assert isinstance(loaded, PEagleHead) and loaded.decoder_layers == layers
    ids = prompt(length=7)
    q = q_rows(loaded, target, ids, k=4)
    expected = speculators_pass(directory, target, ids, k=4).softmax(-1)
    torch.testing.assert_close(q, expected, atol=1e-5, rtol=1e-4)


def test_the_reference_pass_tells_another_mask_hidden_apart(target, tmp_path):
    """Power check: the head with another mask_hidden drafts its first token as before (a real
    row) and the later ones otherwise, and the comparison above sees it."""
    head = tiny_peagle(target, layers=2)
    directory = write_speculators(head, tmp_path / "peagle")
    ids = prompt(length=7)
    expected = speculators_pass(directory, target, ids, k=4).softmax(-1)
    changed = load_head(str(directory), target, torch.float32)
    changed.mask_hidden.data.mul_(-1.0)
    q = q_rows(changed, target, ids, k=4)
    torch.testing.assert_close(q[0], expected[0], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(q[1:], expected[1:], atol=1e-3)


def test_speculators_and_eagle3_layouts_draft_identically(target, tmp_path):
    head = tiny_peagle(target, layers=1)
    a = load_head(str(write_speculators(head, tmp_path / "speculators")), target, torch.float32)
    b = load_head(str(write_eagle3_layout(head, tmp_path / "eagle3")), target, torch.float32)
    ids = prompt(length=6)
    torch.testing.assert_close(q_rows(a, target, ids, 5), q_rows(b, target, ids, 5))
    config = DecodeConfig(max_new_tokens=24, k=4)
    assert (
        run(target, "peagle", ids, config, a).token_ids
        == run(target, "peagle", ids, config, b).token_ids
    )


def test_exported_config_is_speculators_peagle(target, tmp_path):
    head = tiny_peagle(target, layers=2, own_embedding=True)
    directory = write_speculators(head, tmp_path / "peagle", k=6)
    config = json.loads((directory / "config.json").read_text())
    assert config["speculators_model_type"] == "peagle"
    assert config["mask_token_id"] == MASK and config["draft_vocab_size"] == 12
    assert config["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 6
    assert config["transformer_layer_config"]["num_hidden_layers"] == 2
    keys = set(load_file(str(directory / "model.safetensors")))
    assert {"mask_hidden", "embed_tokens.weight", "layers.1.mlp.up_proj.weight", "d2t"} <= keys
    assert not any(key.startswith(("midlayer.", "more.")) for key in keys)
    shape = load_file(str(directory / "model.safetensors"))["mask_hidden"].shape
    assert list(shape) == [1, 1, 3 * H]


def _edit(directory: Path, config=None, weights=None) -> Path:
    if config is not None:
        values = json.loads((directory / "config.json").read_text())
        config(values)
        (directory / "config.json").write_text(json.dumps(values))
    if weights is not None:
        state = load_file(str(directory / "model.safetensors"))
        weights(state)
        save_file(state, str(directory / "model.safetensors"))
    return directory


@pytest.mark.parametrize(
    "config, weights, message",
    [
        (None, lambda s: s.update(extra=torch.zeros(2)), "does not read: extra"),
        (lambda c: c.update(surprise=1), None, "does not define: surprise"),
        (None, lambda s: s.pop("mask_hidden"), "no mask_hidden"),
        (lambda c: c.update(mask_token_id=None), None, "no mask_token_id"),
        (lambda c: c.update(mask_token_id=VOCAB), None, "outside the target's vocabulary"),
        (None, lambda s: s.pop("layers.1.mlp.up_proj.weight"), "lacks layers.1.mlp.up_proj"),
        (None, lambda s: s.update(mask_hidden=torch.zeros(1, 1, 2 * H)), "mask_hidden has shape"),
        (lambda c: c["transformer_layer_config"].update(num_hidden_layers=3), None,
         "num_hidden_layers 3"),
    ],
)  # fmt: skip
def test_misfit_peagle_checkpoints_are_refused_by_name(target, tmp_path, config, weights, message):
    directory = write_speculators(tiny_peagle(target, layers=2), tmp_path / "peagle")
    _edit(directory, config, weights)
    with pytest.raises(SpecdecError, match=message):
        load_head(str(directory), target, torch.float32)


def test_peagle_method_refuses_a_plain_eagle3_head(target):
    head = tiny_head(target, "eagle3", 12)
    with pytest.raises(SpecdecError, match="drafts with a P-EAGLE head"):
        run(target, "peagle", prompt(), DecodeConfig(max_new_tokens=4, k=3), head)


def test_a_peagle_head_also_drafts_an_eagle_chain_losslessly(target, tmp_path):
    head = tiny_peagle(target, layers=2)
    loaded = load_head(str(write_speculators(head, tmp_path / "p")), target, torch.float32)
    config = DecodeConfig(max_new_tokens=24, k=3)
    reference = run(target, "ar", prompt(), config)
    assert run(target, "eagle", prompt(), config, loaded).token_ids == reference.token_ids
