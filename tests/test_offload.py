"""A model split by accelerate (layers offloaded to disk through `max_memory`) decodes exactly
like the same model loaded whole: accelerate's hooks move weights in and out, and the KV cache
is still rolled back and compacted correctly, for chains and trees."""

from __future__ import annotations

import pytest

from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Step
from specdec_core.models.loading import LoadOptions, load_model
from specdec_core.run.runner import run
from tests.eagle_tiny import tiny_head
from tests.tiny import perturbed, prompt, tiny_loaded, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def whole_and_split(tmp_path_factory):
    root = tmp_path_factory.mktemp("offload")
    tiny_model(1, layers=3).save_pretrained(root / "target")
    tiny_tokenizer().save_pretrained(root / "target")
    whole = load_model(str(root / "target"), "cpu", "float32")
    options = LoadOptions(
        device_map="auto", max_memory={"cpu": 90_000}, offload_folder=str(root / "offload")
    )
    split = load_model(str(root / "target"), "cpu", "float32", options=options)
    return whole, split


def test_max_memory_offloads_layers_and_inputs_go_to_the_embeddings_device(whole_and_split):
    _, split = whole_and_split
    placed = split.model.hf_device_map
    assert placed["model.embed_tokens"] == placed["model.layers.0"] == "cpu"
    assert placed["model.layers.1"] == placed["lm_head"] == "disk"
    assert str(split.device) == "cpu"
    assert any(p.device.type == "meta" for p in split.model.parameters())  # really offloaded


@pytest.mark.parametrize("method", ["ar", "ngram", "classic", "eagle2"])
def test_greedy_output_of_a_split_model_equals_the_whole_model(whole_and_split, method):
    whole, split = whole_and_split
    ids = prompt(6, 5)
    config = DecodeConfig(max_new_tokens=32, k=3, tree_tokens=30, tree_depth=3, tree_topk=12)
    reference = run(whole, "ar", ids, config)
    extra = None
    if method == "classic":
        extra = tiny_loaded(2, model=perturbed(tiny_model(1, layers=3), noise=0.6, seed=2))
    elif method == "eagle2":
        extra = tiny_head(split, seed=7)  # wide trees: a random head is weak
    steps: list[Step] = []
    summary = run(split, method, ids, config, extra, on_event=steps.append)
    assert summary.token_ids == reference.token_ids
    steps = [s for s in steps if isinstance(s, Step)]
    if method != "ar":  # drafts were accepted and rejected: the caches were rolled back
        assert sum(s.drafted for s in steps) > sum(s.accepted for s in steps) > 0


def test_the_cli_splits_a_model_with_device_map_and_max_memory(capsys, tmp_path):
    import json

    from specdec_core.cli import main

    tiny_model(1, layers=3).save_pretrained(tmp_path / "target")
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    args = ["generate", "--target", str(tmp_path / "target"), "--prompt", "w3 w4 w3 w4",
            "--raw", "--json", "--max-new-tokens", "12", "--method", "ngram"]  # fmt: skip
    assert main(args) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main([*args, "--device-map", "auto", "--max-memory", "cpu=90000"]) == 0
    split = json.loads(capsys.readouterr().out)
    assert split["token_ids"] == whole["token_ids"] and split["device"] == "cpu"
