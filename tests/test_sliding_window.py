"""Sliding-window and hybrid-cache targets: every method equals `ar` far past the window.

Tiny random models with a 4-token window: Mistral-style (every layer sliding), Qwen2 with
`max_window_layers` (full then sliding), Gemma 3 (sliding and full layers mixed through
`layer_types`) and Gemma 2 (alternating, with soft-capped logits). Greedy float32 output of
each speculative method must equal `ar`, and `ar` must equal a cache-free greedy reference (a
full forward per token), so keeping the sliding layers' whole history changes nothing the
model computes.
"""

from __future__ import annotations

import pytest
import torch
from transformers import (
    DynamicCache,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3NextConfig,
    StaticCache,
)

from specdec_core.decoding import kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target
from specdec_core.errors import SpecdecError
from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt, tiny_config_fields, tiny_tokenizer

WINDOW = 4
COMMON = {**tiny_config_fields(), "pad_token_id": 0, "sliding_window": WINDOW}


def _mistral(layers: int):
    return MistralForCausalLM(MistralConfig(num_hidden_layers=layers, **COMMON))


def _qwen2(layers: int):  # layers >= max_window_layers slide: full, then sliding
    config = Qwen2Config(
        num_hidden_layers=layers, use_sliding_window=True, max_window_layers=1, **COMMON
    )
    return Qwen2ForCausalLM(config)


def _gemma3(layers: int):
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    config = Gemma3TextConfig(
        num_hidden_layers=layers, layer_types=types, head_dim=8, query_pre_attn_scalar=8,
        **COMMON,
    )  # fmt: skip
    return Gemma3ForCausalLM(config)


def _gemma2(layers: int):  # alternating sliding / full layers, soft-capped logits
    config = Gemma2Config(
        num_hidden_layers=layers, head_dim=8, query_pre_attn_scalar=8,
        final_logit_softcapping=2.0, **COMMON,
    )  # fmt: skip
    return Gemma2ForCausalLM(config)


BUILDERS = {"mistral": _mistral, "qwen2": _qwen2, "gemma3": _gemma3, "gemma2": _gemma2}


def sliding_model(arch: str, seed: int, layers: int = 2, noise: float = 0.0):
    torch.manual_seed(seed)
    model = BUILDERS[arch](layers).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
        model.lm_head.weight[2] = 0.0  # EOS rarely the argmax: runs are long
        if noise:  # a draft that agrees often but not always
            for param in model.parameters():
                param.add_(torch.randn_like(param) * noise * param.std().clamp(min=1e-3))
    model.generation_config.eos_token_id = 2
    return model


def loaded(model, name: str) -> LoadedModel:
    return LoadedModel(model, tiny_tokenizer(), name, "memory", torch.device("cpu"), torch.float32)


@pytest.fixture(scope="module", params=list(BUILDERS))
def target(request):
    return loaded(sliding_model(request.param, seed=1), request.param)


@pytest.fixture(scope="module")
def draft(target):
    """The target's architecture with noise: its own sliding cache is rolled back too."""
    model = sliding_model(target.spec, seed=1, noise=0.5)
    return loaded(model, target.spec + "-draft")


PROMPTS = [prompt(3), prompt(11, offset=5)]  # shorter and longer than the window
CONFIG = DecodeConfig(max_new_tokens=40, k=4, ngram_max=2)
TREE = DecodeConfig(max_new_tokens=40, tree_depth=3, tree_topk=3, tree_tokens=8)


def greedy_without_cache(model, ids: list[int], n: int) -> list[int]:
    """Greedy decoding with a full forward over the whole sequence per token: no cache."""
    ids, out = list(ids), []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            out.append(int(logits.argmax()))
            ids.append(out[-1])
    return out


@pytest.mark.parametrize("ids", PROMPTS)
def test_ar_equals_a_cache_free_reference_past_the_window(target, ids):
    config = DecodeConfig(max_new_tokens=24)
    reference = greedy_without_cache(target.model, ids, 24)
    assert list(run(target, "ar", ids, config).token_ids) == reference


@pytest.mark.parametrize("ids", PROMPTS)
@pytest.mark.parametrize("method", ["ngram", "classic", "eagle", "eagle2", "eagle2-lookup"])
def test_speculative_output_equals_ar_past_the_window(target, draft, method, ids):
    config = TREE if method.startswith("eagle2") else CONFIG
    extra = {"classic": draft, "ngram": None}.get(method, tiny_head(target))
    reference = run(target, "ar", ids, config)
    summary = run(target, method, ids, config, extra)
    assert len(ids) + len(summary.token_ids) > 10 * WINDOW
    assert summary.token_ids == reference.token_ids
    if method != "ngram":  # ngram on random text may never draft
        assert sum(summary.drafted_per_position) > 0


@pytest.mark.parametrize("method", ["eagle", "eagle2"])
def test_eagle3_heads_on_a_hybrid_target(method):
    target = loaded(sliding_model("gemma3", seed=4, layers=4), "gemma3-4")
    config = TREE if method == "eagle2" else CONFIG
    ids = prompt(9)
    head = tiny_head(target, "eagle3", draft_vocab=16)
    assert (
        run(target, method, ids, config, head).token_ids == run(target, "ar", ids, config).token_ids
    )


def test_batched_answers_equal_generate_with_transformers_own_cache(target):
    """The data generator's batched answers (left-padded rows, a cache writing into spare
    room) are the ones `generate` gives with the cache transformers builds itself, past the
    window."""
    from specdec_core.training.datasets import answer_batch

    answers = answer_batch(target.model, PROMPTS, 12, pad=0, eos_ids={2})
    width = max(len(p) for p in PROMPTS)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    with torch.no_grad():
        out = target.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
            pad_token_id=0, eos_token_id=2,
        )  # fmt: skip
    for (answer, _), row in zip(answers, out[:, width:].tolist(), strict=True):
        assert answer == (row[: row.index(2) + 1] if 2 in row else row)


def test_target_logits_are_the_models_own_including_soft_capping(target):
    ids = prompt(12)
    with torch.no_grad():
        expected = target.model(input_ids=torch.tensor([ids])).logits[0, 4:]
    runner = Target(target.model)
    runner.prefill(ids[:4])
    torch.testing.assert_close(runner.forward(ids[4:]).logits, expected)


def test_the_cache_keeps_every_position_of_sliding_layers(target):
    cache = kv_cache.new_cache(target.model.config)
    ids = torch.tensor([prompt(12)])
    with torch.no_grad():
        target.model(input_ids=ids, **kv_cache.cache_arg(cache), use_cache=True)
    assert all(layer.keys.shape[-2] == 12 for layer in cache.layers)
    kv_cache.keep(cache, 6, [1, 3])
    kv_cache.truncate(cache, 5)
    assert kv_cache.cache_length(cache) == 5


def test_caches_that_cannot_roll_back_are_refused_by_name(target):
    config = target.model.config
    with pytest.raises(SpecdecError, match="StaticCache"):
        kv_cache.check_rollback(StaticCache(config=config, max_cache_len=32))
    truncating = DynamicCache(config=config)  # transformers' own: sliding layers truncate
    if any(layer.is_sliding for layer in truncating.layers):
        with pytest.raises(SpecdecError, match="DynamicSlidingWindowLayer"):
            kv_cache.check_rollback(truncating)
    kv_cache.check_rollback(kv_cache.new_cache(config))


def test_models_with_recurrent_state_layers_are_refused_by_layer_type():
    config = Qwen3NextConfig(
        num_hidden_layers=2, layer_types=["linear_attention", "full_attention"]
    )
    with pytest.raises(SpecdecError, match="qwen3_next model has linear_attention layers"):
        kv_cache.new_cache(config)
