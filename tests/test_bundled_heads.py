"""Bundled heads by name: `embedded` is the current one, `embedded-vN` the heads it replaced."""

from __future__ import annotations

import json

import pytest
import torch

from specdec_core import resources
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import save_head
from specdec_core.run.runner import load_head
from tests.eagle_tiny import tiny_head


@pytest.fixture
def two_bundled_heads(tmp_path, tiny_target, monkeypatch):
    """An install whose resources hold the current head and the one it replaced."""
    save_head(tiny_head(tiny_target, seed=3), tmp_path / "head", dtype=torch.float32)
    save_head(tiny_head(tiny_target, seed=4), tmp_path / "head-v1", dtype=torch.float32)
    (tmp_path / "draft").mkdir()
    monkeypatch.setattr(resources, "resource_path", lambda *parts: tmp_path.joinpath(*parts))
    return tmp_path


def test_an_older_bundled_head_loads_by_its_name_beside_the_current_one(
    two_bundled_heads, tiny_target
):
    assert list(resources.bundled_heads()) == ["embedded", "embedded-v1"]
    for name, seed in (("embedded", 3), ("embedded-v1", 4)):
        loaded = load_head(name, tiny_target).fc.weight  # in the head's drafting dtype
        assert torch.equal(loaded, tiny_head(tiny_target, seed=seed).fc.weight.to(loaded.dtype))


def test_a_bundled_head_name_this_install_lacks_is_refused_with_the_names_it_has(
    two_bundled_heads, tiny_target
):
    with pytest.raises(SpecdecError) as refused:
        load_head("embedded-v7", tiny_target)
    message = str(refused.value)
    assert "no bundled head named 'embedded-v7'" in message
    assert "bundled: embedded, embedded-v1" in message and "\n" not in message


def test_this_install_bundles_its_current_head_as_embedded():
    assert resources.bundled_heads()["embedded"] == resources.resource_path("head")
    assert resources.names_bundled_head("embedded-v2") and not resources.names_bundled_head(
        "embedded-x"
    )


def test_the_serving_export_reads_an_older_bundled_head_from_its_own_folder(two_bundled_heads):
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.serving.export import export

    exported = export("sglang", "eagle2", DecodeConfig(tree_depth=3, tree_topk=2, tree_tokens=6),
                      model="embedded-v1")  # fmt: skip
    assert any(str(two_bundled_heads / "head-v1") in note for note in exported.notes)
    with pytest.raises(SpecdecError, match="no bundled head named 'embedded-v3'"):
        export("sglang", "eagle2", DecodeConfig(), model="embedded-v3")


def test_the_bundled_eagle3_head_is_named_and_vllm_serves_it_as_eagle3():
    """The head vLLM can serve (the EAGLE-1 head it cannot: an fc bias, a reduced vocabulary
    with SGLang's token map only) is bundled as `embedded-eagle3`, an EAGLE-3 head."""
    from app.widgets.server_export_dialog import vllm_refusal
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.serving.export import export

    folder = resources.bundled_heads()["embedded-eagle3"]
    assert folder == resources.resource_path("head-eagle3")
    assert json.loads((folder / "config.json").read_text())["architectures"] == [
        "LlamaForCausalLMEagle3"
    ]
    exported = export("vllm", "eagle", DecodeConfig(k=3), model="embedded-eagle3")
    payload = json.loads(exported.payload)
    assert payload["method"] == "eagle3" and payload["num_speculative_tokens"] == 3
    assert payload["model"] == str(folder)
    assert vllm_refusal(folder) == "" and vllm_refusal(resources.bundled_heads()["embedded"])
