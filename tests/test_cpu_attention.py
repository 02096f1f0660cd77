"""Grouped-query SDPA on the CPU: the same logits as transformers' sdpa, for chains and trees."""

from __future__ import annotations

import copy

import torch

from specdec_core.config import DecodeConfig
from specdec_core.cpu_attention import NAME, use_grouped_sdpa
from specdec_core.runner import run
from specdec_core.target import Target
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
