"""Drafting passes through the head's fused projections give the Llama layers' bits and drafts."""

from __future__ import annotations

import pytest
import torch

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step
from specdec_core.heads.eagle import fused_layer
from specdec_core.models.loading import fast_cpu_paths
from specdec_core.models.prepacked_linear import enabled, native_bf16
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import VOCAB

CPU = torch.device("cpu")
DTYPES = [torch.float32] + ([torch.bfloat16] if native_bf16() else [])

pytestmark = pytest.mark.skipif(
    not enabled(CPU, torch.float32), reason="fused drafting needs oneDNN's packed linears"
)


def drafting_head(target, kind: str, dtype: torch.dtype, draft_vocab: int = 0):
    head = tiny_head(target, kind, draft_vocab=draft_vocab).to(dtype)
    fast_cpu_paths(head)  # as load_head prepares a head on a CPU
    return head


def passes(head, fused: bool) -> list[torch.Tensor]:
    """A prefix, one row without a mask, a causal block of three, a tree of three: each pass's
    predicted features and logits, and the cache after them."""
    head.fused_drafting = fused
    h, dtype = head.config.hidden_size, head.fc.weight.dtype
    generator = torch.Generator().manual_seed(5)
    first = h * (3 if head.kind == "eagle3" else 1)  # eagle3 starts from fused target layers
    cache, outs = head.new_cache(), []

    def step(n, width, mask, position):
        features = torch.randn(1, n, width, generator=generator).to(dtype)
        tokens = torch.randint(0, VOCAB, (1, n), generator=generator)
        positions = torch.arange(position, position + n)[None]
        out = head.step(features, tokens, positions, mask, cache)
        outs.extend([out.hidden, head.logits(out.hidden)])

    with torch.inference_mode():
        step(12, first, None, 0)
        step(1, h, None, 12)
        step(3, h, None, 13)
        seen = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
        mask = attention_mask.after_prefix(seen, 16, dtype, CPU)
        step(3, h, mask, 16)
        outs.extend(layer.keys[..., : kv_cache.cache_length(cache), :] for layer in cache.layers)
    return outs


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_projections_give_the_llama_layers_bits(tiny_target, kind, dtype, monkeypatch):
    head = drafting_head(tiny_target, kind, dtype)
    plain = passes(head, fused=False)
    calls = []
    original = fused_layer.attention
    monkeypatch.setattr(fused_layer, "attention", lambda *a: calls.append(1) or original(*a))
    fused = passes(head, fused=True)
    assert calls, "the drafting passes did not go through the fused projections"
    for a, b in zip(plain, fused, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("change", ["load_state_dict", "in place, then eval"])
def test_fused_projections_follow_the_weights_when_they_change(tiny_target, change):
    head = drafting_head(tiny_target, "eagle1", torch.float32)
    before = passes(head, fused=True)
    with torch.no_grad():
        if change == "load_state_dict":  # how online adaptation publishes its weights
            state = head.state_dict()
            state["layers.0.self_attn.k_proj.weight"] = (
                state["layers.0.self_attn.k_proj.weight"] * 1.5
            )
            state["layers.0.mlp.up_proj.weight"] = state["layers.0.mlp.up_proj.weight"] * 0.5
            head.load_state_dict(state)
        else:
            head.layers[0].self_attn.k_proj.weight.mul_(1.5)
            head.layers[0].mlp.up_proj.weight.mul_(0.5)
            head.eval()
    changed_fused, changed_plain = passes(head, fused=True), passes(head, fused=False)
    assert not torch.equal(before[2], changed_fused[2])
    for a, b in zip(changed_plain, changed_fused, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("method", ["eagle", "eagle2", "eagle2-lookup"])
def test_runs_draft_the_same_trees_with_and_without_fused_projections(tiny_target, method):
    head = drafting_head(tiny_target, "eagle1", torch.float32, draft_vocab=16)
    config = DecodeConfig(max_new_tokens=40, tree_depth=3, tree_topk=3, tree_tokens=8)

    def drafts(fused: bool):
        head.fused_drafting = fused
        steps: list = []
        summary = run(
            tiny_target, method, [5, 9, 3, 7, 11, 2], config, extra=head, on_event=steps.append
        )
        steps = [s for s in steps if isinstance(s, Step)]
        trees = [(s.tree.tokens, s.tree.parents, s.tree.scores) if s.tree else s.drafted
                 for s in steps]  # fmt: skip
        return summary.token_ids, trees

    assert drafts(fused=False) == drafts(fused=True)


def realistic_head(kind: str, dtype: torch.dtype):
    """A random head of the embedded model's widths (576 wide, 9 heads over 3), prepared as
    load_head prepares one on a CPU."""
    from torch import nn
    from transformers import LlamaConfig

    from specdec_core.heads.eagle.head import EagleHead

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
        num_key_value_heads=3, max_position_embeddings=2048,
    )  # fmt: skip
    head = EagleHead(config, kind=kind, draft_vocab=128 if kind == "eagle3" else 0).eval()
    with torch.no_grad():
        for param in head.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.05)
    head.bind(nn.Embedding(512, 576), nn.Linear(576, 512, bias=False))
    head.to(dtype)
    fast_cpu_paths(head)
    return head


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_projections_give_the_llama_layers_bits_after_a_long_prompt(kind, dtype):
    """The prompt's pass (200 rows, past where oneDNN's kernels for stacked and separate
    weights part) and then drafting passes of 1 to 10 rows, at the embedded model's widths."""
    head = realistic_head(kind, dtype)

    def passes(fused: bool) -> list[torch.Tensor]:
        head.fused_drafting = fused
        generator = torch.Generator().manual_seed(1)
        h = head.config.hidden_size
        cache, outs, position = head.new_cache(), [], 0
        for rows, width in ((200, h * (3 if kind == "eagle3" else 1)), (1, h), (4, h), (10, h)):
            features = torch.randn(1, rows, width, generator=generator).to(dtype)
            tokens = torch.randint(0, 512, (1, rows), generator=generator)
            positions = torch.arange(position, position + rows)[None]
            with torch.inference_mode():
                out = head.step(features, tokens, positions, None, cache)
                outs += [out.hidden, head.logits(out.hidden)]
            position += rows
        return outs

    for a, b in zip(passes(False), passes(True), strict=True):
        assert torch.equal(a, b)
