"""DFlash block drafting and DDTree trees: published layouts read exactly, the block pass's
arithmetic, and lossless decoding (identity at T = 0, the target's distribution above it)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.proposal import Proposal
from specdec_core.decoding.target import Target
from specdec_core.drafters.ddtree import DDTreeDrafter, best_budget, best_first
from specdec_core.drafters.dflash import DFlashDrafter, context_features
from specdec_core.errors import SpecdecError
from specdec_core.heads.dflash.draft import ContextCache
from specdec_core.heads.dflash.formats import default_target_layers, load_dflash
from specdec_core.run.runner import run
from tests.dflash_tiny import tiny_dflash, write_speculators, write_zlab
from tests.stats import first_two_pvalues
from tests.tiny import ar_and, prompt


def block_rows(draft, target_model, ids: list[int], block: int) -> torch.Tensor:
    """The drafter's normed block rows after the context ids[:-1], through the drafter."""
    features = Target(target_model, draft.spec.feature_layers).prefill(ids[:-1])
    cache = ContextCache(draft.spec.layers)
    draft.extend(cache, context_features(features), 0)
    with torch.inference_mode():
        return draft.block(cache, [ids[-1]] + [draft.spec.mask_token_id] * (block - 1))


def reference_rows(draft, target_model, ids: list[int], block: int) -> torch.Tensor:
    """The same rows computed another way: z-lab's equations written out with explicit
    softmax attention, RoPE from its definition, no cache and no SDPA."""
    spec = draft.spec
    with torch.no_grad():
        hidden = target_model.model(torch.tensor([ids[:-1]]), output_hidden_states=True)
        features = torch.cat([hidden.hidden_states[k][0] for k in spec.feature_layers], -1)
        context = draft.hidden_norm(draft.fc(features))  # [c, h]
        c = context.shape[0]
        x = target_model.get_input_embeddings()(
            torch.tensor(ids[-1:] + [spec.mask_token_id] * (block - 1))
        )
        d = spec.head_dim
        theta = spec.body.rope_parameters["rope_theta"]
        inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
        angles = torch.arange(c + block).float()[:, None] * inv[None]  # [n, d/2]
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

        def rope(t, rows):  # t [n, heads, d]
            half = d // 2
            turned = torch.cat([-t[..., half:], t[..., :half]], -1)
            return t * cos[rows, None] + turned * sin[rows, None]

        for layer in draft.layers:
            attn = layer.self_attn
            normed = layer.input_layernorm(x)
            heads, kv_heads = attn.heads, attn.kv_heads
            q = attn.q_norm(attn.q_proj(normed).view(block, heads, d))
            both = torch.cat([context, normed])  # [c + b, h]
            k = attn.k_norm(attn.k_proj(both).view(c + block, kv_heads, d))
            v = attn.v_proj(both).view(c + block, kv_heads, d)
            q = rope(q, torch.arange(c, c + block))
            k = rope(k, torch.arange(c + block))
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
            out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(block, heads * d)
            x = x + attn.o_proj(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return draft.norm(x)


@pytest.mark.parametrize("layers, block", [(1, 4), (2, 3)])
def test_the_block_pass_is_dflashs_equations(tiny_target, layers, block):
    draft = tiny_dflash(tiny_target, layers=layers, block=block)
    ids = prompt(length=7)
    ours = block_rows(draft, tiny_target.model, ids, block)
    assert torch.allclose(ours, reference_rows(draft, tiny_target.model, ids, block), atol=1e-5)


def test_a_context_grown_by_commits_equals_one_built_at_once(tiny_target):
    draft = tiny_dflash(tiny_target)
    ids = prompt(length=9)
    target = Target(tiny_target.model, draft.spec.feature_layers)
    whole = target.prefill(ids[:-1])
    grown = ContextCache(1)
    for start, end in ((0, 3), (3, 4), (4, 8)):
        rows = torch.arange(start, end)
        part = type(whole)(None, whole.hidden[rows], tuple(h[rows] for h in whole.layer_hidden))
        draft.extend(grown, context_features(part), start)
    at_once = ContextCache(1)
    draft.extend(at_once, context_features(whole), 0)
    assert torch.allclose(grown.layer(0)[0], at_once.layer(0)[0], atol=1e-6)
    assert torch.allclose(grown.layer(0)[1], at_once.layer(0)[1], atol=1e-6)


def test_zlab_and_speculators_layouts_of_the_same_weights_draft_identically(tiny_target, tmp_path):
    draft = tiny_dflash(tiny_target)
    zlab = load_dflash(str(write_zlab(draft, tmp_path / "zlab")), tiny_target, dtype=torch.float32)
    speculators = load_dflash(
        str(write_speculators(draft, tiny_target, tmp_path / "spec")),
        tiny_target,
        dtype=torch.float32,
    )
    assert zlab.spec.feature_layers == speculators.spec.feature_layers == (1, 2)
    assert speculators.spec.own_embedding and speculators.lm_head is not None
    ids = prompt(length=6)
    with torch.inference_mode():
        a = zlab.logits(block_rows(zlab, tiny_target.model, ids, 4))
        b = speculators.logits(block_rows(speculators, tiny_target.model, ids, 4))
    assert torch.equal(a, b)


def test_zlab_target_layer_ids_count_layer_outputs(tiny_target, tmp_path):
    """z-lab's id k reads HF hidden_states[k + 1]; written back, the ids are the same."""
    draft = tiny_dflash(tiny_target)
    folder = write_zlab(draft, tmp_path / "zlab")
    config = json.loads((folder / "config.json").read_text())
    assert config["dflash_config"]["target_layer_ids"] == [0, 1]
    assert config["block_size"] == 4 and config["dflash_config"]["mask_token_id"] == 0


def test_zlabs_default_layers_spread_from_layer_one_to_three_before_the_last():
    assert default_target_layers(36, 5) == (1, 9, 17, 25, 33)
    assert default_target_layers(30, 1) == (15,)


def test_an_unknown_weight_is_named(tiny_target, tmp_path):
    folder = write_zlab(tiny_dflash(tiny_target), tmp_path / "zlab")
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / "model.safetensors"))
    state["layers.0.self_attn.g_proj.weight"] = torch.zeros(2, 2)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(SpecdecError, match="layers.0.self_attn.g_proj.weight"):
        load_dflash(str(folder), tiny_target)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda c: c["dflash_config"].pop("mask_token_id"), "mask_token_id"),
        (lambda c: c.update(block_size=1), "block_size"),
        (lambda c: c.update(hidden_size=64), "hidden size"),
        (lambda c: c["dflash_config"].update(target_layer_ids=[0, 5]), "layers"),
    ],
)
def test_a_bad_config_is_one_line_that_says_what_to_do(tiny_target, tmp_path, change, words):
    folder = write_zlab(tiny_dflash(tiny_target), tmp_path / "zlab")
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecdecError, match=words) as error:
        load_dflash(str(folder), tiny_target)
    assert "\n" not in str(error.value)


def test_a_drafter_that_drafts_from_its_anchor_is_refused(tiny_target, tmp_path):
    folder = write_speculators(tiny_dflash(tiny_target), tiny_target, tmp_path / "spec")
    config = json.loads((folder / "config.json").read_text())
    config["sample_from_anchor"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecdecError, match="sample_from_anchor"):
        load_dflash(str(folder), tiny_target)


@pytest.mark.parametrize("block", [2, 4])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_dflash_output_equals_target_greedy(tiny_target, block, offset):
    draft = tiny_dflash(tiny_target)
    config = DecodeConfig(max_new_tokens=40, method_params={"block": block})
    ids = prompt(length=3 + offset, offset=offset)
    reference, speculative = ar_and(tiny_target, "dflash", ids, config, draft)
    assert speculative.token_ids == reference.token_ids


@pytest.mark.parametrize("tree_tokens", [2, 5, 12])
@pytest.mark.parametrize("offset", range(3))
def test_greedy_ddtree_output_equals_target_greedy(tiny_target, tree_tokens, offset):
    draft = tiny_dflash(tiny_target)
    config = DecodeConfig(max_new_tokens=40, tree_tokens=tree_tokens)
    ids = prompt(length=3 + offset, offset=offset)
    reference, speculative = ar_and(tiny_target, "ddtree", ids, config, draft)
    assert speculative.token_ids == reference.token_ids


def test_a_block_longer_than_the_drafter_was_trained_for_is_refused(tiny_target):
    config = DecodeConfig(max_new_tokens=4, method_params={"block": 9})
    with pytest.raises(SpecdecError, match="block_size"):
        run(tiny_target, "dflash", prompt(), config, tiny_dflash(tiny_target))


def brute_force_best(logprobs: torch.Tensor, nodes: int) -> list[float]:
    """Scores of the `nodes` best prefixes, by enumerating every prefix."""
    positions, vocab = logprobs.shape
    scores = []
    for depth in range(1, positions + 1):
        for path in itertools.product(range(vocab), repeat=depth):
            scores.append(sum(float(logprobs[i, t]) for i, t in enumerate(path)))
    return sorted(scores, reverse=True)[:nodes]


@pytest.mark.parametrize("nodes", [1, 4, 9, 20])
def test_best_first_finds_the_best_prefix_closed_paths_parents_first(nodes):
    generator = torch.Generator().manual_seed(nodes)
    logprobs = torch.log_softmax(torch.randn(3, 4, generator=generator) * 2, -1)
    tokens, parents, scores = best_first(logprobs, nodes)
    assert scores == pytest.approx(brute_force_best(logprobs, nodes))
    assert all(parent < node for node, parent in enumerate(parents))
    assert all(a >= b for a, b in zip(scores, scores[1:], strict=False))
    depths: list[int] = []
    for node, parent in enumerate(parents):  # each score is its parent's plus its own token's
        depths.append(depths[parent] + 1 if parent >= 0 else 0)
        base = scores[parent] if parent >= 0 else 0.0
        assert scores[node] == pytest.approx(base + float(logprobs[depths[node], tokens[node]]))


def test_the_budget_stops_where_another_node_costs_more_than_it_brings():
    cheap = {1: 1.0, 64: 1.0}  # a forward costs the same whatever its length: take every node
    steep = {1: 1.0, 2: 2.0, 64: 64.0}  # every token costs a forward: one node at most
    scores = [math.log(0.9), math.log(0.5), math.log(0.3), math.log(0.1)]
    assert best_budget(scores, 0.0, cheap) == 4
    assert best_budget(scores, 0.0, steep) == 1


def test_auto_ddtree_sizes_its_tree_by_the_measured_costs_and_stays_lossless(tiny_target):
    draft = tiny_dflash(tiny_target)
    config = DecodeConfig(max_new_tokens=24)
    reference = run(tiny_target, "ar", prompt(), config)
    drafter = DDTreeDrafter(draft, tiny_target.model, ForwardCosts())
    from specdec_core.decoding.events import Finished
    from specdec_core.loop.decode import generate

    events = list(generate(tiny_target, drafter, prompt(), config))
    summary = next(e for e in events if isinstance(e, Finished)).summary
    assert summary.token_ids == reference.token_ids
    assert 1 <= drafter.last_nodes <= 63


class ArgmaxWithSampledQ(DFlashDrafter):
    """A broken drafter: it proposes each row's argmax but reports the sampled distribution
    as the q it drew from, so the lossless rule's min(1, r/q) is computed for the wrong q."""

    def propose(self, ids, config, generator):
        proposal = super().propose(ids, config, generator)
        if proposal.q is None or not proposal.tokens:
            return proposal
        return Proposal(tokens=proposal.q.argmax(-1).tolist(), q=proposal.q)


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_dflash_tokens_follow_the_target_distribution(tiny_target, temperature, top_p):
    drafter = DFlashDrafter(tiny_dflash(tiny_target))
    p_first, p_second, accepted = first_two_pvalues(
        tiny_target, drafter, temperature, top_p, samples=2000, seed=11
    )
    assert accepted > 150, "the test must exercise accepted drafts"
    assert p_first > 0.001 and p_second > 0.001


@pytest.mark.slow
def test_a_drafter_that_misreports_its_q_fails_the_same_check(tiny_target):
    drafter = ArgmaxWithSampledQ(tiny_dflash(tiny_target))
    p_first, p_second, _ = first_two_pvalues(tiny_target, drafter, 1.0, 1.0, samples=2000, seed=11)
    assert min(p_first, p_second) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_ddtree_tokens_follow_the_target_distribution(tiny_target, temperature, top_p):
    drafter = DDTreeDrafter(tiny_dflash(tiny_target), tiny_target.model, ForwardCosts())
    ddtree_config = DecodeConfig(tree_tokens=6)
    drafter.describe(ddtree_config)
    p_first, p_second, accepted = first_two_pvalues_tree(tiny_target, drafter, temperature, top_p)
    assert accepted > 150, "the test must exercise accepted drafts"
    assert p_first > 0.001 and p_second > 0.001


def first_two_pvalues_tree(target, drafter, temperature, top_p):
    from tests.stats import chi_square_pvalue, sample_first_two_tokens, target_marginals

    ids = prompt(length=4)
    first, second = target_marginals(target.model, ids, temperature, top_p)
    config = DecodeConfig(max_new_tokens=2, tree_tokens=6, temperature=temperature, top_p=top_p)
    firsts, seconds, accepted = sample_first_two_tokens(target, drafter, ids, config, 2000, 11)
    return chi_square_pvalue(firsts, first), chi_square_pvalue(seconds, second), accepted


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dflash", "ddtree"])
def test_the_bundled_drafter_on_the_embedded_model_gives_the_targets_greedy_output(
    embedded, method
):
    draft = load_dflash("embedded", embedded)
    assert draft.spec.block_size == 8 and draft.spec.draft_vocab_size == 8192
    ids = embedded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name three uses of a paperclip."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    config = DecodeConfig(max_new_tokens=40, tree_tokens=8)
    reference, speculative = ar_and(embedded, method, list(ids), config, draft)
    assert speculative.token_ids == reference.token_ids
