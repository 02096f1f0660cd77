"""`specdec export --method pard`: vLLM's parallel drafting with the PARD draft, checked against
the draft's config.json (the mask token vLLM reads) and, where the serving environment is
installed, against vLLM's own source; SGLang's refusal names the line that decides it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.serving.export import export
from specdec_core.serving.serving_check import serving_python


def model_dir(root: Path, name: str, **values) -> str:
    folder = root / name
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, **values}
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_vllm_gets_a_draft_model_with_parallel_drafting(tmp_path):
    target = model_dir(tmp_path, "target")
    draft = model_dir(tmp_path, "draft", pard_token=5, spd_type="pard")
    done = export("vllm", "pard", DecodeConfig(k=6), target, draft)
    assert json.loads(done.payload) == {
        "method": "draft_model",
        "model": draft,
        "num_speculative_tokens": 6,
        "parallel_drafting": True,
    }
    assert done.command.startswith(f"vllm serve {target} --speculative-config ")


def test_a_draft_whose_config_names_no_mask_token_is_refused_with_vllms_line(tmp_path):
    target = model_dir(tmp_path, "target")
    plain = model_dir(tmp_path, "plain")
    with pytest.raises(SpecdecError) as error:
        export("vllm", "pard", DecodeConfig(k=4), target, plain)
    message = str(error.value)
    assert "\n" not in message
    assert "_init_parallel_drafting_params" in message and '"pard_token": ID' in message


def test_the_bundled_draft_is_no_pard_draft(capsys):
    code = main(["export", "--engine", "vllm", "--method", "pard", "--draft", "embedded"])
    assert code == 2
    assert "names no mask token" in capsys.readouterr().err


def test_a_pard_draft_of_another_vocabulary_is_refused(tmp_path):
    target = model_dir(tmp_path, "target")
    other = model_dir(tmp_path, "other", vocab_size=64, pard_token=5)
    with pytest.raises(SpecdecError, match="another tokenizer"):
        export("vllm", "pard", DecodeConfig(k=4), target, other)


def test_a_hub_draft_not_on_this_machine_is_exported_with_a_note(tmp_path):
    target = model_dir(tmp_path, "target")
    done = export("vllm", "pard", DecodeConfig(k=8), target, "amd/PARD-Llama-3.2-1B")
    assert json.loads(done.payload)["model"] == "amd/PARD-Llama-3.2-1B"
    assert any("not on this machine to check" in note for note in done.notes)


def test_sglang_has_no_parallel_draft_and_says_the_line_and_the_nearest(tmp_path):
    draft = model_dir(tmp_path, "draft", pard_token=5)
    with pytest.raises(SpecdecError) as error:
        export("sglang", "pard", DecodeConfig(k=4), model_dir(tmp_path, "target"), draft)
    message = str(error.value)
    assert "spec_registry.py _RESERVED_NAMES" in message and "--method classic" in message


def test_cli_export_prints_the_parallel_drafting_payload(tmp_path, capsys):
    draft = model_dir(tmp_path, "draft", pard_token=5)
    target = model_dir(tmp_path, "target")
    args = ["export", "--engine", "vllm", "--method", "pard", "--k", "5", "--draft", draft]
    assert main([*args, "--target", target]) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["parallel_drafting"] is True and spec["num_speculative_tokens"] == 5


def _vllm_source() -> Path | None:
    try:
        env = serving_python().parent.parent
    except SpecdecError:  # no serving environment on this machine
        return None
    found = sorted(env.glob("lib/python*/site-packages/vllm"))
    return found[0] if found else None


@pytest.mark.skipif(_vllm_source() is None, reason="no serving environment with vLLM here")
def test_the_payload_keys_are_vllms_and_it_reads_the_mask_token_we_write(tmp_path):
    """vLLM's source, as installed in the serving environment: every exported key is a field of
    its SpeculativeConfig, and its parallel drafting reads `pard_token` from the draft's
    config.json (after mask_token_id, in our order)."""
    source = _vllm_source()
    config = (source / "config" / "speculative.py").read_text()
    draft = model_dir(tmp_path, "draft", pard_token=5)
    spec = json.loads(
        export("vllm", "pard", DecodeConfig(k=4), model_dir(tmp_path, "t"), draft).payload
    )
    for key in spec:
        assert f"\n    {key}: " in config, key
    assert '"draft_model"' in config
    proposer = (source / "v1" / "spec_decode" / "llm_base_proposer.py").read_text()
    reads = proposer[proposer.index("def _init_parallel_drafting_params") :]
    assert (
        reads.index('"mask_token_id"') < reads.index('"pard_token"') < reads.index('"ptd_token_id"')
    )
