"""`specdec serve-check` against a stand-in engine (tests/fake_engine.py, a subprocess started
in vLLM's place): what it reports for identical and differing answers, τ and acceptance by
position from the engine's /metrics deltas, that the engine is always stopped, and the one-line
errors. The playground's side runs in this process on a tiny target."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.errors import SpecdecError
from specdec_core.run.runner import run
from specdec_core.serving.serving_check import (
    ENGINE_NEAR_TIE,
    SERVING_ENV_VARIABLE,
    CheckStopped,
    EngineLaunch,
    EngineOptions,
    engine_argv,
    serve_argv,
    serve_check,
    serving_python,
    start_engine,
)
from tests.fake_engine import SCRIPT, VARIABLE, argv_for, script
from tests.tiny import VOCAB, prompt

CONFIG = DecodeConfig(max_new_tokens=24, k=3, ngram_max=3)
PROMPTS = [prompt(6, offset=3), prompt(8, offset=5)]


class FakeLauncher:
    """Starts tests/fake_engine.py with the engine's flags and `settings`; keeps each process."""

    def __init__(self, settings: Path) -> None:
        self.settings = settings
        self.started: list[subprocess.Popen] = []

    def __call__(self, launch: EngineLaunch) -> subprocess.Popen:
        fake = replace(
            launch,
            argv=tuple(argv_for(launch.argv)),
            env={**launch.env, VARIABLE: str(self.settings)},
        )
        process = start_engine(fake)
        self.started.append(process)
        return process

    def stopped(self) -> bool:
        return bool(self.started) and all(p.poll() is not None for p in self.started)


def options(tmp_path: Path, **changes) -> EngineOptions:
    defaults = EngineOptions(
        python=Path(sys.executable),
        log_path=tmp_path / "engine.log",
        startup_timeout=30.0,
        request_timeout=30.0,
        stop_timeout=5.0,
        settle_timeout=1.0,
    )
    return replace(defaults, **changes)


def check_ar(target, tmp_path: Path, launcher, **given):
    """`serve_check` of `ar` on PROMPTS with CONFIG through `launcher` (`given`: its
    keyword arguments)."""
    return serve_check(target, "ar", PROMPTS, CONFIG, options(tmp_path), launcher=launcher, **given)


def references(target, method: str = "ar") -> dict[tuple[int, ...], tuple[int, ...]]:
    return {tuple(p): run(target, method, p, CONFIG).token_ids for p in PROMPTS}


def test_an_answer_equal_to_the_playgrounds_ar_is_reported_identical(tiny_target, tmp_path):
    launcher = FakeLauncher(script(tmp_path / "fake.json", references(tiny_target)))
    result = check_ar(tiny_target, tmp_path, launcher)
    assert result.identical and [row.verdict() for row in result.rows] == ["identical"] * 2
    for row, ids in zip(result.rows, references(tiny_target).values(), strict=True):
        assert row.first_difference is None and row.engine_tokens == row.reference_tokens == len(
            ids
        )
        assert row.engine_token is None and row.reference_token is None
        assert row.engine_tau is None and row.playground_tau is None  # ar drafts nothing
        assert row.engine_tokens_per_second > 0
    assert "--speculative-config" not in result.command
    assert "2/2 identical to the playground's ar" in result.table()
    json.dumps(result.to_record())
    assert launcher.stopped()


def test_a_differing_token_is_reported_at_its_position_with_both_tokens(tiny_target, tmp_path):
    first, second = (list(ids) for ids in references(tiny_target).values())
    changed = [*first[:5], (first[5] + 1) % VOCAB, *first[6:]]
    answers = {tuple(PROMPTS[0]): changed, tuple(PROMPTS[1]): second[:7]}  # the second stops early
    launcher = FakeLauncher(script(tmp_path / "fake.json", answers))
    result = check_ar(tiny_target, tmp_path, launcher)
    one, two = result.rows
    assert (one.identical, one.first_difference) == (False, 5)
    assert (one.engine_token, one.reference_token) == (changed[5], first[5])
    assert one.verdict().startswith(f"differs at 5: engine {changed[5]} ")
    assert (two.first_difference, two.engine_token, two.reference_token) == (7, None, second[7])
    assert "engine stopped" in two.verdict() and two.engine_finish == "stop"
    assert not result.identical and "0/2 identical" in result.table()


def test_a_first_difference_carries_the_targets_margin_and_whether_it_is_a_near_tie(
    tiny_target, tmp_path
):
    first, _ = (list(ids) for ids in references(tiny_target).values())
    changed = [*first[:5], (first[5] + 1) % VOCAB, *first[6:]]
    launcher = FakeLauncher(script(tmp_path / "fake.json", {tuple(PROMPTS[0]): changed}))
    result = serve_check(
        tiny_target, "ar", PROMPTS[:1], CONFIG, options(tmp_path), launcher=launcher
    )
    row = result.rows[0]
    with torch.inference_mode():
        logits = tiny_target.model(torch.tensor([[*PROMPTS[0], *first[:5]]])).logits[0, -1]
    assert row.reference_gap == pytest.approx(float(logits[first[5]] - logits[changed[5]]))
    assert row.reference_gap > ENGINE_NEAR_TIE and not row.near_tie
    assert "logits: not a near-tie)" in row.verdict() and row.to_record()["near_tie"] is False
    tie = replace(row, reference_gap=ENGINE_NEAR_TIE / 2)
    assert tie.near_tie and tie.verdict().endswith("logits: a float near-tie)")


def test_tau_and_acceptance_by_position_come_from_the_metrics_deltas(tiny_target, tmp_path):
    settings = script(
        tmp_path / "fake.json",
        references(tiny_target),
        drafts=10,
        accepted_per_position=[8, 5, 2],
    )
    launcher = FakeLauncher(settings)
    result = serve_check(
        tiny_target, "ngram", PROMPTS, CONFIG, options(tmp_path), launcher=launcher
    )
    assert result.identical and '"method": "ngram"' in result.command
    for row in result.rows:  # each answer: 10 drafts, 8 + 5 + 2 accepted
        assert row.engine_drafts == 10
        assert row.engine_tau == pytest.approx(1 + 15 / 10)
        assert row.engine_position_rates == pytest.approx((0.8, 0.5, 0.2))
    assert result.engine_tau == pytest.approx(2.5)
    assert result.engine_position_rates == pytest.approx((0.8, 0.5, 0.2))
    summaries = [run(tiny_target, "ngram", p, CONFIG) for p in PROMPTS]
    drafts = sum(s.drafted_per_position[0] for s in summaries if s.drafted_per_position)
    accepted = sum(sum(s.accepted_per_position) for s in summaries)
    assert drafts > 0  # the tiny target's answers repeat themselves: n-grams draft
    assert result.playground_tau == pytest.approx(1 + accepted / drafts)
    for row, summary in zip(result.rows, summaries, strict=True):
        assert row.playground_mean_accept_length == pytest.approx(summary.mean_accept_length)
    assert launcher.stopped()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"exit_code": 3}, r"exited with code 3 before it was ready \(fake engine: RuntimeError"),
        ({"health_after": 600}, r"did not answer http://127\.0\.0\.1:\d+/health within 1 s"),
        ({"omit_token_ids": True, "default": [5, 6]}, r"no token_ids"),
        ({}, r"HTTP 400: no canned answer"),
    ],
    ids=["dies-at-start", "never-ready", "no-token-ids", "refused"],
)
def test_the_engine_is_stopped_when_the_check_fails(tiny_target, tmp_path, settings, message):
    launcher = FakeLauncher(script(tmp_path / "fake.json", **settings))
    timeout = 1.0 if "health_after" in settings else 30.0
    with pytest.raises(SpecdecError, match=message) as failure:
        serve_check(
            tiny_target,
            "ar",
            PROMPTS,
            CONFIG,
            options(tmp_path, startup_timeout=timeout),
            launcher=launcher,
        )
    assert launcher.stopped()
    assert "\n" not in str(failure.value)
    if "ready" in message or "answer" in message:
        assert str(tmp_path / "engine.log") in str(failure.value)


@pytest.mark.parametrize("when", ["starting vLLM", "engine: prompt 2", "playground: prompt 2"])
def test_stop_ends_the_check_and_the_engine_at_each_stage(tiny_target, tmp_path, when):
    settings = {"health_after": 600} if when == "starting vLLM" else {}
    launcher = FakeLauncher(script(tmp_path / "fake.json", references(tiny_target), **settings))
    stop = threading.Event()
    pressed: list[float] = []

    def press_stop(message: str) -> None:
        if message.startswith(when):
            stop.set()
            pressed.append(time.monotonic())

    with pytest.raises(CheckStopped, match="the serving check was stopped"):
        check_ar(tiny_target, tmp_path, launcher, progress=press_stop, stop=stop)
    assert time.monotonic() - pressed[0] < 10  # a step, a quarter second or an engine's stop
    assert launcher.stopped() or when.startswith("playground")  # no engine started yet


def test_the_engine_is_stopped_on_ctrl_c(tiny_target, tmp_path):
    launcher = FakeLauncher(script(tmp_path / "fake.json", references(tiny_target)))

    def interrupt(message: str) -> None:
        if message.startswith("engine: prompt"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_ar(tiny_target, tmp_path, launcher, progress=interrupt)
    assert launcher.stopped()


def test_an_engine_that_ignores_sigterm_is_killed(tiny_target, tmp_path):
    settings = script(tmp_path / "fake.json", references(tiny_target), ignore_sigterm=True)
    launcher = FakeLauncher(settings)
    serve_check(
        tiny_target, "ar", PROMPTS, CONFIG, options(tmp_path, stop_timeout=0.5), launcher=launcher
    )
    assert launcher.started[0].returncode == -signal.SIGKILL


def test_the_engine_command_is_the_exported_setting_run_by_the_serving_python(tmp_path):
    serve, _ = serve_argv("ngram", DecodeConfig(k=4, ngram_max=4), "/models/smol", dtype="float32")
    argv = engine_argv(Path("/env/bin/python"), serve, 8123)
    assert argv[:6] == (
        "/env/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/smol",
        "--speculative-config",
    )  # fmt: skip
    assert json.loads(argv[6]) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }
    assert argv[7:] == (
        "--dtype", "float32", "--host", "127.0.0.1", "--port", "8123",
        "--served-model-name", "serve-check",
    )  # fmt: skip
    assert serve_argv("ar", CONFIG, "/m", dtype="bfloat16")[0] == (
        "vllm", "serve", "/m", "--dtype", "bfloat16",
    )  # fmt: skip
    head = tmp_path / "eagle3-head"  # an EAGLE-3 head folder: vLLM's method eagle3
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    serve, _ = serve_argv("eagle", DecodeConfig(k=3), "/m", model=str(head), dtype="float32")
    spec = json.loads(serve[serve.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "num_speculative_tokens": 3, "model": str(head.resolve())}


def test_a_missing_serving_env_is_one_line_naming_the_command_that_makes_it(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv(SERVING_ENV_VARIABLE, raising=False)
    with pytest.raises(SpecdecError, match=r"run \./playground serving-env"):
        serving_python(tmp_path / "none")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "w1 w2 w3"}) + "\n")
    argv = ["serve-check", "--prompts", str(prompts), "--serving-env", str(tmp_path / "none")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run ./playground serving-env" in err
    env = tmp_path / "env"  # $SPECDEC_SERVING_ENV names it when --serving-env does not
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    monkeypatch.setenv(SERVING_ENV_VARIABLE, str(env))
    assert serving_python() == env / "bin" / "python"


def test_the_cli_checks_a_model_folder_and_writes_the_report(tmp_path, monkeypatch, capsys):
    from specdec_core.models.loading import load_model
    from specdec_core.run.prompts import encode_prompt
    from tests.tiny import tiny_model, tiny_tokenizer

    tiny_model(1).save_pretrained(tmp_path / "target")
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    target = load_model(str(tmp_path / "target"), device="cpu", dtype="float32")
    texts = ["w1 w2 w3 w1 w2", "w4 w5 w6"]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps({"turns": [t]}) for t in texts))
    answers = {}
    for text in texts:
        ids = encode_prompt(target.tokenizer, text)
        answers[tuple(ids)] = run(target, "ar", ids, CONFIG).token_ids
    env = tmp_path / "env"  # a serving env whose python is the stand-in engine
    (env / "bin").mkdir(parents=True)
    python = env / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SCRIPT}" "$@"\n')
    python.chmod(0o755)
    settings = script(tmp_path / "fake.json", answers, drafts=4, accepted_per_position=[3, 1, 0])
    monkeypatch.setenv(VARIABLE, str(settings))
    out = tmp_path / "check.json"
    argv = [
        "serve-check", "--target", str(tmp_path / "target"), "--method", "ngram",
        "--prompts", str(tmp_path / "p.jsonl"), "--serving-env", str(env),
        "--max-new-tokens", "24", "--k", "3", "--log", str(tmp_path / "engine.log"),
        "--json-out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "2/2 identical to the playground's ar" in table
    record = json.loads(out.read_text())
    assert record["identical"] and record["method"] == "ngram"
    assert record["model"] == str(tmp_path / "target")
    assert record["engine_tau"] == pytest.approx(2.0)  # 1 + (3 + 1 + 0) / 4
    assert [row["identical"] for row in record["prompts"]] == [True, True]
    assert (tmp_path / "engine.log").read_text().startswith("fake engine: -m vllm.entrypoints")
