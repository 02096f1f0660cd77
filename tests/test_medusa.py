"""Medusa heads on tiny random models: the published layouts, the tree's indexing, lossless
decoding (greedy identity, the target's distribution at T > 0), tree sizing, typical acceptance."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step
from specdec_core.decoding.forward_costs import ForwardCosts
from specdec_core.decoding.target import Target
from specdec_core.drafters.medusa import (
    MC_SIM_7B_63,
    TOPK,
    MedusaDrafter,
    build_medusa,
    expected_taus,
    tree_from_paths,
    usable_paths,
)
from specdec_core.drafters.tree_sizing import AcceptanceEstimates
from specdec_core.errors import SpecdecError
from specdec_core.heads.medusa.formats import export_vllm, load_medusa, save_fasterdecoding
from specdec_core.heads.medusa.head import MedusaConfig, MedusaHeads
from specdec_core.loop.decode import generate
from specdec_core.run.runner import run
from specdec_core.verifiers.typical import typical_path
from tests.stats import chi_square_pvalue
from tests.test_tree import joint_first_two, sample_first_two
from tests.tiny import VOCAB, prompt

HIDDEN = 32  # tests/tiny.py's hidden size


def random_heads(
    heads: int = 3,
    layers: int = 1,
    seed: int = 0,
    draft_vocab: int = 0,
    bias: bool = True,
    shared: bool = False,
) -> MedusaHeads:
    """Heads with random weights large enough that every head ranks tokens differently."""
    generator = torch.Generator().manual_seed(seed)
    token_map = None
    if draft_vocab:
        token_map = torch.randperm(VOCAB, generator=generator)[:draft_vocab].sort().values
    config = MedusaConfig(HIDDEN, VOCAB, heads, layers, draft_vocab, bias, shared)
    medusa = MedusaHeads(config, token_map)
    with torch.no_grad():
        for name, param in medusa.named_parameters():
            param.copy_(
                torch.randn(param.shape, generator=generator) * (0.3 if "blocks" in name else 1.0)
            )
    return medusa.eval()


def _linears(medusa: MedusaHeads):
    """(head i, block j, its linear layer) of every residual block."""
    for i, blocks in enumerate(medusa.blocks):
        for j, block in enumerate(blocks):
            yield i, j, block.linear


def _write(directory, state: dict, fmt: str, names: tuple[str, str], record: dict) -> None:
    """`state` as safetensors or a pickled state dict (`names`: the two file names), beside
    `record` as config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "safetensors":
        save_file(state, str(directory / names[0]))
    else:
        torch.save(state, directory / names[1])
    (directory / "config.json").write_text(json.dumps(record))


def fasterdecoding_files(medusa: MedusaHeads, directory, fmt: str) -> None:
    """FasterDecoding's published layout, written out key by key (not by our writer)."""
    config = medusa.config
    state = {}
    for i, j, linear in _linears(medusa):
        state[f"medusa_head.{i}.{j}.linear.weight"] = linear.weight.detach().clone()
        state[f"medusa_head.{i}.{j}.linear.bias"] = linear.bias.detach().clone()
    for i in range(config.num_heads):
        state[f"medusa_head.{i}.{config.num_layers}.weight"] = (
            medusa.lm_head(i).weight.detach().clone()
        )
    record = {
        "medusa_num_heads": config.num_heads,
        "medusa_num_layers": config.num_layers,
        "base_model_name_or_path": "tiny",
    }
    _write(directory, state, fmt, ("medusa_lm_head.safetensors", "medusa_lm_head.pt"), record)


def vllm_files(medusa: MedusaHeads, directory, fmt: str, prefix: str = "") -> None:
    """vLLM's published layout, written out key by key (not by our writer)."""
    config = medusa.config
    state = {}
    for i, j, linear in _linears(medusa):
        state[f"{prefix}blocks.{i}.layers.{j}.weight"] = linear.weight.detach().clone()
        if config.bias:
            state[f"{prefix}blocks.{i}.layers.{j}.bias"] = linear.bias.detach().clone()
    for i, lm_head in enumerate(medusa.lm_heads):
        state[f"{prefix}lm_heads.{i}.weight"] = lm_head.weight.detach().clone()
    if medusa.token_map is not None:
        state[f"{prefix}token_map"] = medusa.token_map.clone()
    record = {
        "model_type": "medusa",
        "hidden_size": config.hidden_size,
        "vocab_size": config.vocab_size,
        "num_heads": config.num_heads,
        "num_hidden_layers": config.num_layers,
        "truncated_vocab_size": config.rows,
        "medusa_fc_bias": config.bias,
        "original_lm_head": config.shared_lm_head,
    }
    _write(directory, state, fmt, ("model.safetensors", "pytorch_model.bin"), record)


def _drafts(medusa: MedusaHeads, target, ids: list[int], tokens: int = 40) -> list[int]:
    drafter = MedusaDrafter(medusa, target.model)
    drafter.begin(ids, Target(target.model).prefill(ids[:-1]))
    return drafter.propose(ids, DecodeConfig(tree_tokens=tokens), torch.Generator()).tokens


# --- formats ---------------------------------------------------------------------------------


@pytest.fixture
def float32_heads(monkeypatch):
    """Heads loaded in float32 whatever the CPU: a layout's arithmetic is compared exactly.
    (On a CPU that multiplies bf16 natively `load_medusa` drafts in bf16; the identity and
    sampling tests below run that path.)"""
    monkeypatch.setattr("specdec_core.models.loading.fast_bf16", lambda device: False)


@pytest.mark.usefixtures("float32_heads")
@pytest.mark.parametrize("layers", [1, 2])
def test_both_layouts_in_both_file_formats_give_identical_logits_and_drafts(
    tiny_target, tmp_path, layers
):
    medusa = random_heads(heads=3, layers=layers, seed=layers)
    dirs = {
        "fd-safetensors": (fasterdecoding_files, "safetensors"),
        "fd-pt": (fasterdecoding_files, "pt"),
        "vllm-safetensors": (vllm_files, "safetensors"),
        "vllm-bin": (vllm_files, "bin"),
    }
    hidden = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(9))
    ids = prompt(length=7)
    want = medusa(hidden)
    want_drafts = _drafts(medusa, tiny_target, ids)
    for name, (write, fmt) in dirs.items():
        write(medusa, tmp_path / name, fmt)
        loaded = load_medusa(str(tmp_path / name), tiny_target)
        assert loaded.config == medusa.config, name
        torch.testing.assert_close(loaded(hidden), want, rtol=0, atol=0, msg=name)
        assert _drafts(loaded, tiny_target, ids) == want_drafts, name


def test_a_vllm_token_map_maps_draft_rows_to_target_ids(tiny_target, tmp_path):
    medusa = random_heads(heads=2, seed=3, draft_vocab=12)
    vllm_files(medusa, tmp_path / "m", "safetensors", prefix="medusa_heads.")
    loaded = load_medusa(str(tmp_path / "m"), tiny_target)
    assert loaded.config.draft_vocab == 12
    assert torch.equal(loaded.token_map, medusa.token_map)
    ids, _ = loaded.top_tokens(torch.randn(HIDDEN), 5)
    assert set(ids.flatten().tolist()) <= set(medusa.token_map.tolist())
    assert _drafts(loaded, tiny_target, prompt(6)) == _drafts(medusa, tiny_target, prompt(6))


@pytest.mark.usefixtures("float32_heads")
def test_vllm_full_lm_heads_are_cut_to_the_token_map_as_vllm_cuts_them(tiny_target, tmp_path):
    reduced = random_heads(heads=2, seed=4, draft_vocab=10)
    full = random_heads(heads=2, seed=4)  # same blocks; lm heads over the whole vocabulary
    with torch.no_grad():
        for ours, theirs in zip(full.lm_heads, reduced.lm_heads, strict=True):
            ours.weight[reduced.token_map] = theirs.weight
        full.load_state_dict(
            {k: v for k, v in reduced.state_dict().items() if "blocks" in k}, strict=False
        )
    vllm_files(full, tmp_path / "m", "safetensors")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["truncated_vocab_size"] = 10
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    weights["token_map"] = reduced.token_map
    save_file(weights, str(tmp_path / "m" / "model.safetensors"))
    loaded = load_medusa(str(tmp_path / "m"), tiny_target)
    hidden = torch.randn(3, HIDDEN)
    torch.testing.assert_close(loaded(hidden), reduced(hidden), rtol=0, atol=0)


@pytest.mark.usefixtures("float32_heads")
def test_a_shared_lm_head_reads_as_vllm_original_lm_head(tiny_target, tmp_path):
    medusa = random_heads(heads=3, seed=5, shared=True, bias=False)
    vllm_files(medusa, tmp_path / "m", "safetensors")
    loaded = load_medusa(str(tmp_path / "m"), tiny_target)
    assert loaded.config.shared_lm_head and len(loaded.lm_heads) == 1
    hidden = torch.randn(2, HIDDEN)
    torch.testing.assert_close(loaded(hidden), medusa(hidden), rtol=0, atol=0)


@pytest.mark.usefixtures("float32_heads")
@pytest.mark.parametrize("variant", ["plain", "reduced", "shared"])
def test_export_vllm_round_trips_through_the_loader(tiny_target, tmp_path, variant):
    medusa = {
        "plain": lambda: random_heads(heads=3, layers=2, seed=6),
        "reduced": lambda: random_heads(heads=2, seed=7, draft_vocab=16),
        "shared": lambda: random_heads(heads=4, seed=8, shared=True, bias=False),
    }[variant]()
    export_vllm(medusa, tmp_path / "v")
    config = json.loads((tmp_path / "v" / "config.json").read_text())
    assert config["model_type"] == "medusa" and config["num_heads"] == medusa.num_heads
    assert config["truncated_vocab_size"] == medusa.config.rows
    loaded = load_medusa(str(tmp_path / "v"), tiny_target)
    hidden = torch.randn(4, HIDDEN)
    torch.testing.assert_close(loaded(hidden), medusa(hidden), rtol=0, atol=0)
    if variant == "plain":  # and FasterDecoding's writer gives the same heads
        save_fasterdecoding(medusa, tmp_path / "fd", base_model="tiny")
        again = load_medusa(str(tmp_path / "fd"), tiny_target)
        torch.testing.assert_close(again(hidden), medusa(hidden), rtol=0, atol=0)


def _refused(tmp_path, tiny_target, edit, match: str) -> None:
    medusa = random_heads(heads=2, seed=1)
    fasterdecoding_files(medusa, tmp_path / "m", "safetensors")
    from safetensors.torch import load_file

    path = tmp_path / "m" / "medusa_lm_head.safetensors"
    state = load_file(str(path))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    edit(state, config)
    save_file(state, str(path))
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecdecError, match=match) as error:
        load_medusa(str(tmp_path / "m"), tiny_target)
    assert "\n" not in str(error.value)


def test_an_unknown_weight_is_refused_by_name(tiny_target, tmp_path):
    def extra(state, config):
        state["medusa_head.0.0.linear.scale"] = torch.ones(HIDDEN)

    _refused(tmp_path, tiny_target, extra, "medusa_head.0.0.linear.scale")


def test_weights_of_a_head_the_config_does_not_count_are_refused(tiny_target, tmp_path):
    def fewer(state, config):
        config["medusa_num_heads"] = 1

    _refused(tmp_path, tiny_target, fewer, "medusa_head.1.0.linear.bias")


def test_a_missing_weight_is_refused(tiny_target, tmp_path):
    def drop(state, config):
        del state["medusa_head.1.0.linear.bias"]

    _refused(tmp_path, tiny_target, drop, "lack medusa_head.1.0.linear.bias")


def test_heads_for_another_hidden_size_are_refused_before_use(tiny_target, tmp_path):
    def wider(state, config):
        for key in list(state):
            state[key] = torch.zeros(*(64 if n == HIDDEN else n for n in state[key].shape))

    _refused(tmp_path, tiny_target, wider, "hidden states of 64 but the target's are 32")


def test_heads_for_another_vocabulary_are_refused_before_use(tiny_target, tmp_path):
    def bigger(state, config):
        for key in list(state):
            if state[key].shape[0] == VOCAB and state[key].dim() == 2 and key.endswith("1.weight"):
                state[key] = torch.zeros(VOCAB + 8, HIDDEN)

    _refused(tmp_path, tiny_target, bigger, f"vocabulary of {VOCAB + 8} tokens but the target")


def test_vllm_biases_without_medusa_fc_bias_are_refused_by_name(tiny_target, tmp_path):
    medusa = random_heads(heads=2, seed=2)
    vllm_files(medusa, tmp_path / "m", "safetensors")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["medusa_fc_bias"] = False
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecdecError, match="blocks.0.layers.0.bias"):
        load_medusa(str(tmp_path / "m"), tiny_target)


def test_a_truncated_vocabulary_without_a_token_map_is_refused(tiny_target, tmp_path):
    medusa = random_heads(heads=2, seed=2)
    vllm_files(medusa, tmp_path / "m", "safetensors")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["truncated_vocab_size"] = 8
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(SpecdecError, match="no token_map"):
        load_medusa(str(tmp_path / "m"), tiny_target)


def test_a_spec_that_names_nothing_is_refused(tiny_target, tmp_path):
    with pytest.raises(SpecdecError, match="not found"):
        load_medusa(str(tmp_path / "nowhere"), tiny_target)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecdecError, match="no config.json"):
        load_medusa(str(tmp_path / "empty"), tiny_target)
    with pytest.raises(SpecdecError, match="not in the local Hugging Face cache"):
        load_medusa("someone/medusa-heads-nobody-cached", tiny_target)  # offline in tests


# --- the tree ---------------------------------------------------------------------------------


def test_every_prefix_of_the_published_tree_holds_its_paths_parents():
    assert len(MC_SIM_7B_63) == 63 and len(set(MC_SIM_7B_63)) == 63
    for n in range(1, 64):
        prefix = set(MC_SIM_7B_63[:n])
        assert all(path[:-1] in prefix for path in prefix if len(path) > 1)


def test_paths_the_heads_cannot_fill_are_left_out():
    assert all(len(path) <= 2 for path in usable_paths(MC_SIM_7B_63, 2, VOCAB, None, None))
    narrow = usable_paths(MC_SIM_7B_63, 4, VOCAB, 3, 2)
    assert narrow and all(len(p) <= 3 and max(p) < 2 for p in narrow)
    assert all(max(p) < 5 for p in usable_paths(MC_SIM_7B_63, 4, 5, None, None))


def test_tree_nodes_are_each_heads_ranked_tokens_under_their_parents():
    ids = torch.arange(30).reshape(3, 10) + 100  # head d's rank r token: 100 + 10 d + r
    logq = -torch.arange(30, dtype=torch.float).reshape(3, 10)
    paths = list(MC_SIM_7B_63[:12])
    proposal = tree_from_paths(paths, ids, logq)
    assert all(parent < node for node, parent in enumerate(proposal.parents))
    by_path = {}
    for path in sorted(paths, key=lambda p: (len(p), p)):
        node = len(by_path)
        by_path[path] = node
        assert proposal.tokens[node] == 100 + 10 * (len(path) - 1) + path[-1]
        parent = by_path[path[:-1]] if len(path) > 1 else -1
        assert proposal.parents[node] == parent
        assert proposal.scores[node] == pytest.approx(
            sum(float(logq[d, r]) for d, r in enumerate(path))
        )


class OracleHeads(MedusaHeads):
    """Heads that know the target's greedy continuation: from the hidden state of position t
    (found by nearest neighbour among a full forward's states) head i's top-1 is token
    t + i + 2 of `sequence`, or with `shift` t + i + 2 + shift (a wrong indexing)."""

    def __init__(self, model, sequence: list[int], heads: int, shift: int = 0) -> None:
        super().__init__(MedusaConfig(HIDDEN, VOCAB, heads))
        self.sequence, self.shift = sequence, shift
        with torch.no_grad():
            self.states = model.model(torch.tensor([sequence])).last_hidden_state[0]

    def top_tokens(self, hidden, k):
        t = int((self.states - hidden.float()).norm(dim=-1).argmin())
        ids = torch.zeros(self.num_heads, k, dtype=torch.long)
        for i in range(self.num_heads):
            at = t + i + 2 + self.shift
            best = self.sequence[at] if at < len(self.sequence) else 0
            others = [x for x in range(VOCAB) if x != best][: k - 1]
            ids[i] = torch.tensor([best, *others])
        return ids, torch.zeros(self.num_heads, k)


@pytest.mark.parametrize("shift", [0, -1, 1])
def test_head_i_predicts_the_token_i_plus_2_after_the_hidden_states_token(tiny_target, shift):
    """With the greedy continuation's top-1 per head, a chain [0], [0,0], [0,0,0] is taken
    whole every step (τ = 4) exactly when head i is indexed to token t + i + 2."""
    ids = prompt(length=6)
    config = DecodeConfig(max_new_tokens=36, tree_tokens=4)
    sequence = [*ids, *run(tiny_target, "ar", ids, DecodeConfig(max_new_tokens=48)).token_ids]
    heads = OracleHeads(tiny_target.model, sequence, heads=3, shift=shift)
    chain = ((0,), (0, 0), (0, 0, 0))
    drafter = MedusaDrafter(heads, tiny_target.model, choices=chain)
    events = list(generate(tiny_target, drafter, ids, config))
    summary = events[-1].summary
    assert list(summary.token_ids) == sequence[len(ids) : len(ids) + 36]
    if shift == 0:
        assert summary.mean_accept_length == pytest.approx(4.0)
    else:  # the heads' tokens are one off: taken only where a token repeats
        assert summary.mean_accept_length < 1.5


def test_the_drafter_reads_the_state_of_the_token_before_the_pending_one(tiny_target):
    ids = prompt(length=6)
    medusa = random_heads(heads=3, seed=11)
    drafter = MedusaDrafter(medusa, tiny_target.model)
    features = Target(tiny_target.model).prefill(ids[:-1])
    drafter.begin(ids, features)
    state = tiny_target.model.model(torch.tensor([ids[:-1]])).last_hidden_state[0, -1]
    torch.testing.assert_close(drafter.hidden, state, atol=1e-5, rtol=1e-5)
    proposal = drafter.propose(ids, DecodeConfig(tree_tokens=64), torch.Generator())
    top, _ = medusa.top_tokens(state, TOPK)
    depth1 = [t for t, parent in zip(proposal.tokens, proposal.parents, strict=True) if parent < 0]
    assert depth1 == top[0].tolist()  # head 0's top-10, best first


# --- lossless decoding -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tree_tokens, variant",
    [(None, "plain"), (5, "plain"), (20, "reduced"), (64, "plain"), (40, "two-layer")],
)
@pytest.mark.parametrize("offset", range(3))
def test_greedy_medusa_output_equals_target_greedy(tiny_target, tree_tokens, variant, offset):
    medusa = {
        "plain": lambda: random_heads(heads=3, seed=offset),
        "reduced": lambda: random_heads(heads=4, seed=offset, draft_vocab=16),
        "two-layer": lambda: random_heads(heads=2, layers=2, seed=offset),
    }[variant]()
    ids = prompt(length=4 + offset, offset=offset)
    config = DecodeConfig(max_new_tokens=40, tree_tokens=tree_tokens)
    reference = run(tiny_target, "ar", ids, config)
    drafter = MedusaDrafter(medusa, tiny_target.model)
    events = list(generate(tiny_target, drafter, ids, config))
    assert events[-1].summary.token_ids == reference.token_ids
    steps = [e for e in events if isinstance(e, Step)]
    assert all(len(s.tree.accepted) == s.accepted for s in steps)


def test_wide_trees_do_accept_drafts(tiny_target):
    ids = prompt(length=5)
    config = DecodeConfig(max_new_tokens=40, tree_tokens=64)
    summary = run(tiny_target, "ar", ids, config)
    drafter = MedusaDrafter(random_heads(heads=3, seed=1), tiny_target.model)
    ours = list(generate(tiny_target, drafter, ids, config))[-1].summary
    assert ours.token_ids == summary.token_ids and ours.steps < summary.steps


def test_a_one_token_prompt_drafts_nothing_until_a_state_exists(tiny_target):
    config = DecodeConfig(max_new_tokens=8, tree_tokens=10)
    drafter = MedusaDrafter(random_heads(), tiny_target.model)
    summary = list(generate(tiny_target, drafter, [1], config))[-1].summary
    assert summary.token_ids == run(tiny_target, "ar", [1], config).token_ids


@pytest.mark.slow
@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_medusa_sampling_follows_target_distribution(tiny_target, temperature, top_p):
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, temperature=temperature, top_p=top_p, tree_tokens=64)
    drafter = MedusaDrafter(random_heads(heads=3, seed=1), tiny_target.model)
    samples = 3000
    drawn, accepted = sample_first_two(tiny_target, drafter, ids, config, samples, seed=13)
    expected = joint_first_two(tiny_target.model, ids, temperature, top_p)
    assert chi_square_pvalue(drawn, expected) > 1e-3
    assert 0.1 * samples < accepted  # the tree was accepted from, not only the residual


def test_the_sampling_test_detects_a_rule_that_takes_the_first_child(tiny_target, monkeypatch):
    """Power check: accepting the first child whenever p(x) > 0 must fail the same test."""
    import specdec_core.verifiers.tree as tree_module

    real_rand = torch.rand
    monkeypatch.setattr(tree_module.torch, "rand", lambda *a, **k: real_rand(*a, **k) * 1e-6)
    ids = prompt(length=4)
    config = DecodeConfig(max_new_tokens=2, temperature=1.0, tree_tokens=64)
    drafter = MedusaDrafter(random_heads(heads=3, seed=1), tiny_target.model)
    drawn, _ = sample_first_two(tiny_target, drafter, ids, config, 600, seed=13)
    monkeypatch.undo()
    expected = joint_first_two(tiny_target.model, ids, 1.0, 1.0)
    with pytest.raises(AssertionError):
        assert chi_square_pvalue(drawn, expected) > 1e-3


# --- tree size ---------------------------------------------------------------------------------


def test_a_given_size_is_taken_and_a_size_the_heads_cannot_fill_is_capped(tiny_target):
    drafter = MedusaDrafter(random_heads(heads=2), tiny_target.model)
    assert drafter.describe(DecodeConfig(tree_tokens=12))["tree_tokens"] == 12
    capped = drafter.describe(DecodeConfig(tree_tokens=64))
    fill = len(usable_paths(MC_SIM_7B_63, 2, VOCAB, None, None))
    assert capped["tree_tokens"] == fill + 1 and capped["tree_sizing"].startswith("given; 64")
    assert capped["tree_depth"] == 2


def test_the_auto_size_is_measured_and_follows_the_heads_acceptance(tiny_target):
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    drafter = build_medusa(tiny_target, random_heads(heads=3), None, costs, acceptance)
    auto = drafter.describe(DecodeConfig())
    assert auto["tree_sizing"].startswith("auto:") and 2 <= auto["tree_tokens"] <= 64
    assert "target over" in auto["tree_sizing"]  # sized by the measured forwards
    for level in range(3):  # heads whose top-1 is never right
        acceptance.observe(drafter.sizer.key(DecodeConfig(), level), 10_000, 0)
    fresh = MedusaDrafter(drafter.heads, tiny_target.model, costs, acceptance)
    weak = fresh.sizer.choice(DecodeConfig())
    assert "0.00/0.00/0.00" in weak.reason
    assert weak.expected_tau < drafter.sizer.choice(DecodeConfig()).expected_tau


def test_expected_tau_grows_with_the_tree_and_with_acceptance():
    paths = list(MC_SIM_7B_63)
    low, high = expected_taus(paths, [0.3] * 4), expected_taus(paths, [0.8] * 4)
    assert low[0] == high[0] == 1.0
    assert all(b >= a for a, b in zip(low, low[1:], strict=False))
    assert all(h > lo for lo, h in zip(low[1:], high[1:], strict=True))
    assert high[3] < 1 + 0.8 + 0.8 * 0.8 + 0.2  # [0], [0,0], [1]


def test_steps_refit_the_acceptance_of_an_auto_tree(tiny_target):
    costs, acceptance = ForwardCosts(), AcceptanceEstimates()
    drafter = MedusaDrafter(random_heads(heads=3, seed=2), tiny_target.model, costs, acceptance)
    config = DecodeConfig(max_new_tokens=60)
    list(generate(tiny_target, drafter, prompt(6), config))
    key = drafter.sizer.key(config, 0)
    assert acceptance.acceptance(key) < 0.6  # random heads: below the prior


# --- typical acceptance ------------------------------------------------------------------------


def _rows(*dists: dict[int, float]) -> torch.Tensor:
    pi = torch.zeros(len(dists), VOCAB)
    for row, dist in enumerate(dists):
        for token, p in dist.items():
            pi[row, token] = p
    return pi


def test_typical_acceptance_takes_the_deepest_typical_path():
    # root children 5 (p .6) and 6 (p .3); under 5: 7 (p .05 of a confident row: refused),
    # under 6: 8 (p .5) -> the path 6, 8 is deeper than 5 alone
    tokens, parents = [5, 6, 7, 8], (-1, -1, 0, 1)
    pi = _rows({5: 0.6, 6: 0.3, 9: 0.1}, {7: 0.05, 9: 0.95}, {8: 0.5, 9: 0.5}, {9: 1.0}, {9: 1.0})
    assert typical_path(tokens, parents, pi) == [1, 3]


def test_typical_acceptance_threshold_follows_the_entropy():
    """π(x) > min(ε, δ·exp(−H)): a flat row (high H) takes a token a peaked row refuses."""
    flat = torch.full((VOCAB,), 1.0 / VOCAB)  # H = log 32: bound 0.3/32 < 1/32
    peaked = torch.zeros(VOCAB)
    peaked[3], peaked[4] = 0.97, 0.03  # H ≈ 0.135: bound min(.09, .26) = .09 > .03
    for row, token, taken in ((flat, 4, True), (peaked, 4, False), (peaked, 3, True)):
        pi = torch.stack([row, row])
        assert typical_path([token], (-1,), pi) == ([0] if taken else [])
    assert typical_path([4], (-1,), torch.stack([peaked, peaked]), epsilon=0.02) == [0]


def test_typical_acceptance_breaks_ties_by_likelihood():
    tokens, parents = [5, 6], (-1, -1)
    pi = _rows({5: 0.4, 6: 0.5, 9: 0.1}, {9: 1.0}, {10: 1.0})
    assert typical_path(tokens, parents, pi) == [1]


def test_on_a_chain_typical_acceptance_takes_what_the_chain_policy_takes():
    from specdec_core.verifiers.typical import TypicalVerifier

    generator = torch.Generator().manual_seed(4)
    for trial in range(40):
        logits = torch.randn(5, VOCAB, generator=generator) * (0.5 + trial / 10)
        pi = torch.softmax(logits, dim=-1)  # [k+1, V]
        draft = [int(torch.multinomial(pi[i], 1, generator=generator)) for i in range(4)]
        chain = TypicalVerifier().verify(torch.tensor(draft), None, pi, generator, p_soft=pi)
        assert len(typical_path(draft, (-1, 0, 1, 2), pi)) == chain.accepted


# --- the bundled heads ---------------------------------------------------------------------------


@pytest.mark.slow
def test_bundled_heads_decode_exactly_as_the_embedded_model(embedded):
    from specdec_core.run.prompts import encode_chat

    heads = load_medusa("embedded", embedded)
    text = "Name three rivers in Europe and one fact about each."
    ids = encode_chat(embedded.tokenizer, [{"role": "user", "content": text}], True)
    config = DecodeConfig(max_new_tokens=48, tree_tokens=16)
    reference = run(embedded, "ar", ids, config)
    ours = list(generate(embedded, MedusaDrafter(heads, embedded.model), ids, config))[-1].summary
    assert ours.token_ids == reference.token_ids
    assert ours.mean_accept_length > 1.2
