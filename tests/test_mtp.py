"""Native MTP layers read from the target's own checkpoint: the engines' arithmetic, the
names refused, and lossless chain and tree drafting (tiny checkpoints of tests/mtp_tiny.py)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from specdec_core.decoding import attention_mask, kv_cache
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.drafters.mtp import MtpDrafter, MtpTreeDrafter, build_chain, build_tree
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.heads.mtp.layouts import DEEPSEEK, MIMO, QWEN3_NEXT
from specdec_core.heads.mtp.load import load_mtp
from specdec_core.loop.decode import generate
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from tests.mtp_tiny import FAMILIES, TARGET_LAYERS, write_checkpoint
from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals
from tests.tiny import prompt, tiny_model, tiny_tokenizer

LAYOUT = {
    "deepseek_v3": DEEPSEEK, "glm4_moe": DEEPSEEK, "qwen3_next": QWEN3_NEXT,
    "qwen3_5": QWEN3_NEXT, "mimo": MIMO,
}  # fmt: skip


def _load(directory):
    return load_model(str(directory), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def drafting(tmp_path_factory):
    """family -> (target, MTP module) of an aligned checkpoint (drafts get accepted)."""
    loaded = {}
    for family in FAMILIES:
        directory = tmp_path_factory.mktemp("mtp") / family
        write_checkpoint(family, directory, seed=1, aligned=True)
        target = _load(directory)
        loaded[family] = (target, load_mtp(None, target))
    return loaded


# -- the engines' arithmetic ----------------------------------------------------------------
def _rms(x: torch.Tensor, weight: torch.Tensor, zero_centred: bool) -> torch.Tensor:
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * (1.0 + weight if zero_centred else weight)


@torch.inference_mode()
def _target_states(target, ids):
    """The target's last hidden states after its final norm, and before it (MiMo's)."""
    seen = {}
    norm = target.model.model.norm
    hook = norm.register_forward_pre_hook(lambda module, args: seen.update(pre=args[0]))
    try:
        out = target.model.model(input_ids=torch.tensor([ids]))
    finally:
        hook.remove()
    return out.last_hidden_state[0], seen["pre"][0]


@torch.inference_mode()
def _engine(family, written, target, hidden, tokens):
    """vLLM's forward of the MTP layer (deepseek_mtp.py, glm4_moe_mtp.py, qwen3_next_mtp.py,
    qwen3_5_mtp.py, mimo_mtp.py) restated with the block as transformers reads it in a model
    one layer longer; -> (state fed back, logits), rows at positions 0..n-1."""
    layout, wrapper = LAYOUT[family], written.wrapper
    zero_centred = LAYOUT[family] is QWEN3_NEXT  # Qwen3-Next, Qwen3.5: weight 1 + w
    n = len(tokens)
    positions = torch.arange(n)[None]
    emb = target.model.model.embed_tokens(torch.tensor([tokens]))
    if layout.zero_first_position:
        emb = emb.clone()
        emb[positions == 0] = 0
    e = _rms(emb, wrapper["embedding_norm"], zero_centred)
    h = _rms(hidden[None], wrapper["hidden_norm"], zero_centred)
    x = torch.cat([h, e] if family == "mimo" else [e, h], dim=-1) @ wrapper["fc"].T
    full = written.full.model
    rope = full.rotary_emb(x, positions)
    mask = attention_mask.causal(n, 0, x.dtype, x.device)
    out = full.layers[TARGET_LAYERS](
        x, attention_mask=mask, position_ids=positions, position_embeddings=rope
    )
    normed = _rms(out, wrapper["output_norm"], zero_centred)
    if family in ("deepseek_v3", "glm4_moe"):  # shared_head: norm, then its own head
        head = wrapper.get("head", target.model.lm_head.weight)
        return out[0], (normed @ head.T)[0]
    return normed[0], target.model.lm_head(normed)[0]


@pytest.mark.parametrize(
    "family, head",
    [("deepseek_v3", True), ("deepseek_v3", False), ("glm4_moe", True), ("qwen3_next", False),
     ("qwen3_5", False), ("mimo", False)],
)  # fmt: skip
def test_mtp_logits_equal_the_engines_forward_including_a_state_fed_back(tmp_path, family, head):
    written = write_checkpoint(family, tmp_path / family, seed=0, head=head)
    target = _load(written.directory)
    module = load_mtp(None, target)
    assert type(module.block) is type(target.model.model.layers[0])
    assert (module.head is not None) == head
    ids = prompt(length=7)
    post, pre = _target_states(target, ids)
    engine_hidden = pre if LAYOUT[family].prenorm_feature else post
    tokens = ids[1:]
    state, logits = _engine(family, written, target, engine_hidden[:-1], tokens)

    with torch.inference_mode():
        cache = module.new_cache()
        features = module.from_target(post[:-1])[None]
        positions = torch.arange(len(tokens))[None]
        out = module.step(features, torch.tensor([tokens]), positions, None, cache)
        torch.testing.assert_close(module.logits(out.hidden[0]), logits, rtol=1e-4, atol=1e-4)
        # one draft step: the layer's own state fed back, the next token, through its cache
        after = positions[:, -1:] + 1
        fed = module.step(out.hidden[:, -1:], torch.tensor([[5]]), after, None, cache)
        drafted = module.logits(fed.hidden[0, -1])
    hidden = torch.cat([engine_hidden[:-1], state[-1:]])
    _, again = _engine(family, written, target, hidden, [*tokens, 5])
    torch.testing.assert_close(drafted, again[-1], rtol=1e-4, atol=1e-4)


def test_deepseek_layout_reads_the_target_embedding_not_its_stored_copy(drafting):
    target, module = drafting["deepseek_v3"]
    assert module.embedding is target.model.get_input_embeddings()
    assert kv_cache.cache_length(module.new_cache()) == 0


# -- names refused ----------------------------------------------------------------------
def _edit(directory, change) -> None:
    path = directory / "model.safetensors"
    state = load_file(str(path))
    change(state)
    save_file(state, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize(
    "family, key",
    [("qwen3_next", "mtp.pre_fc_norm_extra.weight"),
     ("deepseek_v3", "model.layers.2.mlp.bogus.weight"),
     ("mimo", "model.mtp_layers.0.extra_layernorm.weight"),
     ("deepseek_v3", "model.layers.2.eh_proj.weight_scale_inv")],
)  # fmt: skip
def test_an_unknown_mtp_weight_is_refused_by_name(tmp_path, family, key):
    written = write_checkpoint(family, tmp_path / family)
    _edit(written.directory, lambda state: state.update({key: torch.zeros(4)}))
    target = _load(written.directory)
    with pytest.raises(SpecdecError, match=key.replace(".", r"\.")) as error:
        load_mtp(None, target)
    if key.endswith("scale_inv"):
        assert "quantized" in str(error.value)


@pytest.mark.parametrize(
    "family, key",
    [("qwen3_next", "mtp.fc.weight"), ("deepseek_v3", "model.layers.2.hnorm.weight"),
     ("mimo", "model.mtp_layers.0.self_attn.q_proj.bias"),
     ("glm4_moe", "model.layers.2.mlp.experts.3.up_proj.weight")],
)  # fmt: skip
def test_a_missing_mtp_weight_is_refused_by_name(tmp_path, family, key):
    written = write_checkpoint(family, tmp_path / family)
    _edit(written.directory, lambda state: state.pop(key))
    target = _load(written.directory)
    shown = key.rsplit(".", 1)[0] if "experts" in key else key  # experts: which one
    with pytest.raises(SpecdecError, match="lacks") as error:
        load_mtp(None, target)
    assert shown.split(".experts")[0] in str(error.value)


def test_a_model_without_mtp_layers_is_refused(tmp_path):
    tiny_model(1).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    with pytest.raises(SpecdecError, match="has no MTP layers"):
        load_mtp(None, _load(tmp_path))


def test_a_config_counting_other_mtp_layers_is_refused(tmp_path):
    written = write_checkpoint("mimo", tmp_path / "mimo")
    path = written.directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_nextn_predict_layers": 2}))
    with pytest.raises(SpecdecError, match="config says 2"):
        load_mtp(None, _load(written.directory))


# -- lossless drafting --------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_mtp_chain_and_tree_equal_the_target_greedy(drafting, family):
    target, module = drafting[family]
    ids = prompt(length=6)
    reference = run(target, "ar", ids, DecodeConfig(max_new_tokens=30))
    for drafter, config in (
        (build_chain(target, module, None, ForwardCosts(), AcceptanceEstimates()),
         DecodeConfig(max_new_tokens=30, k=3)),
        (build_tree(target, module, None, ForwardCosts(), AcceptanceEstimates()),
         DecodeConfig(max_new_tokens=30, tree_depth=3, tree_topk=4, tree_tokens=10)),
    ):  # fmt: skip
        summary = list(generate(target, drafter, ids, config))[-1].summary
        assert summary.token_ids == reference.token_ids
        assert summary.mean_accept_length > 1.0  # drafts were accepted, not only corrected


def _sampled(target, drafter, config, samples, seed):
    """p-values of the first and the second token's marginals against the target's."""
    firsts, seconds, accepted = sample_first_two_tokens(
        target, drafter, prompt(4), config, samples, seed
    )
    first, second = target_marginals(target.model, prompt(4), config.temperature, config.top_p)
    return chi_square_pvalue(firsts, first), chi_square_pvalue(seconds, second), accepted


@pytest.mark.slow
def test_mtp_chain_sampling_follows_the_target_distribution(drafting):
    target, module = drafting["mimo"]  # the pre-norm handover, through a dense block
    config = DecodeConfig(max_new_tokens=2, k=2, temperature=1.0)
    samples = 600
    drafter = MtpDrafter(module, TARGET_LAYERS)
    first, second, accepted = _sampled(target, drafter, config, samples, 5)
    assert first > 1e-3 and second > 1e-3
    assert 0.1 * samples < accepted


@pytest.mark.slow
def test_mtp_tree_sampling_follows_the_target_distribution(drafting):
    target, module = drafting["qwen3_next"]
    config = DecodeConfig(
        max_new_tokens=2, temperature=0.7, top_p=0.9, tree_depth=2, tree_topk=4, tree_tokens=8
    )
    samples = 400
    drafter = MtpTreeDrafter(module, target.model)
    first, second, accepted = _sampled(target, drafter, config, samples, 7)
    assert first > 1e-3 and second > 1e-3
    assert 0.1 * samples < accepted


def test_the_sampling_test_detects_a_rule_that_accepts_every_draft(tmp_path, monkeypatch):
    """Power check: accepting whenever p(x) > 0 must fail the same chi-square test (a random
    MTP layer, whose draws the target would mostly reject)."""
    import specdec_core.verifiers.lossless as lossless

    written = write_checkpoint("mimo", tmp_path / "mimo", seed=1)
    target = _load(written.directory)
    drafter = MtpDrafter(load_mtp(None, target), TARGET_LAYERS)
    real_rand = torch.rand
    monkeypatch.setattr(lossless.torch, "rand", lambda *a, **k: real_rand(*a, **k) * 1e-6)
    config = DecodeConfig(max_new_tokens=2, k=2, temperature=1.0)
    first, _, _ = _sampled(target, drafter, config, 100, 5)
    assert first < 1e-3
