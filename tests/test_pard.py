"""PARD, a parallel draft model: its mask token read from config.json as vLLM reads it, k
tokens drafted in one forward equal to the same model run without the drafter's cache, the
target's greedy output at T = 0 and its distribution at T > 0 (a drafter whose tokens are not
drawn from the rows it reports fails the same test), and bad drafts refused in one line."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.sampling import probs
from specdec_core.drafters import pard
from specdec_core.drafters.pard import PardDrafter, build_pard
from specdec_core.errors import SpecdecError
from specdec_core.heads.pard import stated_mask_token
from specdec_core.models.loading import LoadedModel
from specdec_core.run.methods import METHODS, build_drafter
from specdec_core.run.runner import run
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.tiny import VOCAB, ar_and, perturbed, prompt, tiny_loaded, tiny_model

MASK = 0  # the tiny vocabulary's <unk>: never in a prompt, as PARD's reserved tokens


def pard_draft(target: LoadedModel, noise: float = 0.6, mask: int | None = MASK) -> LoadedModel:
    """The target with noise, its config naming `mask` as PARD's trainer writes it."""
    model = perturbed(target.model, noise=noise, seed=2)
    if mask is not None:
        model.config.pard_token = mask
    return tiny_loaded(seed=2, model=model)


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=1)


@pytest.fixture(scope="module")
def draft(target):
    return pard_draft(target)


def reference_block(model, ids: list[int], mask: int, k: int) -> torch.Tensor:
    """[k, V] logits of the last k positions of one cache-free forward over ids + k - 1 masks."""
    with torch.inference_mode():
        return model(torch.tensor([ids + [mask] * (k - 1)])).logits[0, -k:].float()


# --- the mask token ------------------------------------------------------------------------------


def test_the_mask_token_is_read_from_a_saved_pard_config(target, tmp_path):
    model = tiny_model(2)
    model.config.pard_token = 7
    model.config.spd_type = "pard"  # what PARD's trainer adds beside it
    model.save_pretrained(tmp_path / "pard")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "pard")
    drafter = PardDrafter(loaded, target.vocab_size)
    assert drafter.describe(DecodeConfig()) == {"mask_token": 7}


def test_the_mask_token_keys_are_read_in_vllms_order():
    assert stated_mask_token({"pard_token": 5}) == 5
    assert stated_mask_token({"ptd_token_id": 6}) == 6
    assert stated_mask_token({"pard_token": 5, "mask_token_id": 9, "ptd_token_id": 6}) == 9
    assert stated_mask_token({"mask_token_id": None, "pard_token": 5}) == 5
    assert stated_mask_token({"vocab_size": 32}) is None


def test_a_mask_token_that_is_no_id_is_one_line_naming_its_key():
    with pytest.raises(SpecdecError, match="pard_token = \\[128020\\]") as error:
        stated_mask_token({"pard_token": [128020]})
    assert "\n" not in str(error.value)


def test_a_draft_without_a_mask_token_is_one_line_saying_what_to_set(target):
    plain = pard_draft(target, mask=None)
    with pytest.raises(SpecdecError) as error:
        run(target, "pard", prompt(), DecodeConfig(max_new_tokens=4), plain)
    message = str(error.value)
    assert "\n" not in message
    assert "pard_token" in message and "--method-param mask_token=ID" in message


def test_a_mask_token_outside_the_drafts_embedding_is_refused(target):
    outside = pard_draft(target, mask=VOCAB + 3)
    with pytest.raises(SpecdecError, match=f"mask token {VOCAB + 3}, outside"):
        run(target, "pard", prompt(), DecodeConfig(max_new_tokens=4), outside)
    config = DecodeConfig(max_new_tokens=4, method_params={"mask_token": VOCAB})
    with pytest.raises(SpecdecError, match="--method-param mask_token gives mask token"):
        run(target, "pard", prompt(), config, pard_draft(target))


def test_the_method_parameter_gives_a_plain_draft_its_mask_token(target, draft):
    config = DecodeConfig(max_new_tokens=24, k=3)
    given = DecodeConfig(max_new_tokens=24, k=3, method_params={"mask_token": MASK})
    stated = run(target, "pard", prompt(), config, draft)
    overridden = run(target, "pard", prompt(), given, pard_draft(target, mask=None))
    assert overridden.token_ids == stated.token_ids
    assert overridden.config["mask_token"] == MASK


def test_a_draft_of_another_tokenizer_is_refused(target, draft):
    from tests.tiny import tiny_tokenizer

    other = tiny_tokenizer()
    other.add_tokens(["extra"])
    stranger = LoadedModel(draft.model, other, "x", "memory", draft.device, draft.dtype)
    with pytest.raises(SpecdecError, match="needs the target's tokenizer"):
        build_pard(target, stranger)


def test_pard_is_a_parallel_drafting_method_with_a_draft():
    method = METHODS["pard"]
    assert method.family == "parallel drafting" and method.needs == "draft"
    assert dict(method.params) == {"mask_token": -1.0}


# --- one forward, k tokens ----------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_k_tokens_come_from_one_forward_equal_to_a_forward_without_the_cache(target, draft, k):
    drafter = build_drafter("pard", target, draft)
    forwards = []
    hook = draft.model.register_forward_hook(lambda *args: forwards.append(1))
    config = DecodeConfig(k=k, temperature=1.0)
    generator = torch.Generator().manual_seed(0)
    ids = prompt(length=6)
    try:
        drafter.begin(ids, None)
        for step in range(4):
            forwards.clear()
            proposal = drafter.propose(ids, config, generator)
            assert len(forwards) == 1 and len(proposal.tokens) == k
            expected = probs(reference_block(draft.model, ids, MASK, k), 1.0)
            torch.testing.assert_close(proposal.q, expected, atol=1e-5, rtol=1e-4)
            # the target keeps some drafts (none, one, all) and adds its own token
            accepted = min(step, k)
            ids = [*ids, *proposal.tokens[:accepted], 3 + step]
            drafter.commit(ids, accepted, None)
    finally:
        hook.remove()


def test_greedy_drafts_are_each_positions_argmax(target, draft):
    drafter = build_drafter("pard", target, draft)
    ids = prompt(length=5)
    drafter.begin(ids, None)
    proposal = drafter.propose(ids, DecodeConfig(k=5), torch.Generator())
    assert proposal.tokens == reference_block(draft.model, ids, MASK, 5).argmax(-1).tolist()


# --- lossless ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_pard_output_equals_the_targets_greedy_output(target, draft, k, offset):
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, k=k)
    reference, speculative = ar_and(target, "pard", ids, config, draft)
    assert speculative.token_ids == reference.token_ids
    assert speculative.steps <= reference.steps


def test_a_close_draft_keeps_the_output_in_fewer_target_forwards(target):
    close = pard_draft(target, noise=0.05)
    config = DecodeConfig(max_new_tokens=40, k=3)
    reference, speculative = ar_and(target, "pard", prompt(), config, close)
    assert speculative.token_ids == reference.token_ids
    assert speculative.accepted_per_position[0] >= speculative.steps // 2
    assert speculative.steps < reference.steps


SAMPLED = prompt(length=4)


def _first_two(target, draft, temperature, top_p, samples):
    config = DecodeConfig(max_new_tokens=2, k=3, temperature=temperature, top_p=top_p)
    drafter = build_drafter("pard", target, draft)
    return sample_first_two_tokens(target, drafter, SAMPLED, config, samples=samples, seed=7)


@pytest.mark.parametrize(
    "temperature, top_p, samples",
    [(1.0, 1.0, 600), pytest.param(0.7, 0.9, 2500, marks=pytest.mark.slow)],
)
def test_sampled_tokens_follow_the_targets_distribution(target, draft, temperature, top_p, samples):
    firsts, seconds, accepted = _first_two(target, draft, temperature, top_p, samples)
    first, second = target_marginals(target.model, SAMPLED, temperature, top_p)
    assert accepted > samples // 4, "the test must exercise accepted drafts"
    assert chi_square_pvalue(firsts, first) > 0.001
    assert chi_square_pvalue(seconds, second) > 0.001


def _each_positions_argmax(q, greedy, generator):
    """A wrong rule: the rows are reported as drawn from, but every token is the row's argmax."""
    return q.argmax(-1).tolist()


def test_the_sampling_test_detects_drafts_not_drawn_from_their_rows(target, draft, monkeypatch):
    monkeypatch.setattr(pard, "draft_block", _each_positions_argmax)
    firsts, seconds, _ = _first_two(target, draft, 1.0, 1.0, 600)
    monkeypatch.undo()
    first, second = target_marginals(target.model, SAMPLED, 1.0, 1.0)
    with pytest.raises(AssertionError):
        assert chi_square_pvalue(firsts, first) > 0.001
        assert chi_square_pvalue(seconds, second) > 0.001
