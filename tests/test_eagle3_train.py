"""`specdec train eagle --arch eagle3` on a tiny random target: an EAGLE-3-layout head is trained
on the features drafting gives it, learns, and decodes losslessly."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.target import Target
from specdec_core.heads.eagle.formats import load_head
from specdec_core.heads.eagle.head import fused_layers
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training.datasets import Sample
from specdec_core.training.loop import train_step
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import target_features
from specdec_core.training.starting_model import build_model
from tests.tiny import VOCAB, training_dir

LAYERS = 4  # fused layers (2, 2, 1): an EAGLE-3 head needs a few target layers


@pytest.fixture(scope="module")
def deep_dir(tmp_path_factory):
    return training_dir(tmp_path_factory.mktemp("deep"), layers=LAYERS)


@pytest.fixture(scope="module")
def deep_target(deep_dir):
    return load_model(str(deep_dir / "target"), device="cpu", dtype="float32")


def _argv(deep_dir, out, *extra) -> list[str]:
    return [
        *("train", "eagle", "--target", str(deep_dir / "target")),
        *("--data", str(deep_dir / "data.jsonl"), "--tokens", "800", "--epochs", "2"),
        *("--draft-vocab", "16", "--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--val-kinds", "0"),  # the table by kind is tests/test_validate_head.py's
        *("--out", str(out), *extra),
    ]


@pytest.fixture(scope="module")
def eagle3_run(deep_dir, tmp_path_factory):
    """A finished `specdec train eagle --arch eagle3` run: (its argv, its head's folder)."""
    out = tmp_path_factory.mktemp("eagle3") / "head"
    argv = _argv(deep_dir, out, "--arch", "eagle3", "--unroll", "3")
    assert main(argv) == 0
    return argv, out


@pytest.mark.slow
def test_an_eagle3_training_run_saves_a_lossless_eagle3_head(eagle3_run, deep_target):
    argv, out = eagle3_run
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["train_config"]["arch"] == "eagle3" and card["draft_vocab"] == 16
    head = load_head(str(out), deep_target)
    assert head.kind == "eagle3" and head.draft_vocab == 16
    config = DecodeConfig(max_new_tokens=20, k=3)
    ids = [1, 5, 9, 4]
    reference = run(deep_target, "ar", ids, config).token_ids
    assert run(deep_target, "eagle", ids, config, head).token_ids == reference
    assert run(deep_target, "eagle2", ids, config, head).token_ids == reference
    assert main(argv) == 0  # a rerun resumes from the finished checkpoint (own lm_head too)
    kept = {p.name for p in out.rglob("*")}
    assert "checkpoint.pt" in kept and not any(name.startswith("feat") for name in kept)


def test_fused_training_inputs_are_the_hidden_states_drafting_reads(deep_target):
    ids = [1, 5, 9, 4, 7, 12, 3, 8]
    item = target_features(deep_target, [(ids, 0)], (2, 2, 1))
    target = Target(deep_target.model, feature_layers=(2, 2, 1))
    seen = target.prefill(ids)
    torch.testing.assert_close(item.fused[0], torch.cat(seen.layer_hidden, dim=-1))
    torch.testing.assert_close(item.hidden[0], seen.hidden)


def test_unrolled_eagle3_training_pass_matches_drafting_step_by_step(deep_target):
    model = deep_target.model
    draft_ids = torch.arange(0, VOCAB, 2)
    head = build_model("eagle", model, draft_ids, "eagle3").eval()
    ids = [1, 5, 9, 4, 7, 12, 3, 8]
    item = target_features(deep_target, [(ids, 0)], fused_layers(LAYERS))
    batch_ids, hidden, mask, fused = item.ids, item.hidden, item.loss_mask, item.fused
    objective = Objective("eagle", head, model.lm_head, draft_ids, 0.5, unroll=3).eval()
    with torch.no_grad():
        preds, _ = objective(batch_ids, hidden, mask, fused)
        T = len(ids)
        for p in range(T - 3):
            cache = head.new_cache()
            positions = torch.arange(p + 1)[None]
            out = head.step(fused[:, : p + 1], batch_ids[:, 1 : p + 2], positions, None, cache)
            feature = out.hidden[:, -1:]
            for j in (2, 3):
                token = batch_ids[:, p + j : p + j + 1]
                feature = head.step(feature, token, torch.tensor([[p + j - 1]]), None, cache).hidden
                offset = (T - 1) + (T - 2) * (j == 3)  # rows of passes before pass j
                torch.testing.assert_close(preds[offset + p], feature[0, 0], atol=1e-4, rtol=1e-4)


def test_eagle3_training_learns_the_targets_next_tokens(deep_target):
    model = deep_target.model
    draft_ids = torch.arange(0, VOCAB, 2)
    torch.manual_seed(0)
    head = build_model("eagle", model, draft_ids, "eagle3")
    generator = torch.Generator().manual_seed(1)
    samples = [Sample(torch.randint(3, VOCAB, (24,), generator=generator).tolist(), 0)]
    items = target_features(deep_target, [(s.ids, s.start) for s in samples * 4],
                            fused_layers(LAYERS))  # fmt: skip
    objective = Objective("eagle", head, model.lm_head, draft_ids, 0.0, unroll=2).train()
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(head.parameters())
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    steps = [train_step(objective, items, optimizer, params, 1.0) for _ in range(60)]
    feature, _, before = steps[0]
    *_, after = steps[-1]
    assert float(feature) == 0.0  # no feature loss: EAGLE-3 predicts tokens
    assert float(before) < 0.3 and float(after) > 0.8  # top-1 agreement with the target


@pytest.mark.slow
def test_an_init_head_of_the_other_layout_is_refused_with_what_to_do(
    deep_dir, eagle3_run, tmp_path, capsys
):
    _, first = eagle3_run
    second = tmp_path / "again"
    assert main(_argv(deep_dir, second, "--arch", "eagle1", "--init", str(first))) == 2
    assert "drop --arch" in capsys.readouterr().err
    assert main(_argv(deep_dir, second, "--init", str(first), "--draft-vocab", "24")) == 2
    assert "drop --draft-vocab" in capsys.readouterr().err  # its lm_head is its vocabulary
    assert main(_argv(deep_dir, second, "--init", str(first), "--epochs", "1")) == 0
    assert load_head(str(second), load_model(str(deep_dir / "target"), "cpu", "float32")).kind == (
        "eagle3"
    )


def test_an_eagle3_head_over_the_full_vocabulary_is_refused_with_what_to_do(
    deep_dir, tmp_path, capsys
):
    argv = _argv(deep_dir, tmp_path / "full", "--arch", "eagle3", "--draft-vocab", "0")
    assert main(argv) == 2
    assert "--draft-vocab N" in capsys.readouterr().err


def test_an_eagle3_head_for_a_too_shallow_target_is_refused_with_what_to_do(tmp_path, capsys):
    root = training_dir(tmp_path, layers=1)
    argv = _argv(root, tmp_path / "out", "--arch", "eagle3")
    assert main(argv) == 2
    assert "--arch eagle1" in capsys.readouterr().err


@pytest.mark.slow
def test_input_norms_train_an_eagle3_1_head_that_reloads_and_decodes_losslessly(
    deep_dir, deep_target, tmp_path
):
    out = tmp_path / "head"
    assert main(_argv(deep_dir, out, "--arch", "eagle3", "--input-norms")) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["fc_norm"] is True
    head = load_head(str(out), deep_target, torch.float32)
    assert head.variant.fc_norm and len(head.fc_norm) == 3
    trained = torch.cat([norm.weight for norm in head.fc_norm])
    assert not torch.allclose(trained, torch.ones_like(trained))  # the norms learned
    decode = DecodeConfig(max_new_tokens=20, k=3)
    ids = [1, 5, 9, 4]
    reference = run(deep_target, "ar", ids, decode).token_ids
    assert run(deep_target, "eagle2", ids, decode, head).token_ids == reference


def test_input_norms_without_a_fresh_eagle3_head_are_refused(deep_dir, tmp_path):
    assert main(_argv(deep_dir, tmp_path / "h", "--input-norms")) == 2


def test_an_eagle3_head_started_from_an_eagle1_head_projects_as_its_layer_does(deep_target):
    """`--init EAGLE1 --arch eagle3`: the midlayer's q / k / v of [embedding; state] are the
    EAGLE-1 layer's of fc([embedding; feature]) (fc's bias aside); MLP, o_proj and the
    post-attention norm copied; the draft vocabulary the head's."""
    from specdec_core.training.layout import resolve_arch, resolve_layers
    from specdec_core.training.starting_model import starting_model
    from tests.eagle_tiny import tiny_head

    eagle1 = tiny_head(deep_target, "eagle1", draft_vocab=16)
    assert resolve_arch("eagle3", eagle1) == "eagle3"
    assert resolve_layers("eagle3", eagle1, None) == 1
    model, draft_ids = starting_model("eagle", eagle1, deep_target, [], 16, "eagle3")
    assert model.kind == "eagle3" and torch.equal(draft_ids, eagle1.draft_ids())
    h = deep_target.model.config.hidden_size
    both = torch.randn(5, 2 * h)
    layer, midlayer = eagle1.layers[0], model.midlayer
    for name in ("q_proj", "k_proj", "v_proj"):
        ours = getattr(midlayer.self_attn, name)(both)
        theirs = getattr(layer.self_attn, name)(both @ eagle1.fc.weight.T)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    copied = ((midlayer.mlp, layer.mlp), (midlayer.self_attn.o_proj, layer.self_attn.o_proj))
    for ours, theirs in copied:
        for key, value in theirs.state_dict().items():
            assert torch.equal(ours.state_dict()[key], value)
