"""`--dtype auto` is bfloat16 on a CPU that multiplies it natively and float32 elsewhere, says
why in one line (the CLI and the Models panel), can be fixed for reproducible runs, and
`--reference fp32` checks a run against float32 `ar` (identical, or where they part and how many
tokens agree before it)."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from app.engine import SpecdecEngine
from app.engine_api import TargetInfo, TargetRequest
from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.prefix_cache import common_prefix
from specdec_core.errors import SpecdecError
from specdec_core.measurement.bench import BenchResult, format_table
from specdec_core.measurement.measure import Row, aggregate
from specdec_core.measurement.reference_check import check, reference_output
from specdec_core.models import prepacked_linear
from specdec_core.models.loading import AUTO_DTYPE_ENV, auto_dtype_reason, choose_dtype
from specdec_core.models.prepacked_linear import native_bf16
from tests.tiny import prompt, tiny_model, tiny_tokenizer

CPU = torch.device("cpu")
needs_native_bf16 = pytest.mark.skipif(
    not native_bf16(), reason="bf16 output equals bf16 ar where bf16 linears are native"
)


@pytest.fixture(autouse=True)
def unfixed_auto(monkeypatch):
    """`auto` as this machine decides it, whatever the environment fixes."""
    monkeypatch.delenv(AUTO_DTYPE_ENV, raising=False)


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16") / "target"
    tiny_model(1).save_pretrained(root)
    tiny_tokenizer().save_pretrained(root)
    return root


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("native", [True, False])
def test_auto_is_float32_on_a_cpu_and_says_where_bfloat16_runs_faster(monkeypatch, native):
    monkeypatch.setattr(prepacked_linear, "native_bf16", lambda: native)
    choice = choose_dtype("auto", CPU)
    assert choice.dtype == torch.float32
    assert choice.reason == auto_dtype_reason(CPU)  # one decision, one line
    assert choice.reason.startswith("dtype auto: float32 (") and "\n" not in choice.reason
    assert (
        ("--dtype bfloat16 runs faster" in choice.reason)
        if native
        else ("no native bf16" in choice.reason)
    )


def test_a_chosen_dtype_is_kept_and_an_unknown_one_refused():
    assert choose_dtype("float32", CPU).dtype == torch.float32
    assert choose_dtype("bfloat16", CPU).reason == "dtype bfloat16, as asked"
    with pytest.raises(SpecdecError, match="unknown dtype 'half'"):
        choose_dtype("half", CPU)


def test_the_environment_fixes_what_auto_means(monkeypatch):
    monkeypatch.setattr(prepacked_linear, "native_bf16", lambda: True)
    monkeypatch.setenv(AUTO_DTYPE_ENV, "float32")
    choice = choose_dtype("auto", CPU)
    assert choice.dtype == torch.float32 and AUTO_DTYPE_ENV in choice.reason
    monkeypatch.setenv(AUTO_DTYPE_ENV, "fp8")
    with pytest.raises(SpecdecError, match=f"{AUTO_DTYPE_ENV}=fp8 is not a dtype"):
        choose_dtype("auto", CPU)


def test_the_engine_brings_the_reason_and_the_models_panel_shows_it(target_dir, qtbot):
    from app.widgets.models_panel import ModelsPanel

    request = TargetRequest(str(target_dir), "cpu", "auto")
    info = SpecdecEngine().load_target(request, lambda message, fraction: None, threading.Event())
    picked = "float32"
    assert info.dtype == picked and info.dtype_reason == auto_dtype_reason(CPU)
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    panel.show_loaded(info)
    assert info.dtype_reason in panel.message.text() and picked in panel.message.text()
    panel.show_loaded(TargetInfo("t", "cpu", "float32", 1))  # an engine that gives no reason
    assert panel.message.text() == "target t: 0 M parameters, cpu, float32"


def test_a_check_against_ar_says_how_many_tokens_agree_before_the_first_difference(tiny_target):
    ids = prompt(6)
    reference = reference_output(tiny_target, ids, DecodeConfig(max_new_tokens=12))
    same = check(tiny_target, ids, reference, reference)
    assert same.identical and same.agreeing == 12
    assert same.line(tiny_target.tokenizer.decode) == "identical to float32 ar (12 tokens)"
    parted = list(reference)
    parted[5] = (parted[5] + 1) % tiny_target.vocab_size
    found = check(tiny_target, ids, parted, reference)
    assert not found.identical and found.agreeing == 5
    assert found.difference.run_token == parted[5]
    assert found.difference.reference_token == reference[5]
    assert found.difference.label == "bug"  # a changed token, not a rounding effect
    line = found.line(tiny_target.tokenizer.decode)
    assert "at new token 6: 5 of 12 tokens agree before it" in line and "bug" in line
    record = found.to_record()
    assert record["agreeing_tokens"] == 5 and record["first_difference"]["position"] == 5


def test_a_bf16_run_parting_from_float32_ar_is_judged_by_bf16_rounding(tiny_target):
    """The margin is measured in float32; the rounding that may explain it is the run's."""
    ids = prompt(6)
    reference = reference_output(tiny_target, ids, DecodeConfig(max_new_tokens=8))
    parted = [*reference[:2], (reference[2] + 1) % tiny_target.vocab_size, *reference[3:]]
    own = check(tiny_target, ids, parted, reference).difference
    bf16 = check(tiny_target, ids, parted, reference, torch.bfloat16).difference
    assert bf16.reference_gap == own.reference_gap and bf16.dtype == "float32"
    assert bf16.tolerance / own.tolerance == pytest.approx(
        torch.finfo(torch.bfloat16).eps / torch.finfo(torch.float32).eps
    )


def test_generate_reference_fp32_checks_a_bf16_run_against_float32_ar(capsys, target_dir):
    common = ["--target", str(target_dir), "--prompt", "w4 w5 w6", "--raw", "--json"]
    common += ["--max-new-tokens", "24"]
    code, out, _ = cli(capsys, "generate", *common, "--method", "ar", "--dtype", "float32")
    exact = json.loads(out)["token_ids"]
    code, out, _ = cli(
        capsys, "generate", *common, "--method", "ngram", "--dtype", "bfloat16",
        "--reference", "fp32",
    )  # fmt: skip
    record = json.loads(out)
    assert code == 0 and record["dtype"] == "bfloat16"
    same, fp32 = record["reference_checks"]
    assert same["dtype"] == "bfloat16" and fp32["dtype"] == "float32"
    assert fp32["identical"] == (record["token_ids"] == exact)
    assert fp32["agreeing_tokens"] == common_prefix(record["token_ids"], exact)
    assert fp32["reference_tokens"] == len(exact)


@needs_native_bf16
def test_a_bf16_speculative_run_is_identical_to_bf16_ar_and_says_so(capsys, target_dir):
    args = ["generate", "--target", str(target_dir), "--prompt", "w4 w5 w6", "--raw"]
    code, _, err = cli(
        capsys, *args, "--method", "ngram", "--dtype", "bfloat16", "--reference", "same",
        "--max-new-tokens", "24",
    )  # fmt: skip
    assert code == 0 and "[reference] identical to bfloat16 ar (24 tokens)" in err


def test_a_float32_run_checks_against_float32_ar_once(capsys, target_dir):
    args = ["generate", "--target", str(target_dir), "--prompt", "w4 w5", "--raw", "--json"]
    code, out, _ = cli(capsys, *args, "--method", "ngram", "--dtype", "float32",
                       "--reference", "fp32")  # fmt: skip
    checks = json.loads(out)["reference_checks"]
    assert code == 0 and [c["dtype"] for c in checks] == ["float32"] and checks[0]["identical"]


def test_a_reference_at_temperature_above_zero_is_refused_in_one_line(capsys, target_dir):
    code, _, err = cli(
        capsys, "generate", "--target", str(target_dir), "--prompt", "w4", "--raw",
        "--temperature", "1", "--reference", "fp32",
    )  # fmt: skip
    assert code == 2 and "--reference compares greedy outputs" in err
    assert len(err.strip().splitlines()) == 1


def test_bench_reference_fp32_records_where_each_row_parts_from_float32_ar(capsys, target_dir,
                                                                          tmp_path):  # fmt: skip
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("w4 w5", "w7 w8 w9")))
    out = tmp_path / "bench.json"
    code, table, _ = cli(
        capsys, "bench", "--target", str(target_dir), "--methods", "ar,ngram", "--prompts",
        str(prompts), "--raw", "--max-new-tokens", "16", "--dtype", "bfloat16",
        "--reference", "fp32", "--json-out", str(out),
    )  # fmt: skip
    saved = json.loads(out.read_text())
    assert code == 0 and saved["config"]["reference"] == "float32"
    for row in saved["per_prompt"]:
        found = row["fp32_check"]
        assert found["dtype"] == "float32" and found["identical"] == row["identical_to_fp32"]
        assert found["identical"] == (found["agreeing_tokens"] == row["new_tokens"] and
                                      found["reference_tokens"] == row["new_tokens"])  # fmt: skip
    assert "identical to fp32 ar" in table


def test_the_bench_table_says_how_far_rows_follow_fp32_ar_where_they_part(tiny_target):
    ids = prompt(6)
    reference = reference_output(tiny_target, ids, DecodeConfig(max_new_tokens=10))
    rows = []
    for index, cut in enumerate((3, 7, None)):
        output = list(reference)
        if cut is not None:
            output[cut] = (output[cut] + 1) % tiny_target.vocab_size
        found = check(tiny_target, ids, output, reference)
        rows.append(
            Row(method="ar", token_ids=tuple(output), new_tokens=10, steps=10, wall_seconds=1.0,
                draft_seconds=0.0, verify_seconds=1.0, prompt_index=index, identical_to_ar=True,
                identical_to_fp32=found.identical, fp32_check=found)
        )  # fmt: skip
    result = BenchResult(config={}, rows=rows)
    result.methods["ar"] = aggregate(rows).against(aggregate(rows).tokens_per_second)
    line = format_table(result).splitlines()[-1]
    note = "identical to fp32 ar 0.33 (elsewhere 3-7 tokens agree before the first difference)"
    assert note in line
