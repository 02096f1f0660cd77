"""Bad model inputs: one line on stderr saying what to do, exit code 2, and whatever can be
checked without loading the model is checked before its weights are read."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.models import loading as models
from specdec_core.models import memory
from specdec_core.models.loading import LoadOptions, load_model
from specdec_core.models.memory import estimate, parse_max_memory
from tests.tiny import tiny_config, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good") / "model"
    tiny_model(1).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def no_weights_read(monkeypatch):
    """Reading weights fails the test: the input must be refused before."""

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were read before the input was checked")

    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", refuse)


def copy_of(good: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(good, tmp_path / "copy"))


def one_line_error(capsys, *argv: str) -> str:
    code = main(["generate", "--prompt", "w1 w2", "--raw", "--max-new-tokens", "4", *argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("specdec: error")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_path_that_does_not_exist(capsys, tmp_path):
    assert "model not found" in one_line_error(capsys, "--target", str(tmp_path / "nothing"))


def test_a_directory_that_is_not_a_model(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    line = one_line_error(capsys, "--target", str(tmp_path))
    assert "without config.json" in line and "save_pretrained" in line


def test_a_truncated_safetensors_file(capsys, good, tmp_path, no_weights_read):
    folder = copy_of(good, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    line = one_line_error(capsys, "--target", str(folder))
    assert "model.safetensors" in line and "truncated" in line and "again" in line


def test_a_safetensors_file_with_a_corrupt_header(capsys, good, tmp_path, no_weights_read):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    assert "not a valid safetensors" in one_line_error(capsys, "--target", str(folder))


def test_a_truncated_pytorch_model_bin(capsys, good, tmp_path, no_weights_read):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").unlink()
    state = tiny_model(1).state_dict()
    torch.save(state, folder / "pytorch_model.bin")
    data = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(data[: len(data) // 2])
    line = one_line_error(capsys, "--target", str(folder))
    assert "pytorch_model.bin" in line and "truncated or corrupt" in line


def test_a_whole_pytorch_model_bin_loads(good, tmp_path):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").unlink()
    torch.save(tiny_model(1).state_dict(), folder / "pytorch_model.bin")
    loaded = load_model(str(folder), "cpu", "float32")
    torch.testing.assert_close(loaded.model.lm_head.weight, tiny_model(1).lm_head.weight)


def test_a_truncated_gguf(capsys, tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "cut.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((32, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    path.write_bytes(path.read_bytes()[:-4000])
    line = one_line_error(capsys, "--target", str(path))
    assert "cannot read GGUF" in line and "corrupt" in line


def test_a_hub_id_offline_and_not_cached(capsys):
    line = one_line_error(capsys, "--target", "nobody/not-cached-anywhere@v1")
    assert "offline" in line and "not in the local cache" in line


def test_an_index_naming_a_missing_shard(capsys, good, tmp_path, no_weights_read):
    folder = copy_of(good, tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "missing model-00002-of-00002" in one_line_error(capsys, "--target", str(folder))


def test_remote_code_needs_the_flag(capsys, good, tmp_path, no_weights_read):
    folder = copy_of(good, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="their-own-lm", auto_map={"AutoModelForCausalLM": "lm.TheirLM"})
    (folder / "config.json").write_text(json.dumps(config))
    line = one_line_error(capsys, "--target", str(folder))
    assert "own Python code" in line and "--trust-remote-code" in line
    trusted = one_line_error(capsys, "--target", str(folder), "--trust-remote-code")
    assert "own Python code" not in trusted  # past the check (the code file is missing here)


def test_a_known_model_type_with_an_auto_map_runs_transformers_own_code(good, tmp_path):
    folder = copy_of(good, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_llama.LlamaForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    assert load_model(str(folder), "cpu", "float32").vocab_size == 32


def test_a_model_that_cannot_fit_is_refused_with_the_numbers(capsys, good, monkeypatch):
    monkeypatch.setattr(memory, "free_bytes", lambda device: (50_000, "this machine's RAM"))
    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", None)
    line = one_line_error(capsys, "--target", str(good), "--device", "cpu", "--dtype", "float32")
    assert re.search(
        r"needs about [\d.]+ kB \([\d.]+ kB of float32 weights \+ [\d.]+ kB of KV", line
    )
    assert "has 50.0 kB free" in line and "--dtype" in line and "--device-map auto" in line


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--max-memory", "0=20GiB"], "--max-memory needs --device-map"),
        (["--device-map", "auto", "--max-memory", "0=lots"], "not a size"),
        (["--device-map", "auto", "--max-memory", "gpu0:20GiB"], "DEVICE=SIZE"),
    ],
)
def test_bad_placement_flags_are_refused_before_a_load(capsys, good, no_weights_read, argv, says):
    assert says in one_line_error(capsys, "--target", str(good), *argv)


def test_max_memory_is_read_as_accelerate_takes_it():
    assert parse_max_memory("0=20GiB, cuda:1=10GB,cpu=64GiB") == {
        0: "20GiB", 1: "10GB", "cpu": "64GiB"
    }  # fmt: skip
    assert parse_max_memory("") is None


def test_the_estimate_counts_weights_and_the_kv_cache():
    config = tiny_config()
    guess = estimate(config, torch.float16, context=100)
    parameters = sum(p.numel() for p in tiny_model(1).parameters())
    assert guess.parameters == parameters and guess.weights_bytes == 2 * parameters
    # 2 (K and V) x 2 layers x 2 kv heads x head dim 8 x 100 tokens x 2 bytes
    assert guess.kv_bytes == 2 * 2 * 2 * 8 * 100 * 2


def test_the_estimate_of_an_8b_llama():
    from transformers import LlamaConfig

    config = LlamaConfig(  # Llama 3.1 8B's published config.json
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
        max_position_embeddings=131072, tie_word_embeddings=False,
    )  # fmt: skip
    guess = estimate(config, torch.bfloat16, context=8192)
    assert 8.0e9 < guess.parameters < 8.1e9  # 8.03 B parameters
    assert guess.kv_bytes == 2 * 32 * 8 * 128 * 8192 * 2  # 1 GiB
    assert "16.1 GB of bfloat16 weights + 1.1 GB of KV cache for 8192 tokens" in guess.describe()


def test_an_eagle_head_of_another_size_names_both_sizes(good, tmp_path):
    from specdec_core.heads.eagle.formats import load_head, save_head
    from tests.eagle_tiny import tiny_head
    from tests.tiny import LlamaForCausalLM, tiny_loaded

    wide = tiny_loaded(1, model=LlamaForCausalLM(tiny_config(hidden=64)))
    save_head(tiny_head(wide), tmp_path / "head")
    with pytest.raises(SpecdecError, match="hidden size 64 but the target has 32"):
        load_head(str(tmp_path / "head"), load_model(str(good), "cpu", "float32"))


def test_pickled_checkpoints_are_only_read_with_weights_only():
    root = Path(__file__).parent.parent / "specdec_core"
    calls = [
        (path, line)
        for path in root.rglob("*.py")
        for line in path.read_text().splitlines()
        if "torch.load(" in line and "weights_only=True" not in line
    ]
    assert calls == []  # training checkpoints and data shards too (transformers: the same)


def test_load_options_reach_from_pretrained(good, monkeypatch, tmp_path):
    seen = {}
    real = models.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", spy)
    options = LoadOptions(device_map="sequential", max_memory={"cpu": "1GiB"},
                          offload_folder=str(tmp_path / "off"))  # fmt: skip
    loaded = load_model(str(good), "cpu", "float32", options=options)
    assert seen["device_map"] == "sequential" and seen["max_memory"]["cpu"] in ("1GiB", 2**30)
    assert options.max_memory == {"cpu": "1GiB"}
    assert loaded.options is options and str(loaded.device) == "cpu"


def test_dtype_auto_says_what_it_picks_and_why_before_loading(tmp_path, monkeypatch):
    import torch

    from specdec_core.models.loading import auto_dtype_reason, load_model
    from specdec_core.models.prepacked_linear import native_bf16
    from tests.tiny import tiny_model, tiny_tokenizer

    monkeypatch.delenv("SPECDEC_AUTO_DTYPE", raising=False)
    line = auto_dtype_reason(torch.device("cpu"))
    picked = "float32"
    assert line.startswith(f"dtype auto: {picked} (")
    assert ("--dtype bfloat16 runs faster" in line) if native_bf16() else ("no native bf16" in line)
    tiny_model(1).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    said = []
    loaded = load_model(
        str(tmp_path), "cpu", "auto", lambda message, fraction: said.append(message)
    )
    assert said[0] == line and loaded.dtype_name == picked and loaded.dtype_reason == line
    said.clear()
    load_model(str(tmp_path), "cpu", "float32", lambda message, fraction: said.append(message))
    assert not any(m.startswith("dtype auto") for m in said)  # a chosen dtype needs no reason


def test_a_gguf_is_parsed_once_while_it_converts(tmp_path):
    """transformers opens a GGUF three times to convert it; inside `gguf_read_once` every open
    of one file is the same reader, and outside it each open parses the file again."""
    import gguf
    import numpy as np

    from specdec_core.models.loading import gguf_read_once

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_token_list([f"w{i}" for i in range(64)])
    writer.add_tensor("token_embd.weight", np.ones((64, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with gguf_read_once():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again
        assert len(first.fields["tokenizer.ggml.tokens"].data) == 64
    assert gguf.GGUFReader(path) is not first
    assert gguf.GGUFReader is type(first)  # the library's own class again


def test_conversions_in_two_threads_leave_gguf_its_own_reader():
    """Two conversions at once in one process take turns; neither keeps the other's swap."""
    import threading

    import gguf

    from specdec_core.models.loading import gguf_read_once

    original = gguf.GGUFReader
    inside = threading.Event()
    seen = []

    def second():
        with gguf_read_once():
            seen.append(gguf.GGUFReader is not original)

    with gguf_read_once():
        worker = threading.Thread(target=second)
        worker.start()
        inside.wait(0.2)  # the second conversion is waiting for this one
        assert not seen
    worker.join(5)
    assert seen == [True]
    assert gguf.GGUFReader is original
