"""EAGLE-1 heads with more than one decoder layer (`specdec train eagle --layers N`): trained,
grown from a one-layer head without changing its drafts, saved in the official layout, and
lossless in both drafters."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.heads.eagle.formats import load_head, save_head
from specdec_core.models.loading import load_model
from specdec_core.run.runner import run
from specdec_core.training.starting_model import starting_model
from tests.tiny import training_dir


def _argv(root, out, *extra) -> list[str]:
    return [
        *("train", "eagle", "--target", str(root / "target")),
        *("--data", str(root / "data.jsonl"), "--tokens", "800", "--epochs", "1"),
        *("--draft-vocab", "16", "--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--val-kinds", "0"),  # the table by kind is tests/test_validate_head.py's
        *("--out", str(out), *extra),
    ]


@pytest.mark.slow
def test_a_two_layer_head_trains_saves_in_the_official_layout_and_decodes_losslessly(tmp_path):
    root = training_dir(tmp_path)
    out = tmp_path / "head"
    assert main(_argv(root, out, "--layers", "2")) == 0
    config = json.loads((out / "config.json").read_text())
    card = json.loads((out / "specdec_card.json").read_text())
    assert config["num_hidden_layers"] == 2 and card["layers"] == 2
    target = load_model(str(root / "target"), "cpu", "float32")
    head = load_head(str(out), target)
    assert len(head.layers) == 2
    assert isinstance(head.layers[0].input_layernorm, torch.nn.Identity)  # official: layer 0 only
    assert not isinstance(head.layers[1].input_layernorm, torch.nn.Identity)
    ids = [1, 5, 9, 4]
    config = DecodeConfig(max_new_tokens=24, k=3)
    reference = run(target, "ar", ids, config).token_ids
    assert run(target, "eagle", ids, config, head).token_ids == reference
    assert run(target, "eagle2", ids, config, head).token_ids == reference
    again = load_head(str(save_head(head, tmp_path / "copy")), target)
    features = torch.randn(1, 3, head.config.hidden_size)
    tokens, positions = torch.tensor([[3, 7, 2]]), torch.arange(3)[None]
    with torch.no_grad():
        expected = head.step(features, tokens, positions).logits
        torch.testing.assert_close(again.step(features, tokens, positions).logits, expected)


@pytest.mark.slow
def test_growing_a_head_by_a_layer_keeps_its_drafts_until_trained(tmp_path):
    root = training_dir(tmp_path)
    one = tmp_path / "one"
    assert main(_argv(root, one)) == 0
    target = load_model(str(root / "target"), "cpu", "float32")
    small = load_head(str(one), target, torch.float32)
    grown, _ = starting_model("eagle", small, target, [], 16, layers=3)
    assert len(grown.layers) == 3
    features = torch.randn(1, 5, small.config.hidden_size)
    tokens, positions = torch.tensor([[3, 7, 2, 9, 4]]), torch.arange(5)[None]
    with torch.no_grad():
        torch.testing.assert_close(
            grown.step(features, tokens, positions).hidden,
            small.step(features, tokens, positions).hidden,
        )
    two = tmp_path / "two"
    assert main(_argv(root, two, "--init", str(one), "--layers", "2")) == 0
    trained = load_head(str(two), target, torch.float32)
    assert trained.layers[1].self_attn.o_proj.weight.abs().max() > 0  # training moved it


@pytest.mark.slow
def test_removing_layers_or_stacking_an_eagle3_head_is_refused_with_what_to_do(tmp_path, capsys):
    root = training_dir(tmp_path)
    two = tmp_path / "two"
    assert main(_argv(root, two, "--layers", "2")) == 0
    assert main(_argv(root, tmp_path / "x", "--init", str(two), "--layers", "1")) == 2
    assert "--layers 2 or more" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # refused before any data was collected
    assert main(_argv(root, tmp_path / "x", "--layers", "0")) == 2
    assert "at least one decoder layer" in capsys.readouterr().err
    deep = training_dir(tmp_path / "deep", layers=4)
    assert main(_argv(deep, tmp_path / "y", "--arch", "eagle3", "--layers", "2")) == 2
    assert "drop --layers" in capsys.readouterr().err
