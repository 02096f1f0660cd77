"""`specdec export --method peagle`: vLLM's speculative config (eagle3 + parallel_drafting), the
head written in speculators' peagle layout, SGLang refused; checked against what vLLM's
speculators reader takes where a serving environment is on this machine."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head
from specdec_core.heads.eagle.head import Eagle3Variant
from specdec_core.serving.export import export
from specdec_core.serving.head_export import export_for_method
from specdec_core.serving.serving_check import serving_python
from tests.test_peagle_formats import (
    MASK,
    TARGET_LAYERS,
    q_rows,
    tiny_peagle,
    write_eagle3_layout,
    write_speculators,
)
from tests.tiny import prompt, tiny_loaded


@pytest.fixture(scope="module")
def target():
    return tiny_loaded(seed=7, layers=TARGET_LAYERS)


def test_vllm_config_is_eagle3_with_parallel_drafting(target, tmp_path):
    directory = write_speculators(tiny_peagle(target, layers=2), tmp_path / "peagle")
    exported = export("vllm", "peagle", DecodeConfig(k=5), "embedded", str(directory))
    spec = json.loads(exported.payload)
    assert spec == {
        "method": "eagle3",
        "num_speculative_tokens": 5,
        "model": str(directory.resolve()),
        "parallel_drafting": True,
    }


def test_sglang_is_refused_in_one_line(target, tmp_path):
    directory = write_speculators(tiny_peagle(target), tmp_path / "peagle")
    with pytest.raises(SpecdecError, match="SGLang has no parallel drafting") as refused:
        export("sglang", "peagle", DecodeConfig(k=3), "embedded", str(directory))
    assert "\n" not in str(refused.value)


def test_a_head_without_mask_hidden_is_refused_for_peagle(tmp_path):
    with pytest.raises(SpecdecError, match="is not one"):
        export("vllm", "peagle", DecodeConfig(k=3), "embedded", "embedded")


def test_an_eagle3_layout_head_is_written_in_speculators_layout(target, tmp_path):
    head = tiny_peagle(target, layers=1)
    source = write_eagle3_layout(head, tmp_path / "eagle3")
    notes = export("vllm", "peagle", DecodeConfig(k=4), "embedded", str(source)).notes
    assert any("--head-out DIR writes it in speculators' peagle layout" in n for n in notes)
    written = export_for_method("vllm", "peagle", str(source), tmp_path / "out", DecodeConfig(k=4))
    config = json.loads((written.directory / "config.json").read_text())
    assert config["speculators_model_type"] == "peagle"
    assert export("vllm", "peagle", DecodeConfig(k=4), "embedded", str(written.directory)).notes
    again = load_head(str(written.directory), target, torch.float32)
    original = load_head(str(source), target, torch.float32)
    ids = prompt(length=6)
    torch.testing.assert_close(q_rows(again, target, ids, 4), q_rows(original, target, ids, 4))


def test_top_level_only_flags_are_written_where_vllm_reads_them(target, tmp_path):
    variant = Eagle3Variant(fc_norm=True, norm_output=True)
    head = tiny_peagle(target, variant=variant)
    source = write_speculators(head, tmp_path / "peagle")
    values = json.loads((source / "config.json").read_text())
    for flag in ("fc_norm", "norm_output"):
        assert values["transformer_layer_config"][flag] is True
        del values["transformer_layer_config"][flag]
    (source / "config.json").write_text(json.dumps(values))
    notes = export("vllm", "peagle", DecodeConfig(k=3), "embedded", str(source)).notes
    assert any("update_peagle" in note for note in notes)


VLLM_READ = """
import json, sys
from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig
config = json.load(open(sys.argv[1]))
spec = SpeculatorsConfig.extract_vllm_speculative_config(config)
hf = SpeculatorsConfig.extract_transformers_pre_trained_config(config)
print(json.dumps({"spec": spec, "arch": hf["architectures"], "pard_token": hf["pard_token"],
                  "fc_norm": hf.get("fc_norm"), "layers": hf["num_hidden_layers"],
                  "draft_vocab_size": hf["draft_vocab_size"]}))
"""


def test_vllms_speculators_reader_takes_the_exported_head(target, tmp_path):
    try:
        python = serving_python()
    except SpecdecError:
        pytest.skip("no serving environment on this machine (SPECDEC_SERVING_ENV)")
    head = tiny_peagle(target, layers=2, variant=Eagle3Variant(fc_norm=True))
    directory = write_speculators(head, tmp_path / "peagle", k=5)
    done = subprocess.run(
        [str(python), "-c", VLLM_READ, str(directory / "config.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["spec"] == {
        "method": "eagle3",
        "num_speculative_tokens": 5,
        "parallel_drafting": True,
    }
    assert read["arch"] == ["PeagleLlamaForCausalLM"] and read["pard_token"] == MASK
    assert read["fc_norm"] is True and read["layers"] == 2 and read["draft_vocab_size"] == 12
