"""Grouped-query SDPA on the CPU: the same logits as transformers' sdpa, for chains and trees."""

from __future__ import annotations

import copy

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target
from specdec_core.models import cpu_attention
from specdec_core.models.cpu_attention import NAME, forward_keywords, row_groups, use_grouped_sdpa
from specdec_core.models.loading import LoadedModel, fast_cpu_paths
from specdec_core.models.prepacked_linear import native_bf16
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.test_sliding_window import loaded, sliding_model
from tests.tiny import perturbed, prompt, tiny_loaded, tiny_model


def _forwards(model) -> list[torch.Tensor]:
    """Logits of a prefill, a chain forward and a tree forward after a cached prefix."""
    runner = Target(model)
    ids = list(range(3, 30))
    runner.prefill(ids[:20])
    base = runner.length
    chain = runner.forward(ids[20:26]).logits
    runner.keep(base, [])
    tree = runner.forward(ids[20:27], (-1, 0, 0, 1, -1, 4)).logits
    return [chain, tree]


def test_grouped_sdpa_gives_the_logits_of_transformers_sdpa_for_chains_and_trees():
    reference = tiny_model(seed=3)
    assert reference.config.num_key_value_heads < reference.config.num_attention_heads
    grouped = copy.deepcopy(reference)
    assert use_grouped_sdpa(grouped)
    assert grouped.config._attn_implementation == NAME
    assert reference.config._attn_implementation == "sdpa"
    for expected, got in zip(_forwards(reference), _forwards(grouped), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


def test_greedy_speculative_output_equals_ar_with_grouped_sdpa():
    target = tiny_loaded(seed=3)
    draft = tiny_loaded(seed=3, model=perturbed(target.model, noise=0.3, seed=1))
    for model in (target.model, draft.model):
        use_grouped_sdpa(model)
        assert model.config._attn_implementation == NAME
    config = DecodeConfig(max_new_tokens=32, k=4)
    reference = run(target, "ar", prompt(), config)
    speculative = run(target, "classic", prompt(), config, draft)
    assert 0 < sum(speculative.accepted_per_position) < sum(speculative.drafted_per_position)
    assert speculative.token_ids == reference.token_ids


needs_native_bf16 = pytest.mark.skipif(
    not native_bf16(), reason="bf16 verify bits are exact where bf16 linears are native"
)
TREE = (-1, 0, 0, 1, 1, -1, 5, 3)  # parents of the drafted nodes (-1: the pending token)


def _bf16_target(seed: int = 3) -> LoadedModel:
    target = tiny_loaded(seed=seed)
    target.model.to(torch.bfloat16)
    fast_cpu_paths(target.model, rows_like_ar=True)  # as load_model prepares a target
    return target


def _ar_logits_along(model, prefix: list[int], path: list[int]) -> torch.Tensor:
    """The last logits of one-token `ar` steps over `path` after a prefilled `prefix`."""
    runner = Target(model)
    runner.prefill(prefix)
    for token in path:
        logits = runner.forward([token]).logits[-1]
    return logits


@needs_native_bf16
def test_a_bf16_verify_forward_gives_every_row_the_bits_of_ar_steps_along_its_path():
    model = _bf16_target().model
    ids = prompt(12)
    runner = Target(model)
    runner.prefill(ids[:-1])
    nodes = [3 + (5 * i) % 20 for i in range(len(TREE))]
    tree = runner.forward([ids[-1], *nodes], TREE).logits  # [1 + nodes, V]
    for row in range(len(tree)):
        path, node = [], row - 1
        while node >= 0:
            path.insert(0, nodes[node])
            node = TREE[node]
        expected = _ar_logits_along(model, ids[:-1], [ids[-1], *path])
        assert torch.equal(tree[row], expected), f"tree row {row} differs from ar's step"
    runner = Target(model)
    runner.prefill(ids[:-1])
    chain = runner.forward([ids[-1], *nodes[:5]]).logits
    for row in range(len(chain)):
        expected = _ar_logits_along(model, ids[:-1], [ids[-1], *nodes[:row]])
        assert torch.equal(chain[row], expected), f"chain row {row} differs from ar's step"


def test_a_bf16_verify_forward_groups_its_mask_once_for_all_layers(monkeypatch):
    model = _bf16_target().model
    assert model.config.num_hidden_layers > 1
    grouped = []

    def counted(mask):
        grouped.append(mask)
        return row_groups(mask)

    monkeypatch.setattr(cpu_attention, "row_groups", counted)
    runner = Target(model)
    ids = prompt(12)
    runner.prefill(ids[:-1])
    nodes = [3 + (5 * i) % 20 for i in range(len(TREE))]
    runner.forward([ids[-1], *nodes], TREE)
    assert len(grouped) == 1  # one mask, every layer's call served from the forward's memo
    runner.keep(runner.length - len(TREE) - 1, [])
    runner.forward([ids[-1], *nodes], TREE)
    assert len(grouped) == 2  # the next forward's mask is grouped afresh: nothing outlives one
    assert not forward_keywords(tiny_loaded(seed=3).model)  # float32: nothing to pass


@needs_native_bf16
def test_a_bf16_verify_forward_with_the_masked_kernel_alone_rounds_unlike_ar(monkeypatch):
    """Why the path attention exists: without it the same rows round differently."""
    monkeypatch.setattr(cpu_attention, "PATH_ROWS", 1)
    model = _bf16_target().model
    differ = 0
    for offset in range(6):
        ids = prompt(12, offset=offset)
        runner = Target(model)
        runner.prefill(ids[:-1])
        nodes = [3 + (5 * i + offset) % 20 for i in range(len(TREE))]
        tree = runner.forward([ids[-1], *nodes], TREE).logits
        differ += not torch.equal(
            tree[3], _ar_logits_along(model, ids[:-1], [ids[-1], *nodes[:1], nodes[2]])
        )
    assert differ


@needs_native_bf16
@pytest.mark.parametrize("method", ["classic", "eagle", "eagle2"])
def test_bf16_speculative_output_equals_bf16_ar(method):
    target = _bf16_target(seed=3)
    if method == "classic":
        extra = tiny_loaded(seed=3, model=perturbed(target.model, noise=0.3, seed=1))
    else:
        extra = tiny_head(target, "eagle1").to(torch.bfloat16)
        fast_cpu_paths(extra)
    config = DecodeConfig(max_new_tokens=48, k=4, tree_depth=3, tree_topk=3, tree_tokens=8)
    for offset in range(4):
        ids = prompt(8, offset=offset)
        reference = run(target, "ar", ids, config)
        speculative = run(target, method, ids, config, extra)
        assert speculative.token_ids == reference.token_ids


@needs_native_bf16
@pytest.mark.parametrize("arch", ["mistral", "gemma3"])
@pytest.mark.parametrize("method", ["classic", "eagle2"])
def test_bf16_speculative_output_equals_bf16_ar_past_a_sliding_window(arch, method):
    model = sliding_model(arch, seed=1).to(torch.bfloat16)
    fast_cpu_paths(model, rows_like_ar=True)
    target = loaded(model, arch)
    if method == "classic":
        draft = sliding_model(arch, seed=1, noise=0.5).to(torch.bfloat16)
        fast_cpu_paths(draft, rows_like_ar=True)
        extra = loaded(draft, arch + "-draft")
    else:
        extra = tiny_head(target).to(torch.bfloat16)
        fast_cpu_paths(extra)
    config = DecodeConfig(max_new_tokens=40, k=4, tree_depth=3, tree_topk=3, tree_tokens=8)
    for ids in (prompt(3), prompt(11, offset=5)):
        assert (
            run(target, method, ids, config, extra).token_ids
            == run(target, "ar", ids, config).token_ids
        )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_path_attention_gives_each_row_the_bits_of_its_own_unmasked_call(dtype):
    """Rows that see the same keys, the first keys only, or scattered ones: each as a
    one-row call over exactly its keys would compute it."""
    generator = torch.Generator().manual_seed(0)
    kv = 40
    query = torch.randn(1, 4, 6, 8, generator=generator).to(dtype)
    key = torch.randn(1, 2, kv, 8, generator=generator).to(dtype)
    value = torch.randn(1, 2, kv, 8, generator=generator).to(dtype)
    allowed = torch.zeros(6, kv, dtype=torch.bool)
    allowed[:, :30] = True  # a prefix every row sees
    allowed[1, 30] = allowed[2, 30] = True  # two rows with the same keys, the first 31
    allowed[3, [30, 33]] = allowed[4, [31, 34]] = allowed[5, [32, 35, 39]] = True  # scattered
    mask = torch.zeros(1, 1, 6, kv, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    groups = cpu_attention.row_groups(mask)
    got = cpu_attention.path_attention(query, key, value, groups, None, grouped=True)
    for row in range(6):
        keys = allowed[row].nonzero()[:, 0]
        expected = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, row : row + 1], key[:, :, keys], value[:, :, keys], enable_gqa=True
        )  # [1, heads, 1, d]
        assert torch.equal(got[0, row], expected[0, :, 0])
    padded = mask.clone()
    padded[0, 0, 2] = torch.finfo(dtype).min  # a row that sees nothing: left to the masked call
    assert cpu_attention.row_groups(padded) is None


def _padded_step(dtype, boolean: bool):
    """One generation step of 5 left-padded sequences over 24 cached keys: q, k, v, mask."""
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(5, 4, 1, 8, generator=generator) * 2
    key = torch.randn(5, 2, 24, 8, generator=generator) * 2
    value = torch.randn(5, 2, 24, 8, generator=generator)
    allowed = torch.ones(5, 1, 1, 24, dtype=torch.bool)
    for row, padding in enumerate((0, 3, 7, 12, 20)):
        allowed[row, :, :, :padding] = False
    mask = allowed if boolean else torch.zeros(allowed.shape).masked_fill(~allowed, -1e30)
    return query.to(dtype), key.to(dtype), value.to(dtype), mask.to(mask.dtype), allowed


@pytest.mark.parametrize("boolean", [True, False], ids=["bool-mask", "additive-mask"])
def test_a_bf16_batched_generation_step_attends_within_bf16_rounding_of_float32(boolean):
    """The two-product attention of a batched step: each sequence over its own keys only (its
    padding changes nothing), within about twice the kernel's bf16 error of float32."""
    module = tiny_model(seed=0).model.layers[0].self_attn
    q, k, v, mask, allowed = _padded_step(torch.float32, boolean)
    reference = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, enable_gqa=True
    ).transpose(1, 2)
    bf16 = [t.bfloat16() for t in (q, k, v)]
    bf16_mask = mask if boolean else mask.bfloat16()
    with torch.no_grad():
        assert cpu_attention.is_batched_step(bf16[0], bf16_mask, 0.0, {})
        got, _ = cpu_attention.grouped_sdpa_forward(module, *bf16, bf16_mask)
        kernel = torch.nn.functional.scaled_dot_product_attention(
            *bf16, attn_mask=allowed, enable_gqa=True
        ).transpose(1, 2)
    error = (got.float() - reference).abs().mean()
    assert error <= 3 * (kernel.float() - reference).abs().mean()
    assert error < 0.02
    v_changed = v.clone()
    v_changed[~allowed[:, 0, 0].unsqueeze(1).expand(-1, 2, -1)] = 100.0  # padding's values
    with torch.no_grad():
        again, _ = cpu_attention.grouped_sdpa_forward(
            module, bf16[0], bf16[1], v_changed.bfloat16(), bf16_mask
        )
    assert torch.equal(again, got)


@torch.no_grad()
def test_only_a_reduced_precision_step_of_several_sequences_takes_the_batched_path():
    q, _, _, mask, _ = _padded_step(torch.bfloat16, True)
    assert cpu_attention.is_batched_step(q, mask, 0.0, {})
    assert not cpu_attention.is_batched_step(q.float(), mask, 0.0, {})  # float32: the kernel
    assert not cpu_attention.is_batched_step(q[:1], mask[:1], 0.0, {})  # one sequence (decoding)
    assert not cpu_attention.is_batched_step(q, None, 0.0, {})
    assert not cpu_attention.is_batched_step(q, mask, 0.0, {"softcap": 30.0})
    assert not cpu_attention.is_batched_step(q, mask, 0.0, {"s_aux": torch.zeros(4)})  # sinks
    with torch.enable_grad():
        assert not cpu_attention.is_batched_step(q, mask, 0.0, {})
    prefill = torch.zeros(5, 4, 3, 8, dtype=torch.bfloat16)  # several query rows
    assert not cpu_attention.is_batched_step(prefill, mask, 0.0, {})


def test_a_bf16_batched_generation_answers_as_the_masked_kernel_does(monkeypatch):
    """Left-padded prompts answered together in bf16: the batched steps take the two-product
    attention, and the greedy answers are the ones torch's masked kernel gives."""
    from specdec_core.training.datasets import answer_batch

    model = tiny_model(seed=5, layers=3).to(torch.bfloat16)
    fast_cpu_paths(model, rows_like_ar=True)
    prompts = [list(range(3, 3 + n)) for n in (4, 9, 15, 6)]
    steps = []
    original = cpu_attention.batched_step_attention

    def counted(*args):
        steps.append(args[0].shape[0])
        return original(*args)

    monkeypatch.setattr(cpu_attention, "batched_step_attention", counted)
    fast = answer_batch(model, prompts, 12, pad=0, eos_ids={2})
    assert steps and set(steps) == {4}
    monkeypatch.setattr(cpu_attention, "is_batched_step", lambda *args: False)
    kernel = answer_batch(model, prompts, 12, pad=0, eos_ids={2})
    assert [answer for answer, _ in fast] == [answer for answer, _ in kernel]
