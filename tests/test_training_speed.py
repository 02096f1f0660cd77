"""scripts/training_speed.py measures an EAGLE head's training tokens/s on the corpus, its
features computed on the fly, in bfloat16 and in float32, each way timed in alternation, and
says which `specdec train` uses."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_core.training.loop import autocast_dtype

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_training_speed_reports_both_ways_and_the_one_training_uses():
    argv = [sys.executable, str(ROOT / "scripts" / "training_speed.py"), "--tokens", "3000"]
    argv += ["--batch-tokens", "600", "--seconds", "1", "--repeats", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rates = report["tokens_per_s"]
    assert set(rates) == {"bfloat16", "float32"} and report["arch"] == "eagle3"
    assert all(len(r) == 1 and r[0] > 0 for r in rates.values())
    assert report["bf16_over_fp32"] == [round(rates["bfloat16"][0] / rates["float32"][0], 2)]
    native = autocast_dtype(torch.device("cpu")) is not None
    assert report["specdec_train_uses"] == ("bfloat16" if native else "float32")
    assert report["environment"]["command"].startswith("python ")
