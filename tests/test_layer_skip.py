"""Self-speculative drafting with a fixed early exit or skip list, on tiny random models."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, MistralConfig, MistralForCausalLM

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.target import Target
from specdec_core.drafters.layer_skip import LayerSkipDrafter, parse_layers
from specdec_core.drafters.layer_subset import SkipSet, layer_lengths
from specdec_core.errors import SpecdecError
from specdec_core.loop.decode import generate
from specdec_core.models.loading import LoadedModel
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.tiny import prompt, tiny_config_fields, tiny_loaded, tiny_tokenizer

LAYERS = 6
SETTINGS = [
    {"exit_layer": 2},
    {"exit_layer": 4},
    {"skip_layers": [0, 2]},  # layer 0 skipped: positions cannot come from its cache
    {"skip_layers": [1, 3, 5]},
]


@pytest.fixture(scope="module")
def six():
    return tiny_loaded(seed=1, layers=LAYERS)


def decode(target: LoadedModel, drafter, ids: list[int], config: DecodeConfig):
    steps, summary = [], None
    for event in generate(target, drafter, ids, config):
        steps += [event] if isinstance(event, Step) else []
        summary = event.summary if isinstance(event, Finished) else summary
    return summary, steps


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
@pytest.mark.parametrize("k", [1, 3, 6])
def test_fixed_layer_sets_decode_exactly_like_ar(six, setting, k):
    config = DecodeConfig(max_new_tokens=40, k=k)
    steps = reference_steps = 0
    for offset in range(3):
        ids = prompt(length=5 + 3 * offset, offset=offset)
        reference = run(six, "ar", ids, config)
        summary, _ = decode(six, LayerSkipDrafter(LAYERS, **setting), ids, config)
        assert summary.token_ids == reference.token_ids
        steps, reference_steps = steps + summary.steps, reference_steps + reference.steps
    assert steps < reference_steps  # drafts were accepted


def snapshot(cache) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    return [(n, layer.keys.clone(), layer.values.clone()) for n, layer in zip(
        layer_lengths(cache), cache.layers, strict=True
    )]  # fmt: skip


def assert_same_cache(before, cache) -> None:
    after = snapshot(cache)
    assert [n for n, _, _ in after] == [n for n, _, _ in before]
    for (_, keys, values), (_, keys_now, values_now) in zip(before, after, strict=True):
        assert torch.equal(keys, keys_now) and torch.equal(values, values_now)


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_propose_leaves_the_cache_bit_identical(six, setting, temperature):
    ids = prompt(length=9)
    target = Target(six.model)
    target.prefill(ids[:-1])
    drafter = LayerSkipDrafter(LAYERS, confidence=0.0, **setting)
    drafter.attach(target)
    drafter.begin(ids, None)
    before = snapshot(target.cache)
    config = DecodeConfig(k=5, temperature=temperature)
    proposal = drafter.propose(ids, config, torch.Generator().manual_seed(0))
    assert len(proposal.tokens) == 5
    assert (proposal.q is None) == (temperature == 0.0)
    assert_same_cache(before, target.cache)


def test_the_verify_forward_after_a_draft_computes_what_it_computes_without_one(six):
    ids = prompt(length=9)
    drafted, fresh = Target(six.model), Target(six.model)
    drafted.prefill(ids[:-1])
    fresh.prefill(ids[:-1])
    drafter = LayerSkipDrafter(LAYERS, skip_layers=[0, 3], confidence=0.0)
    drafter.attach(drafted)
    drafter.begin(ids, None)
    config = DecodeConfig(k=4, temperature=1.0)
    proposal = drafter.propose(ids, config, torch.Generator().manual_seed(3))
    chain = [ids[-1], *proposal.tokens]
    assert torch.equal(drafted.forward(chain).logits, fresh.forward(chain).logits)


def test_a_draft_below_the_confidence_threshold_ends_after_that_token(six):
    ids = prompt(length=9)
    config = DecodeConfig(max_new_tokens=30, k=5)
    _, always = decode(six, LayerSkipDrafter(LAYERS, exit_layer=3, confidence=1.0), ids, config)
    assert {step.drafted for step in always} == {1}  # no softmax reaches 1: one token each
    _, never = decode(six, LayerSkipDrafter(LAYERS, exit_layer=3, confidence=0.0), ids, config)
    assert max(step.drafted for step in never) == 5


def test_describe_names_the_skipped_layers(six):
    config = DecodeConfig()
    early = LayerSkipDrafter(LAYERS, exit_layer=4).describe(config)
    assert early["exit_layer"] == 4 and early["skipped_layers"] == [4, 5]
    listed = LayerSkipDrafter(LAYERS, skip_layers=[3, 1]).describe(config)
    assert listed["exit_layer"] is None and listed["skipped_layers"] == [1, 3]
    assert LayerSkipDrafter(LAYERS).describe(config)["exit_layer"] == LAYERS * 3 // 4


def test_method_params_override_the_exit_layer_and_confidence(six):
    drafter = LayerSkipDrafter(LAYERS, skip_layers=[1, 2])
    config = DecodeConfig(max_new_tokens=20, k=4, method_params={"exit_layer": 5})
    described = drafter.describe(config)
    assert described["exit_layer"] == 5 and described["skipped_layers"] == [5]
    ids = prompt(length=9)
    summary, _ = decode(six, drafter, ids, config)
    assert summary.config["skipped_layers"] == [5]
    assert summary.token_ids == run(six, "ar", ids, config).token_ids
    _, steps = decode(six, drafter, ids, replace(config, method_params={"confidence": 1.0}))
    assert {step.drafted for step in steps} == {1}
    with pytest.raises(SpecdecError, match="exit layer"):
        drafter.describe(replace(config, method_params={"exit_layer": LAYERS}))
    with pytest.raises(SpecdecError, match="whole number"):
        drafter.describe(replace(config, method_params={"exit_layer": 2.5}))


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"exit_layer": 0}, "exit layer"),
        ({"exit_layer": LAYERS}, "exit layer"),
        ({"skip_layers": [2, LAYERS]}, "does not exist"),
        ({"skip_layers": list(range(LAYERS))}, "every layer"),
        ({"exit_layer": 2, "skip_layers": [3]}, "not both"),
        ({"confidence": 1.5}, "confidence"),
    ],
)
def test_impossible_layer_choices_are_refused(setting, message):
    with pytest.raises(SpecdecError, match=message):
        LayerSkipDrafter(LAYERS, **setting)


def test_skip_lists_are_read_with_ranges():
    assert parse_layers("4,6,8-10, 2") == (2, 4, 6, 8, 9, 10)
    with pytest.raises(SpecdecError, match="like 4,6,8-12"):
        parse_layers("4;6")
    with pytest.raises(SpecdecError, match="empty"):
        parse_layers("9-3")


def test_skip_sets_say_what_they_leave_out():
    skip = SkipSet(attention=frozenset({1, 2}), mlp=frozenset({2, 3}))
    assert skip.record() == {"skipped_layers": [2], "skipped_attention": [1], "skipped_mlp": [3]}
    assert skip.size == 4 and SkipSet.early_exit(3, 5).whole == (3, 4)


WINDOW = 4
COMMON = {
    **tiny_config_fields(),
    "num_hidden_layers": 4,
    "pad_token_id": 0,
    "sliding_window": WINDOW,
}


def windowed(kind: str) -> LoadedModel:
    """A 4-layer model with a 4-token window: every layer (Mistral), or alternating layers
    with soft-capped logits (Gemma 2)."""
    torch.manual_seed(3)
    if kind == "mistral":
        model = MistralForCausalLM(MistralConfig(**COMMON))
    else:
        config = Gemma2Config(
            head_dim=8, query_pre_attn_scalar=8, final_logit_softcapping=2.0, **COMMON
        )
        model = Gemma2ForCausalLM(config)
    model.eval().generation_config.eos_token_id = 2
    return LoadedModel(model, tiny_tokenizer(), kind, "memory", torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("kind", ["mistral", "gemma2"])
@pytest.mark.parametrize("setting", [{"exit_layer": 2}, {"skip_layers": [0, 2]}], ids=str)
def test_sliding_window_and_softcapped_targets_decode_exactly_like_ar(kind, setting):
    target = windowed(kind)
    ids = prompt(length=12)  # longer than the window already
    config = DecodeConfig(max_new_tokens=24, k=3)
    reference = run(target, "ar", ids, config)
    summary, _ = decode(target, LayerSkipDrafter(4, confidence=0.0, **setting), ids, config)
    assert summary.token_ids == reference.token_ids


def sampled(samples: int, seed: int):
    """p-values of the first and second tokens against the target, and accepted drafts, for a
    4-layer target drafting through its first layer."""
    target = tiny_loaded(seed=1, layers=4)
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=1.0)
    drafter = LayerSkipDrafter(4, exit_layer=1, confidence=0.0)
    firsts, seconds, accepted = sample_first_two_tokens(target, drafter, ids, config, samples, seed)
    first, second = target_marginals(target.model, ids, 1.0, 1.0)
    return chi_square_pvalue(firsts, first), chi_square_pvalue(seconds, second), accepted


@pytest.mark.slow
def test_sampled_tokens_follow_the_target_distribution():
    samples = 1500
    first, second, accepted = sampled(samples, seed=7)
    assert accepted > samples // 4, "the test must exercise accepted drafts"
    assert first > 1e-3 and second > 1e-3


def test_the_sampling_test_detects_a_draft_sampling_off_its_reported_q(monkeypatch):
    """Power check: a draft that reports q but draws its tokens from q² (renormalised), so
    the verifier's min(1, p / q) is computed on the wrong q, must fail the same test."""
    import specdec_core.drafters.layer_skip as layer_skip
    from specdec_core.decoding.sampling import sample

    monkeypatch.setattr(layer_skip, "sample", lambda q, g: sample(q * q / (q * q).sum(), g))
    first, second, _ = sampled(300, seed=7)
    assert min(first, second) < 1e-3


@pytest.fixture(scope="module")
def mixed_prompts(embedded):
    from specdec_core.run.prompts import encode_prompt, read_prompt_file

    texts = read_prompt_file("docs/bench/mixed10.jsonl", limit=2)
    return [encode_prompt(embedded.tokenizer, text) for text in texts]


@pytest.mark.slow
def test_the_embedded_model_drafting_through_its_first_layers_decodes_like_ar(
    embedded, mixed_prompts
):
    config = DecodeConfig(max_new_tokens=48, k=4)
    layers = embedded.model.config.num_hidden_layers
    for ids in mixed_prompts:
        reference = run(embedded, "ar", ids, config)
        drafter = LayerSkipDrafter(layers, exit_layer=layers * 3 // 4)
        summary, _ = decode(embedded, drafter, ids, config)
        assert summary.token_ids == reference.token_ids
        assert summary.steps < reference.steps
