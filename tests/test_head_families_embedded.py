"""The bundled Medusa heads and MLP speculator on the real embedded model: greedy output is the
target's own, and sampled tokens follow the target's distribution (chi-square of the first two
tokens against the target's exact marginals; the rule's power check is on tiny models, in
test_medusa.py and test_mlp_speculator.py)."""

from __future__ import annotations

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.drafters.medusa import MedusaDrafter
from specdec_core.drafters.mlp_speculator import MLPSpeculatorDrafter
from specdec_core.heads.medusa.formats import load_medusa
from specdec_core.heads.mlp_speculator.formats import load_speculator
from specdec_core.loop.decode import generate
from specdec_core.run.prompts import encode_chat
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals

pytestmark = pytest.mark.slow


def _drafter(family: str, embedded):
    if family == "medusa":
        return MedusaDrafter(load_medusa("embedded", embedded), embedded.model)
    return MLPSpeculatorDrafter(load_speculator("embedded", embedded))


def _chat(embedded, text: str) -> list[int]:
    return encode_chat(embedded.tokenizer, [{"role": "user", "content": text}], True)


def test_the_bundled_speculator_decodes_exactly_as_the_embedded_model(embedded):
    ids = _chat(embedded, "Name three rivers in Europe and one fact about each.")
    config = DecodeConfig(max_new_tokens=48, k=3)
    reference = run(embedded, "ar", ids, config)
    drafter = _drafter("mlp-speculator", embedded)
    ours = list(generate(embedded, drafter, ids, config))[-1].summary
    assert ours.token_ids == reference.token_ids
    assert ours.mean_accept_length > 1.0


@pytest.mark.parametrize("family", ["medusa", "mlp-speculator"])
def test_sampled_tokens_of_the_bundled_heads_follow_the_embedded_models_distribution(
    embedded, family
):
    # a short plain prompt: each sample is one prefill and one step of the real model
    ids = embedded.tokenizer("The capital of France is")["input_ids"]
    first, second = target_marginals(embedded.model, ids, 1.0, 0.9, embedded.tokenizer.eos_token_id)
    config = DecodeConfig(max_new_tokens=2, k=3, tree_tokens=8, temperature=1.0, top_p=0.9)
    firsts, seconds, accepted = sample_first_two_tokens(
        embedded, _drafter(family, embedded), ids, config, samples=150, seed=3
    )
    assert accepted > 20, "the test must exercise accepted drafts"
    assert chi_square_pvalue(firsts, first) > 0.001
    assert chi_square_pvalue(seconds, second) > 0.001
