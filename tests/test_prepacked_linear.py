"""Prepacked oneDNN linears: same outputs as torch, same parameters, exact speculative decoding."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaForCausalLM

from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.eagle2.drafter import Eagle2Drafter
from specdec_core.loop.decode import generate
from specdec_core.models.prepacked_linear import PrepackedLinear, fast_bf16, prepack
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt, tiny_config, tiny_loaded, tiny_model

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)


@pytest.fixture
def calls(monkeypatch):
    """Count calls of the oneDNN kernel, to prove the packed path ran."""
    counted = {"n": 0}
    kernel = torch.ops.mkldnn._linear_pointwise

    def counting(*args):
        counted["n"] += 1
        return kernel(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", counting)
    return counted


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (1, 8), (3,), (2, 5)])
def test_prepacked_linear_gives_torch_linear_outputs(calls, bias, shape):
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 80, bias=bias)
    packed = PrepackedLinear(linear)
    x = torch.randn(*shape, 48)
    with torch.inference_mode():
        expected = torch.nn.functional.linear(x, linear.weight, linear.bias)
        got = packed(x)
    assert calls["n"] == 1
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not fast_bf16(torch.device("cpu")), reason="this CPU has no native bf16")
def test_bf16_linears_are_packed_where_the_cpu_multiplies_bf16(calls):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 96).to(torch.bfloat16)
    packed = PrepackedLinear(linear)
    x = torch.randn(5, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        expected = torch.nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
        got = packed(x)
    assert calls["n"] == 1 and got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), expected, rtol=2e-2, atol=2e-2)


def test_prepack_keeps_parameters_state_dict_and_tied_weights():
    config = tiny_config()
    config.tie_word_embeddings = True
    model = LlamaForCausalLM(config).eval()
    keys = set(model.state_dict())
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert prepack(model) == linears > 0
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert set(model.state_dict()) == keys
    assert model.lm_head.weight is model.get_input_embeddings().weight


def test_a_linear_shared_by_several_modules_becomes_one_prepacked_linear_everywhere():
    shared = torch.nn.Linear(16, 8)
    model = torch.nn.ModuleDict(
        {"stages": torch.nn.ModuleList([shared] * 3), "other": torch.nn.Linear(8, 4)}
    )
    assert prepack(model) == 2
    first = model["stages"][0]
    assert isinstance(first, PrepackedLinear) and first.weight is shared.weight
    assert all(stage is first for stage in model["stages"])


def test_with_autograd_it_falls_back_to_torch_and_trains(calls):
    linear = PrepackedLinear(torch.nn.Linear(16, 8))
    x = torch.randn(4, 16, requires_grad=True)
    linear(x).sum().backward()
    assert calls["n"] == 0
    assert x.grad is not None and linear.weight.grad is not None


def test_a_deep_copy_packs_its_own_copied_weights():
    linear = PrepackedLinear(torch.nn.Linear(16, 8))
    twin = copy.deepcopy(linear)
    assert twin.packed.weight is twin.weight and twin.weight is not linear.weight
    with torch.no_grad():
        twin.weight.mul_(2.0)
        twin.eval()  # packed again from the copy's changed weights
        x = torch.randn(3, 16)
        torch.testing.assert_close(twin(x), torch.nn.functional.linear(x, twin.weight, twin.bias))
        torch.testing.assert_close(
            linear(x), torch.nn.functional.linear(x, linear.weight, linear.bias)
        )


def test_an_in_place_weight_update_is_packed_again_by_eval(calls):
    linear = PrepackedLinear(torch.nn.Linear(16, 8))
    x = torch.randn(2, 16)
    with torch.no_grad():
        linear.weight.mul_(2.0)
        linear.eval()  # what code that changes weights in place calls afterwards
        expected = torch.nn.functional.linear(x, linear.weight, linear.bias)
        torch.testing.assert_close(linear(x), expected, rtol=1e-5, atol=1e-5)
    assert calls["n"] == 1


def test_loaded_state_and_moved_weights_are_packed_again(calls):
    model = torch.nn.Sequential(PrepackedLinear(torch.nn.Linear(16, 8)))
    linear = model[0]
    x = torch.randn(2, 16)
    state = {"0.weight": torch.randn(8, 16), "0.bias": torch.randn(8)}
    with torch.no_grad():
        model.load_state_dict(state)  # copied into the parameters, as adaptation publishes
        torch.testing.assert_close(linear(x), x @ state["0.weight"].T + state["0.bias"])
        model.load_state_dict({k: v * 2 for k, v in state.items()}, assign=True)  # new objects
        torch.testing.assert_close(linear(x), (x @ state["0.weight"].T + state["0.bias"]) * 2)
        model.to(torch.float64).to(torch.float32)  # new data under the same parameters
        expected = torch.nn.functional.linear(x, linear.weight, linear.bias)
        torch.testing.assert_close(linear(x), expected, rtol=1e-5, atol=1e-5)
    assert calls["n"] == 3


def test_a_module_in_training_runs_torchs_linear_until_eval(calls):
    linear = PrepackedLinear(torch.nn.Linear(16, 8))
    x = torch.randn(2, 16)
    with torch.no_grad():
        linear.train()
        linear(x)
        assert calls["n"] == 0
        linear.eval()
        linear(x)
    assert calls["n"] == 1


def test_prepack_is_off_for_other_dtypes_and_when_switched_off(monkeypatch):
    assert prepack(tiny_model(seed=1).to(torch.float16)) == 0
    bf16 = prepack(tiny_model(seed=1).to(torch.bfloat16))
    assert (bf16 > 0) == fast_bf16(torch.device("cpu"))
    monkeypatch.setenv("SPECDEC_PREPACK", "0")
    assert prepack(tiny_model(seed=1)) == 0


@pytest.mark.parametrize("method", ["ngram", "eagle2", "classic"])
def test_greedy_speculative_output_equals_ar_on_a_prepacked_target(calls, method):
    target = tiny_loaded(seed=1)
    prepack(target.model)
    extra = {"eagle2": None, "classic": target, "ngram": None}[method]
    ids = prompt(length=6)
    config = DecodeConfig(max_new_tokens=40)
    reference = run(target, "ar", ids, config)
    if method == "eagle2":
        drafter = Eagle2Drafter(tiny_head(target), target.model)
        summary = list(generate(target, drafter, ids, config))[-1].summary
    else:
        summary = run(target, method, ids, config, extra)
    assert calls["n"] > 0
    assert summary.token_ids == reference.token_ids
