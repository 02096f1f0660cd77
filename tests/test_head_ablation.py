"""scripts/head_ablation.py: variants trained on one generation job, benched in one run per
temperature, τ per evaluation file in the table; a rerun reuses what is finished."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_core.training.generation_job import run_job
from tests.test_generation_job import setup, tiny_plan  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_ablation_trains_each_variant_and_tables_tau_per_file(setup, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    run_job(data, tiny_plan(setup, tokens=1500))
    for name in ("alpha", "beta"):
        words = " ".join(f"w{i}" for i in range(4, 10))
        (tmp_path / f"{name}.jsonl").write_text(
            "\n".join(json.dumps({"prompt": f"{words} w{i}"}) for i in range(3)) + "\n"
        )
    out = tmp_path / "table.json"
    argv = [
        *(sys.executable, str(ROOT / "scripts" / "head_ablation.py"), "--data", str(data)),
        *("--target", str(setup / "target"), "--tokens", "100000", "--epochs", "1"),
        *("--variants", "base,noise0", "--baseline", "", "--limit", "2"),
        *("--eval", str(tmp_path / "*.jsonl"), "--max-new-tokens", "8"),
        *("--train-flags", "--draft-vocab 16 --batch-tokens 512 --feature-dtype float32 "
          "--val-prompts 0 --val-kinds 1"),
        *("--work", str(tmp_path / "work"), "--out", str(out)),
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    for temperature in ("t0", "t1"):
        assert set(report[temperature]) == {"base", "noise0"}
        for row in report[temperature].values():
            assert set(row["tau_by_file"]) == {"alpha", "beta"}
            assert all(tau >= 1.0 for tau in row["tau_by_file"].values())
    assert report["t0"]["base"]["identical_to_ar"] == 1.0
    cards = {n: json.loads((tmp_path / "work" / "heads" / n / "specdec_card.json").read_text())
             for n in ("base", "noise0")}  # fmt: skip
    assert [c["train_config"]["noise"] for c in cards.values()] == [0.2, 0.0]
    assert set(report["top1_by_kind"]["base"])  # the held-out kinds' top-1
    # a rerun trains nothing: its finished variants are reused (benching them again is the
    # first run's, already checked)
    again = subprocess.run(
        [*argv, "--trained-only"], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert again.returncode == 0 and "specdec_core.cli train" not in again.stdout  # reused


@pytest.mark.slow
def test_vocab_coverage_reports_the_share_of_answer_tokens_per_file(setup, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    run_job(data, tiny_plan(setup, tokens=800))
    (tmp_path / "alpha.jsonl").write_text(json.dumps({"prompt": "w4 w5 w6 w7 w8"}) + "\n")
    out = tmp_path / "coverage.json"
    argv = [
        *(sys.executable, str(ROOT / "scripts" / "vocab_coverage.py"), "--data", str(data)),
        *("--target", str(setup / "target"), "--eval", str(tmp_path / "*.jsonl")),
        *("--sizes", "1,32", "--max-new-tokens", "16", "--out", str(out)),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(out.read_text())["files"]["alpha"]
    assert row["top 32"] == 1.0  # the whole vocabulary covers everything
    assert 0.0 <= row["top 1"] < 1.0  # one token cannot cover a varied answer
