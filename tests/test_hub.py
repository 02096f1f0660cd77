"""Hub ids: only the files from_pretrained reads are fetched, @revision, progress and Cancel,
half-downloaded files are never loaded, and every failure says what to do. No network: a
temporary Hugging Face cache and a fake hub (tests/hub_cache.py)."""

from __future__ import annotations

import json
import threading

import httpx2
import pytest
import torch
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

from specdec_core.control import Cancelled
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head, save_head
from specdec_core.models import loading as models
from specdec_core.models.hub import parse_spec
from specdec_core.models.loading import LoadOptions, load_model
from tests.eagle_tiny import tiny_head
from tests.hub_cache import FakeHub, cache_repo, tiny_repo, use_cache
from tests.tiny import tiny_loaded, tiny_model, tiny_tokenizer


@pytest.fixture
def tiny_source(tmp_path):
    return tiny_repo(tmp_path / "source")


def _sharded(tmp_path):
    """A tiny model in two safetensors shards with an index, plus what a hub repo also has."""
    source = tmp_path / "sharded"
    tiny_model(1).save_pretrained(source, max_shard_size="40KB")
    tiny_tokenizer().save_pretrained(source)
    (source / "README.md").write_text("a model card")
    assert (source / "model.safetensors.index.json").is_file()
    return source


def test_a_spec_may_name_a_revision():
    assert parse_spec("owner/name@v1.0") == ("owner/name", "v1.0")
    assert parse_spec("owner/name") == ("owner/name", None)


def test_only_config_tokenizer_and_the_indexed_shards_are_fetched(tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    source = _sharded(tmp_path)
    extra = {"original/consolidated.00.pth": 10**9, "pytorch_model.bin": 10**9}
    fake = FakeHub(source, tmp_path / "served", extra=extra).install(monkeypatch)
    loaded = load_model("owner/sharded", "cpu", "float32")
    shards = sorted(json.loads((source / "model.safetensors.index.json").read_text())[
        "weight_map"].values())  # fmt: skip
    assert fake.asked[0] == "config.json" and len(set(shards)) >= 2
    assert set(fake.asked) == {
        "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
        "model.safetensors.index.json", *shards,
    } | ({"special_tokens_map.json"} & {p.name for p in source.iterdir()})  # fmt: skip
    reference = tiny_model(1)
    torch.testing.assert_close(loaded.model.lm_head.weight, reference.lm_head.weight)


def test_a_cached_hub_id_loads_offline_at_the_revision_asked(tmp_path, monkeypatch):
    cache = use_cache(monkeypatch, tmp_path / "cache")
    for seed, commit, ref in ((1, "1" * 40, "main"), (5, "5" * 40, "v2")):
        source = tiny_repo(tmp_path / f"seed{seed}", seed)
        cache_repo(cache, "owner/tiny", source, commit=commit, ref=ref)
    main, v2 = load_model("owner/tiny", "cpu", "float32"), load_model("owner/tiny@v2", "cpu")
    torch.testing.assert_close(main.model.lm_head.weight, tiny_model(1).lm_head.weight)
    torch.testing.assert_close(v2.model.lm_head.weight, tiny_model(5).lm_head.weight)
    by_commit = load_model("owner/tiny@" + "5" * 40, "cpu", "float32")
    torch.testing.assert_close(by_commit.model.lm_head.weight, v2.model.lm_head.weight)


def test_a_half_downloaded_file_is_never_loaded(tmp_path, monkeypatch, tiny_source):
    cache = use_cache(monkeypatch, tmp_path / "cache")
    cache_repo(cache, "owner/cut", tiny_source, incomplete=("model.safetensors",))
    blobs = list((cache / "models--owner--cut" / "blobs").glob("*.incomplete"))
    assert len(blobs) == 1
    monkeypatch.setattr(
        models.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("loaded")
    )
    with pytest.raises(SpecdecError, match="not fully downloaded.*offline|offline.*not fully"):
        load_model("owner/cut", "cpu", "float32")


def test_an_interrupted_download_is_asked_again_next_time(tmp_path, monkeypatch, tiny_source):
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    fake = FakeHub(tiny_source, tmp_path / "served").install(monkeypatch)
    served, cut = fake.download, []

    def cut_off(repo, filename, revision=None, tqdm_class=None):
        if filename == "model.safetensors":
            cut.append(filename)
            raise OSError("connection reset by peer")
        return served(repo, filename, revision, tqdm_class)

    monkeypatch.setattr("specdec_core.models.hub.hf_hub_download", cut_off)
    with pytest.raises(SpecdecError, match="failed .*connection reset.*try again"):
        load_model("owner/tiny", "cpu", "float32")
    monkeypatch.setattr("specdec_core.models.hub.hf_hub_download", served)
    assert load_model("owner/tiny", "cpu", "float32").vocab_size == 32
    assert cut == ["model.safetensors"] and fake.asked.count("model.safetensors") == 1


@pytest.mark.slow
def test_download_progress_names_the_file_bytes_and_time_left(tmp_path, monkeypatch, tiny_source):
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    FakeHub(tiny_source, tmp_path / "served", chunks=8, delay=0.1).install(monkeypatch)
    messages: list[tuple[str, float]] = []
    load_model("owner/tiny", "cpu", "float32", lambda m, f: messages.append((m, f)))
    lines = [m for m, _ in messages if m.startswith("downloading model.safetensors: ")]
    assert lines and " / " in lines[-1] and "kB" in lines[-1]
    assert any("left" in line for line in lines)
    fractions = [f for _, f in messages]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_cancel_stops_a_download_between_chunks(tmp_path, monkeypatch, tiny_source):
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    fake = FakeHub(tiny_source, tmp_path / "served", chunks=20).install(monkeypatch)
    stop = threading.Event()

    def progress(message, fraction):
        if message.startswith("downloading model.safetensors"):
            stop.set()

    with pytest.raises(Cancelled, match="cancelled"):
        load_model("owner/tiny", "cpu", "float32", progress, stop=stop)
    assert fake.asked[-1] == "model.safetensors"


def test_cancel_before_the_weights_are_read(tiny_source):
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        load_model(str(tiny_source), "cpu", "float32", stop=stop)


def _response(status: int):
    return httpx2.Response(status, request=httpx2.Request("GET", "https://huggingface.co/x"))


@pytest.mark.parametrize(
    "error, says",
    [
        (GatedRepoError("gated", response=_response(403)), "gated.*hf auth login"),
        (RepositoryNotFoundError("no", response=_response(401)), "private.*hf auth login"),
    ],
)
def test_a_gated_or_private_repo_asks_for_hf_auth_login(tmp_path, monkeypatch, error, says):
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    FakeHub(tmp_path, tmp_path / "served", fail=error).install(monkeypatch)
    with pytest.raises(SpecdecError, match=says):
        load_model("meta-llama/Llama-3.1-8B-Instruct", "cpu")


def test_offline_and_not_cached_says_so(tmp_path, monkeypatch):
    use_cache(monkeypatch, tmp_path / "cache")
    with pytest.raises(SpecdecError, match="offline .* not in the local cache"):
        load_model("owner/never-downloaded", "cpu")


def test_remote_code_is_refused_before_the_weights_come(tmp_path, monkeypatch, tiny_source):
    config = json.loads((tiny_source / "config.json").read_text())
    config.update(model_type="my-own-arch", auto_map={"AutoModelForCausalLM": "m.MyLM"})
    (tiny_source / "config.json").write_text(json.dumps(config))
    (tiny_source / "m.py").write_text("raise SystemExit('never imported')\n")
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    fake = FakeHub(tiny_source, tmp_path / "served").install(monkeypatch)
    with pytest.raises(SpecdecError, match="own Python code .*--trust-remote-code"):
        load_model("owner/custom", "cpu")
    assert fake.asked == ["config.json"]
    fake.asked.clear()
    with pytest.raises(SpecdecError):  # trusted: its code is fetched (and here fails to load)
        load_model("owner/custom", "cpu", options=LoadOptions(trust_remote_code=True))
    assert "m.py" in fake.asked and "model.safetensors" in fake.asked


def test_an_eagle_head_from_the_hub_fetches_its_config_and_weights_only(tmp_path, monkeypatch):
    target = tiny_loaded(1)
    source = save_head(tiny_head(target), tmp_path / "head", dtype=torch.float32)
    (source / "README.md").write_text("card")
    (source / "tokenizer.json").write_text("{}")
    use_cache(monkeypatch, tmp_path / "cache", offline=False)
    fake = FakeHub(source, tmp_path / "served", extra={"training_state.pt": 10**9})
    fake.install(monkeypatch)
    head = load_head("someone/tiny-eagle", target, torch.float32)
    assert fake.asked == ["config.json", "model.safetensors"] and head.kind == "eagle1"
