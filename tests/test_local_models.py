"""Models on this machine: the Hugging Face cache and added folders, classified, and the heads
and drafts that fit a target first, the rest with the reason (a temporary cache; no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from specdec_core.heads.eagle.formats import save_head
from specdec_core.run.local_models import (
    LocalModel,
    classify,
    fits,
    list_local,
    ranked,
    suggested_heads,
)
from tests.eagle_tiny import tiny_head
from tests.hub_cache import cache_repo, tiny_repo, use_cache
from tests.tiny import tiny_config, tiny_loaded

HEADS = Path(__file__).parent / "fixtures" / "eagle-heads" / "heads"
LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256}


def _head_dir(folder: Path, config: Path) -> Path:
    """A published head config with no weights (weights are not needed to classify it)."""
    folder.mkdir(parents=True)
    shutil.copyfile(config, folder / "config.json")
    return folder


def test_the_cache_and_added_folders_are_listed_with_size_kind_and_last_use(tmp_path, monkeypatch):
    cache = use_cache(monkeypatch, tmp_path / "cache")
    target = tiny_loaded(1)
    cache_repo(cache, "owner/tiny", tiny_repo(tmp_path / "tiny"))
    cache_repo(cache, "someone/tiny-eagle", save_head(tiny_head(target), tmp_path / "h1"))
    head3 = save_head(tiny_head(target, "eagle3", draft_vocab=12), tmp_path / "h3")
    cache_repo(cache, "someone/tiny-eagle3-head", head3)
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    cache_repo(cache, "owner/bert", other)
    folder = tmp_path / "mine"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "model.Q4.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    tiny_repo(folder / "my-model")

    found = {m.spec: m for m in list_local([str(folder), str(tmp_path / "gone")])}
    kinds = {spec: m.kind for spec, m in found.items()}
    assert kinds == {
        "owner/tiny": "causal-lm", "someone/tiny-eagle": "eagle1",
        "someone/tiny-eagle3-head": "eagle3", "owner/bert": "other",
        str(folder / "sub" / "model.Q4.gguf"): "causal-lm", str(folder / "my-model"): "causal-lm",
    }  # fmt: skip
    tiny = found["owner/tiny"]
    assert tiny.size > 80_000 and tiny.last_used is not None and tiny.where == "hub cache"
    assert tiny.label.endswith("kB, causal LM") and tiny.config["hidden_size"] == 32
    assert found[str(folder / "my-model")].where == str(folder)


def test_published_head_configs_are_classified(tmp_path):
    cases = {
        "eagle1/EAGLE-LLaMA3-Instruct-8B.config.json": ("yuhuili/EAGLE-LLaMA3-8B", "eagle1"),
        "eagle3/specforge_llama3-8B-eagle3.json": ("lmsys/sglang-EAGLE3-x", "eagle3"),
        "eagle3/angelslim_qwen3-8b-eagle3.json": ("AngelSlim/Qwen3-8B_eagle3", "eagle3"),
    }  # fmt: skip
    for number, (config, (name, kind)) in enumerate(cases.items()):
        folder = _head_dir(tmp_path / str(number), HEADS / config)
        assert classify(folder, name)[0] == kind, config


def test_heads_that_fit_the_target_come_first_and_the_rest_say_why(tmp_path):
    def head(spec: str, config: str) -> LocalModel:
        kind, data = classify(_head_dir(tmp_path / spec.replace("/", "_"), HEADS / config), spec)
        return LocalModel(spec, kind, 1, config=data)

    llama3 = head("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3/specforge_llama3-8B-eagle3.json")
    research = head("x/speculators-eagle3", "eagle3/speculators-research_llama3_8_B.json")
    qwen = head("AngelSlim/Qwen3-8B_eagle3", "eagle3/angelslim_qwen3-8b-eagle3.json")
    order = ranked(LLAMA_31_8B, [qwen, research, llama3], "meta-llama/Llama-3.1-8B-Instruct")
    assert [(m.spec, reason) for m, reason in order] == [
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", None),  # published for it: first
        ("x/speculators-eagle3", None),  # target_vocab_size 128256 (vocab_size is the draft's)
        ("AngelSlim/Qwen3-8B_eagle3", "vocabulary of 151936 tokens, the target's has 128256"),
    ]


def test_fits_names_the_hidden_size_or_vocabulary_that_differs():
    target = tiny_config().to_dict()
    head = LocalModel("h", "eagle1", 1, config={**target, "hidden_size": 64})
    assert fits(target, head) == "hidden size 64, the target's is 32"
    draft = LocalModel("d", "causal-lm", 1, config={**target, "vocab_size": 33})
    assert "another tokenizer: 33 tokens" in fits(target, draft)
    assert fits(target, LocalModel("d", "causal-lm", 1, config=target)) is None
    assert fits(target, LocalModel("x.gguf", "causal-lm", 1)) is None  # known once loaded
    assert "not a causal LM" in fits(target, LocalModel("b", "other", 1, config=target))


def test_a_known_target_suggests_its_published_heads():
    assert suggested_heads("meta-llama/Llama-3.1-8B-Instruct")[0] == (
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    )
    assert set(suggested_heads("qwen/qwen3-8b@main")) == {
        "Tengyunw/qwen3_8b_eagle3", "AngelSlim/Qwen3-8B_eagle3"
    }  # fmt: skip
    assert suggested_heads("someone/unknown") == ()


def test_an_empty_or_missing_cache_lists_nothing(tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "nothing-here")
    shutil.rmtree(tmp_path / "nothing-here")
    assert list_local() == []
