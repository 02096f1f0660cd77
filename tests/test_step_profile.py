"""Where a step's time goes: every step's phases, their sums, and `specdec bench --profile`."""

from __future__ import annotations

import json
import time

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step, StepPhases
from specdec_core.heads.eagle.formats import save_head
from specdec_core.loop.decode import generate
from specdec_core.measurement.bench import run_bench
from specdec_core.measurement.step_profile import format_profile, profiles
from specdec_core.measurement.sweep_records import Aggregate
from specdec_core.run.methods import build_drafter
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt, tiny_model, tiny_tokenizer

TREE = {"tree_depth": 3, "tree_topk": 2, "tree_tokens": 5}
PROFILE_KEYS = {"profile", "profile_ar_steps", "draft_parts", "step_cost_ar_steps"}


@pytest.fixture(scope="module")
def head(tiny_target):
    return tiny_head(tiny_target)


def decode(target, method, head, config, pause: float = 0.0):
    """(steps, summary, the consumer's clock at each step) of one run; the consumer waits
    `pause` seconds after each step."""
    drafter = build_drafter(method, target, head if method.startswith("eagle") else None)
    steps, arrivals = [], []
    for event in generate(target, drafter, prompt(6), config):
        if isinstance(event, Step):
            arrivals.append(time.perf_counter())
            steps.append(event)
            time.sleep(pause)
        elif isinstance(event, Finished):
            return steps, event.summary, arrivals
    raise AssertionError("no Finished event")


@pytest.mark.parametrize("method", ["ar", "eagle", "eagle2", "eagle2-lookup", "ngram"])
def test_a_runs_phases_are_non_negative_and_add_up_to_its_wall_time(tiny_target, head, method):
    config = DecodeConfig(max_new_tokens=20, k=3, **TREE)
    steps, summary, _ = decode(tiny_target, method, head, config)
    assert steps and summary.steps == len(steps)
    for step in steps:
        assert all(seconds >= 0 for seconds in step.phases.seconds().values())
        assert all(seconds >= 0 for seconds in step.phases.draft_parts.values())
    phases = summary.phases
    assert summary.prefill_seconds + phases.total == pytest.approx(summary.wall_seconds)
    in_steps = sum(step.phases.total for step in steps)
    assert in_steps <= phases.total  # plus the loop's tail after the last step
    assert phases.loop - sum(s.phases.loop for s in steps) == pytest.approx(phases.total - in_steps)


def test_a_steps_phases_cover_the_time_from_the_previous_yield_to_its_own(tiny_target, head):
    pause = 0.02
    config = DecodeConfig(max_new_tokens=12, k=3, **TREE)
    steps, _, arrivals = decode(tiny_target, "eagle2-lookup", head, config, pause)
    later = steps[1:]
    assert len(later) >= 2
    assert all(step.phases.loop >= pause for step in later)  # the consumer's time is the loop's
    covered = sum(step.phases.total for step in later)
    assert covered == pytest.approx(arrivals[-1] - arrivals[0], abs=0.01)


def test_draft_and_verify_seconds_keep_their_meaning(tiny_target, head):
    config = DecodeConfig(max_new_tokens=16, k=3)
    steps, summary, _ = decode(tiny_target, "eagle", head, config)
    for step in steps:
        phases = step.phases
        assert step.draft_seconds == phases.draft + phases.commit
        assert step.verify_seconds == phases.target + phases.accept + phases.keep
    assert summary.draft_seconds == pytest.approx(sum(s.draft_seconds for s in steps))
    assert summary.verify_seconds == pytest.approx(sum(s.verify_seconds for s in steps))
    assert summary.to_record()["phases"].keys() == {*StepPhases.NAMES, "draft_parts"}


@pytest.mark.parametrize(
    "method, parts",
    [
        ("eagle", {"head", "tokens"}),
        ("eagle2", {"head", "tree"}),
        ("eagle2-lookup", {"head", "tree", "merge"}),
        ("ar", set()),
        ("ngram", set()),
    ],
)
def test_eagle_drafters_split_their_draft_into_head_passes_and_the_rest(
    tiny_target, head, method, parts
):
    config = DecodeConfig(max_new_tokens=12, k=3, **TREE)
    steps, summary, _ = decode(tiny_target, method, head, config)
    assert set(summary.phases.draft_parts) == parts
    for step in steps:
        assert sum(step.phases.draft_parts.values()) <= step.phases.draft


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_sampled_eagle2_tree_splits_its_draft_too(tiny_target, head, temperature):
    config = DecodeConfig(max_new_tokens=8, temperature=temperature, **TREE)
    _, summary, _ = decode(tiny_target, "eagle2", head, config)
    assert set(summary.phases.draft_parts) == {"head", "tree"}


def test_a_profiled_bench_keeps_greedy_output_identical_to_ar(tiny_target, head, tmp_path):
    spec = str(save_head(head, tmp_path / "head", dtype=torch.float32))
    methods = ["eagle", "eagle2", "eagle2-lookup", "ngram"]
    config = DecodeConfig(max_new_tokens=16, k=3, **TREE)
    result = run_bench(
        tiny_target, methods, ["w3 w4 w5 w6", "w10 w11 w3 w9"], config, {"head": spec}
    )
    found = profiles(result.methods)
    assert found["ar"].step_cost_ar_steps == pytest.approx(1.0)
    for method in methods:
        assert result.methods[method].identical_to_ar == 1.0
        profile = found[method]
        assert profile.in_ms()["step"] == pytest.approx(sum(profile.ms.values()))
        assert profile.step_cost_ar_steps == pytest.approx(profile.step_ms / profile.ar_step_ms)
    records = result.as_dict(profile=True)["methods"]
    assert all(set(records[name]) >= PROFILE_KEYS for name in ["ar", *methods])
    assert not PROFILE_KEYS & set(result.as_dict()["methods"]["eagle"])  # only when asked


def test_the_profile_table_shows_each_phase_and_marks_an_unsplit_baseline():
    phases = StepPhases(draft=0.004, target=0.02, accept=0.001, keep=0.0005, commit=0.003,
                        loop=0.0015, draft_parts={"head": 0.003, "tree": 0.001})  # fmt: skip
    ar = Aggregate(10.0, 1.0, steps=10, phases=StepPhases(target=0.2, loop=0.05))
    methods = {"ar": ar, "eagle2": Aggregate(16.0, 2.0, steps=1, phases=phases),
               "hf-generate": Aggregate(10.0, 1.0, steps=10)}  # fmt: skip
    table = format_profile(methods)
    assert "ar step 25.0 ms" in table
    lines = [line.split() for line in table.splitlines()]
    eagle2_ms, eagle2_ar = [line for line in lines if line and line[0] == "eagle2"][:2]
    assert eagle2_ms[1:] == ["4.0", "20.0", "1.0", "0.5", "3.0", "1.5", "30.0"]
    assert eagle2_ar[-1] == "1.20"  # 30 ms against a 25 ms ar step
    assert "no phases" in table and "head 3.0, tree 1.0" in table
    assert profiles(methods)["hf-generate"] is None


def test_a_profile_without_ar_says_to_add_it():
    from specdec_core.errors import SpecdecError

    with pytest.raises(SpecdecError, match="add ar to --methods"):
        profiles({"eagle": Aggregate(1.0, 1.0, steps=1, phases=StepPhases(target=0.1))})


def test_bench_profile_prints_the_table_and_writes_it_for_every_method(
    capsys, tiny_target, head, tmp_path
):
    for name in ("target",):
        tiny_model(1).save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
    spec = save_head(head, tmp_path / "head", dtype=torch.float32)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w1 w2 w5"}\n{"prompt": "w3 w9 w4"}\n')
    out = tmp_path / "bench.json"
    methods = ["ar", "eagle", "eagle2", "eagle2-lookup"]
    code = main([
        "bench", "--methods", ",".join(methods), "--prompts", str(prompts), "--raw",
        "--target", str(tmp_path / "target"), "--head", str(spec), "--max-new-tokens", "10",
        "--tree-depth", "3", "--tree-topk", "2", "--tree-tokens", "5",
        "--profile", "--json-out", str(out),
    ])  # fmt: skip
    table = capsys.readouterr().out
    assert code == 0
    assert "Where a step's time goes" in table and "The same in ar steps" in table
    assert "Inside the draft phase" in table
    records = json.loads(out.read_text())["methods"]
    for method in methods:
        record = records[method]
        assert record["identical_to_ar"] == 1.0
        assert set(record) >= PROFILE_KEYS
        assert set(record["profile"]) == {*StepPhases.NAMES, "step"}
        assert record["profile_ar_steps"]["step"] == pytest.approx(record["step_cost_ar_steps"])
    assert records["ar"]["step_cost_ar_steps"] == pytest.approx(1.0)
    assert set(records["eagle2-lookup"]["draft_parts"]) == {"head", "tree", "merge"}
