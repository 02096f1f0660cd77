"""The setting the playground exports, served by a real vLLM (PyPI's CPU build in the serving
environment `./playground serving-env` makes): plain, n-gram and the bundled EAGLE-3 head, each
checked by `serve_check` against the playground's `ar` on three chat prompts, with
`specdec watch` following the engine while it answers.

Marked `serving` (and `slow`): `./playground test-serving` installs the environment and runs
them; `./playground test` leaves them out. Without the environment they are skipped, unless
SPECDEC_SERVING_REQUIRED is set (as `./playground test-serving` sets it): then they fail.

What is asserted, and why each bound:
- every answer equals the playground's `ar` token for token, or parts from it at a float
  near-tie (`PromptCheck.near_tie`: the target's two tokens within `ENGINE_NEAR_TIE` logits,
  where vLLM's float32 kernels and the playground's sum in different orders);
- vLLM's τ (its /metrics, 1 + accepted ÷ drafts) within `TAU_TOLERANCE` of the playground's τ
  for the same method and prompts, counted the same way. The two do not always propose the
  same drafts: for the longest matching suffix vLLM's n-gram drafter copies what followed its
  earliest occurrence and stops at the end of the sequence (vllm/v1/spec_decode/
  ngram_proposer.py), ours copies what followed the most recent one and runs on over what it
  copied (drafters/ngram.py); where the proposals differ, so does the acceptance. Measured on
  a 2-vCPU AMD EPYC (docs/serving.md) the totals agreed within 0.01;
- `specdec watch URL` (the CLI, polling every second while the prompts run) reports the
  engine's speculation: measured intervals whose drafts and τ agree with the check's totals
  (the engine stays up 2.5 s after the last answer so that the watch counts it; its baseline
  may fall up to a second into the first prompt), and for plain vLLM that the server serves
  no speculative metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.models.loading import load_model
from specdec_core.resources import EAGLE3_HEAD
from specdec_core.run.prompts import encode_prompt, read_prompt_file
from specdec_core.run.runner import load_extra
from specdec_core.serving.serving_check import (
    EngineLaunch,
    EngineOptions,
    ServeCheck,
    serve_check,
    serving_python,
    start_engine,
)

pytestmark = [pytest.mark.serving, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "docs" / "bench" / "mixed10.jsonl"
TAU_TOLERANCE = 0.15
WATCH_TAU_TOLERANCE = 0.1  # the watch's baseline may fall up to a second into prompt 1
WATCH_CATCH_UP = 2.5  # seconds the engine stays up after the last answer: the watch polls at 1 s
SETTINGS = {  # method -> (decode settings, the head / draft spec vLLM loads)
    "ar": (DecodeConfig(max_new_tokens=64), ""),
    "ngram": (DecodeConfig(max_new_tokens=128, k=4, ngram_max=4), ""),
    "eagle": (DecodeConfig(max_new_tokens=64, k=3), EAGLE3_HEAD),
}


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return serving_python()
    except SpecdecError as error:
        if os.environ.get("SPECDEC_SERVING_REQUIRED"):
            pytest.fail(str(error))
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def embedded():
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # the suite's 1 thread is for tiny models
    target = load_model("embedded", "cpu", "float32")
    yield target
    torch.set_num_threads(threads)


class WatchedEngine:
    """The engine's process for `serve_check`, kept up `WATCH_CATCH_UP` seconds after the
    last answer before it is stopped, so the watch's next polls count that answer too."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.pid = process.pid

    def poll(self):
        return self.process.poll()

    def terminate(self) -> None:
        time.sleep(WATCH_CATCH_UP)
        self.process.terminate()

    def wait(self, timeout: float | None = None):
        return self.process.wait(timeout)

    def kill(self) -> None:
        self.process.kill()


class WatchingLauncher:
    """Starts the engine, and `specdec watch` on it (JSON lines, every second)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.watch: subprocess.Popen | None = None

    def __call__(self, launch: EngineLaunch) -> WatchedEngine:
        engine = WatchedEngine(start_engine(launch))
        self.watch = subprocess.Popen(
            [sys.executable, "-m", "specdec_core.cli", "watch", launch.url, "--json"]
            + ["--interval", "1"],
            stdout=(self.folder / "watch.out").open("w"),
            stderr=(self.folder / "watch.err").open("w"),
            cwd=ROOT,
        )
        return engine

    def stop(self) -> tuple[list[dict], str]:
        """Stop the watch; -> its measured intervals and its status lines."""
        assert self.watch is not None, "the engine was never started"
        self.watch.terminate()
        self.watch.wait(10)
        lines = (self.folder / "watch.out").read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()], (
            self.folder / "watch.err"
        ).read_text()


def check(method: str, python: Path, target, folder: Path) -> tuple[ServeCheck, list, str]:
    config, model = SETTINGS[method]
    texts = read_prompt_file(PROMPTS, 3)
    prompts = [encode_prompt(target.tokenizer, text) for text in texts]
    extra = load_extra(method, target, {"head": model}) if model else None
    launcher = WatchingLauncher(folder)
    options = EngineOptions(python=python, log_path=folder / "engine.log", settle_timeout=10.0)
    try:
        result = serve_check(
            target, method, prompts, config, options, model, extra, launcher=launcher
        )
    finally:
        intervals, status = launcher.stop() if launcher.watch is not None else ([], "")
    print(result.table())
    (folder / "check.json").write_text(json.dumps(result.to_record(), indent=2))
    return result, intervals, status


def assert_same_output(result: ServeCheck) -> None:
    for row in result.rows:
        assert row.identical or row.near_tie, (
            f"prompt {row.index}: {row.verdict()}; engine log {result.log_path}"
        )


def assert_served_tau(result: ServeCheck, intervals: list[dict]) -> None:
    assert result.engine_tau is not None and result.playground_tau is not None, result.notes
    assert abs(result.engine_tau - result.playground_tau) <= TAU_TOLERANCE, result.table()
    drafts = sum(i["drafts"] for i in intervals if i["tau"] is not None)
    accepted = sum((i["tau"] - 1) * i["drafts"] for i in intervals if i["tau"] is not None)
    engine_drafts = sum(row.engine_drafts for row in result.rows)
    assert drafts >= 0.8 * engine_drafts, (drafts, engine_drafts)
    assert abs(1 + accepted / drafts - result.engine_tau) <= WATCH_TAU_TOLERANCE


def test_vllm_serves_the_embedded_model_as_the_playgrounds_ar(python, embedded, tmp_path):
    result, intervals, status = check("ar", python, embedded, tmp_path)
    assert_same_output(result)
    assert result.engine_tau is None and not intervals
    assert "serves no speculative-decoding metrics" in status


def test_vllm_ngram_speculation_serves_the_same_output_at_the_playgrounds_tau(
    python, embedded, tmp_path
):
    result, intervals, _ = check("ngram", python, embedded, tmp_path)
    assert_same_output(result)
    assert_served_tau(result, intervals)


def test_vllm_serves_the_bundled_eagle3_head_as_eagle3_at_the_playgrounds_tau(
    python, embedded, tmp_path
):
    result, intervals, _ = check("eagle", python, embedded, tmp_path)
    assert '"method": "eagle3"' in result.command or "eagle3" in result.command
    assert_same_output(result)
    assert_served_tau(result, intervals)
