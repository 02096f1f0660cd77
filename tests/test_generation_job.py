"""`specdec data`: the generation job resumes after a kill without duplicate or lost samples,
never lets an evaluation prompt in, reports progress per source and kind, and `specdec train
--data WORK` trains on it with the mix in the card."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.models.loading import load_model
from specdec_core.training import generation_job as job
from specdec_core.training.datasets import length_calls
from specdec_core.training.generation_job import load_samples, run_job
from specdec_core.training.job_plan import JobPlan, prepare, running_pid
from specdec_core.training.job_shards import Shard
from specdec_core.training.kinds import held_out_prompts
from specdec_core.training.magpie import normalise
from specdec_core.training.request_streams import conversation_requests
from tests.tiny import EVALUATION_PROMPT as EVALUATION
from tests.tiny import chat_target, tiny_tokenizer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("datagen")
    chat_target(root, conversations=400)
    (root / "eval.jsonl").write_text(json.dumps({"turns": [EVALUATION]}) + "\n")
    return root


def tiny_plan(setup, tokens=1200, **changes) -> JobPlan:
    settings = {
        "target": str(setup / "target"),
        "dtype": "float32",
        "tokens": tokens,
        "batch": 6,
        "long_batch": 3,
        "rows": 4,
        "max_new_tokens": 12,
        "exclude": (str(setup / "eval.jsonl"),),
        "conversations": str(setup / "chats.json"),
    }
    return JobPlan(**{**settings, **changes})


def _shards(work: Path) -> dict[str, list[Shard]]:
    found: dict[str, list[Shard]] = {}
    for path in sorted((work / "shards").glob("*/*.shard")):
        shard = replace(Shard.read(path), seconds=0.0, write_seconds=0.0)  # timings differ
        found.setdefault(path.parent.name, []).append(shard)
    return found


def test_a_job_killed_mid_batch_resumes_without_duplicate_or_lost_samples(setup, tmp_path):
    plan = tiny_plan(setup)
    target = load_model(plan.target, "cpu", "float32")
    whole = run_job(tmp_path / "whole", plan, target)
    assert whole["state"] == "finished"
    assert all(s["answer_tokens"] >= s["budget"] for s in whole["sources"].values())

    calls = {"n": 0}
    generate = target.model.generate

    def killed_on_the_ninth_call(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 9:  # in the middle of a batch: its shard is never written
            raise KeyboardInterrupt
        return generate(*args, **kwargs)

    target.model.generate = killed_on_the_ninth_call
    with pytest.raises(KeyboardInterrupt):
        run_job(tmp_path / "cut", plan, target)
    target.model.generate = generate
    cut = json.loads((tmp_path / "cut" / "status.json").read_text())
    assert cut["state"] == "stopped" and 0 < cut["answer_tokens"] < whole["answer_tokens"]
    scratch = [p for p in (tmp_path / "cut").rglob("*") if p.name.endswith((".tmp", ".part"))]
    assert not scratch  # no half-written shard left behind
    resumed = run_job(tmp_path / "cut", plan, target)

    assert _shards(tmp_path / "cut") == _shards(tmp_path / "whole")
    assert resumed["answer_tokens"] == whole["answer_tokens"]
    samples, _ = load_samples(tmp_path / "cut")
    ids = [tuple(s.ids) for s in samples]
    assert len(ids) == len(set(ids)) == sum(s["samples"] for s in whole["sources"].values())


def test_no_evaluation_or_held_out_prompt_enters_the_data(setup, tmp_path):
    plan = tiny_plan(setup, tokens=2500)
    final = run_job(tmp_path / "work", plan)
    samples, mix = load_samples(tmp_path / "work")
    tok = tiny_tokenizer()
    asked = {normalise(tok.decode(s.ids[: s.start])) for s in samples}
    assert not any(normalise(EVALUATION) in text for text in asked)
    assert not any(normalise(text) in a for text in held_out_prompts() for a in asked)
    assert mix["rejected"]["evaluation"] >= 2 == len(["exact", "near"])  # both were seen
    assert final["sources"]["sharegpt-first"]["rejected"]["evaluation"] >= 1
    # the held-out conversations of `specdec train` are never asked either
    chats = [c["conversations"] for c in json.loads((setup / "chats.json").read_text())]
    every = {r.turns[0] for s in ("sharegpt-first", "sharegpt-later", "long", "code")
             for r in conversation_requests(chats, s, plan.seed)}  # fmt: skip
    assert len(every) < len({c[0]["value"] for c in chats})


def test_second_turns_are_answered_with_the_first_answer_in_context(setup, tmp_path):
    run_job(tmp_path / "work", tiny_plan(setup, mix={"sharegpt-later": 1.0}, tokens=300))
    samples, mix = load_samples(tmp_path / "work")
    firsts = [s for s in samples if s.ids.count(2) == 1]  # prompt </s>, then the answer
    seconds = [s for s in samples if s.ids[: s.start].count(2) >= 2]
    assert firsts and seconds and set(mix["kinds"]) == {"chat", "chat-turn2"}
    # every second turn's prompt holds some first turn and the target's answer to it
    tok = tiny_tokenizer()

    def text(ids):
        return tok.decode(ids, skip_special_tokens=True)

    answered = [(text(f.ids[: f.start]), text(f.ids[f.start :])) for f in firsts]
    for second in seconds:
        prompt = text(second.ids[: second.start])
        assert any(prompt.startswith(f"{asked} {answer} ") for asked, answer in answered)


def test_status_reports_tokens_rate_and_eta_per_source_and_kind(setup, tmp_path, capsys):
    work = tmp_path / "work"
    run_job(work, tiny_plan(setup), stop=lambda: (work / "shards" / "code").is_dir())
    assert main(["data", "status", "--work", str(work)]) == 0
    out = capsys.readouterr().out
    assert "not running (stopped)" in out and "specdec data start" in out
    for source in ("magpie", "sharegpt-first", "sharegpt-later", "long", "code"):
        assert source in out
    assert "answer tokens by kind:" in out and "chat " in out
    assert "user turns written" in out  # magpie's own writing, measured apart
    report = json.loads((work / "status.json").read_text())
    code = report["sources"]["code"]
    assert code["tokens_per_s"] > 0 and code["answer_tokens"] > 0 and not code["done"]
    assert code["eta_s"] is not None and report["eta_s"] >= code["eta_s"] >= 0


def test_a_job_refuses_other_settings_in_its_folder_but_takes_a_new_budget_and_rows(
    setup, tmp_path
):
    work = tmp_path / "work"
    prepare(work, tiny_plan(setup))
    prepare(work, tiny_plan(setup, tokens=99_000))  # only the budget changed
    resumed = prepare(work, tiny_plan(setup, tokens=99_000, rows=2))  # and the grouping
    assert JobPlan.read(work / "job.json") == resumed and resumed.rows == 2
    with pytest.raises(SpecdecError, match="other settings .*max_new_tokens"):
        prepare(work, tiny_plan(setup, max_new_tokens=64))
    with pytest.raises(SpecdecError, match="unknown source.*poems"):
        tiny_plan(setup, mix={"poems": 1.0})
    assert main(["data", "status", "--work", str(tmp_path / "none")]) == 2


@pytest.mark.slow
def test_start_detaches_refuses_a_second_job_and_stop_then_start_resumes(setup, tmp_path):
    work = tmp_path / "work"
    argv = [
        *("--work", str(work), "--target", str(setup / "target"), "--dtype", "float32"),
        *("--tokens", "50M", "--batch", "6", "--long-batch", "3", "--max-new-tokens", "12"),
        *("--rows", "4"),
        *("--conversations", str(setup / "chats.json"), "--nice", "0"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = [sys.executable, "-m", "specdec_core.cli", "data", "start", *argv]
    done = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    try:
        for _ in range(600):  # the first shards arrive
            if len(list((work / "shards").glob("*/*.shard"))) >= 3:
                break
            time.sleep(0.1)
        again = subprocess.run(start, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 2 and "already running" in again.stderr
    finally:
        assert main(["data", "stop", "--work", str(work)]) == 0
    first = len(list((work / "shards").glob("*/*.shard")))
    assert running_pid(work) is None
    # as `stop` and `status` say: `start --work W` alone resumes the job as it was started
    resume = [sys.executable, "-m", "specdec_core.cli", "data", "start", "--work", str(work)]
    done = subprocess.run([*resume, "--nice", "0"], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        for _ in range(600):
            if len(list((work / "shards").glob("*/*.shard"))) > first + 2:
                break
            time.sleep(0.1)
    finally:
        main(["data", "stop", "--work", str(work)])
    assert "resuming after" in (work / "job.log").read_text()
    # the stopped and resumed job made exactly the batches one uninterrupted run makes
    made = len(list((work / "shards").glob("*/*.shard")))
    reference = tmp_path / "reference"
    plan = tiny_plan(setup, tokens=50_000_000, exclude=())
    run_job(reference, plan, stop=lambda: len(list(reference.glob("shards/*/*.shard"))) >= made)
    assert _shards(work) == _shards(reference)


@pytest.mark.slow
def test_training_on_a_job_records_its_mix_by_source_and_kind(setup, tmp_path):
    work = tmp_path / "work"
    run_job(work, tiny_plan(setup, tokens=1500))
    out = tmp_path / "head"
    argv = [
        *("train", "eagle", "--target", str(setup / "target"), "--data", str(work)),
        *("--tokens", "100000", "--epochs", "1", "--draft-vocab", "16"),
        *("--batch-tokens", "512", "--feature-dtype", "float32", "--val-prompts", "1"),
        *("--val-kinds", "0", "--noise", "0.05", "--out", str(out)),
    ]
    assert main(argv) == 0
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["train_config"]["noise"] == 0.05  # the ablation's knob reaches the trainer
    assert card["command"] == "specdec " + " ".join(argv)  # as typed, not the test runner's
    assert card["environment"]["command"] == card["command"] and card["environment"]["machine"]
    generated = card["data_mix"]["by_source"][str(work)]
    _, mix = load_samples(work)
    assert generated["generated"]["sources"] == mix["sources"]
    assert generated["generated"]["kinds"] == mix["kinds"]
    assert set(mix["sources"]) == {"magpie", "sharegpt-first", "sharegpt-later", "long", "code"}


def test_a_budget_smaller_than_the_job_keeps_its_mix(setup, tmp_path):
    work = tmp_path / "work"
    plan = tiny_plan(setup, tokens=3000, mix={"magpie": 3.0, "sharegpt-first": 1.0, "code": 2.0})
    run_job(work, plan)
    shards = _shards(work)
    whole, _ = load_samples(work)
    _, part = load_samples(work, tokens=sum(len(s.ids) for s in whole) // 2)
    behind = {
        source: part["sources"][source]["answer_tokens"] / share
        for source, share in plan.mix.items()
    }
    largest = {  # one batch's answer tokens, per share
        source: max(shard.answer_tokens for shard in found) / plan.mix[source]
        for source, found in shards.items()
    }
    for source, share_taken in behind.items():  # none ahead of another by more than a batch
        assert share_taken - min(behind.values()) <= largest[source], (source, behind)


def test_one_batch_slowed_by_a_pause_does_not_set_the_rate():
    progress = job.SourceProgress(budget=1000, rates=[300.0, 310.0, 5.0, 290.0])
    assert progress.rate == 300.0  # the median of the recent batches, not the mean
    assert job.SourceProgress(budget=1000).rate is None


def test_writing_ends_once_enough_user_turns_have_ended():
    import torch

    from specdec_core.training.datasets import EnoughEnded

    ids = torch.tensor([[1, 1, 5, 2, 0], [1, 1, 5, 6, 7], [1, 1, 2, 0, 0], [1, 1, 9, 9, 9]])
    assert EnoughEnded(2, {2}, 0.5)(ids, None).all()  # 2 of 4 rows ended: enough at half
    assert not EnoughEnded(2, {2}, 0.9)(ids, None).any()
    assert not EnoughEnded(3, {2}, 0.5)(ids[:, :3], None).any()  # the prompts' own ids


def test_requests_are_answered_in_calls_of_like_length_prompts():
    lengths = [900, 35, 40, 300, 50, 60, 620, 45, 180, 100]
    calls = length_calls(lengths, rows=3, slack=job.PADDING_SLACK)
    assert sorted(i for call in calls for i in call) == list(range(len(lengths)))  # each once
    assert all(len(call) <= 3 for call in calls)
    for call in calls:
        shortest, longest = min(lengths[i] for i in call), max(lengths[i] for i in call)
        assert longest <= 2 * shortest + job.PADDING_SLACK  # padding stays bounded
    flat = [lengths[i] for call in calls for i in call]
    assert flat == sorted(lengths)  # shortest first, in order
    assert length_calls([40] * 7, rows=3, slack=job.PADDING_SLACK) == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]  # full calls


def test_token_steps_add_up_to_the_answers_each_call_makes(setup):
    from specdec_core.training.datasets import StepDone, answer_batch

    target = load_model(str(setup / "target"), "cpu", "float32")
    prompts = _first_turns(setup, target, 8)
    eos = {2, _ending_token(target, prompts)}  # so that rows end at different steps
    for enough in (1.0, 0.5):  # to the cap, or cut once half the rows have ended
        steps: list[StepDone] = []
        answers = answer_batch(target.model, prompts, 24, 0, eos, enough=enough,
                               on_step=steps.append)  # fmt: skip
        lengths = [len(answer) for answer, _ in answers]
        assert sum(s.generated for s in steps) == sum(lengths)
        assert [s.generated for s in steps[: min(lengths)]] == [len(prompts)] * min(lengths)
        assert steps[-1].ended == sum(answer[-1] in eos for answer, _ in answers)
        assert [s.ended for s in steps] == sorted(s.ended for s in steps)
        assert len(set(lengths)) > 1  # rows ended at different steps


def _first_turns(setup, target, count: int) -> list[list[int]]:
    chats = json.loads((setup / "chats.json").read_text())[:count]
    return [target.tokenizer.encode(c["conversations"][0]["value"]) for c in chats]


def _ending_token(target, prompts: list[list[int]]) -> int:
    """A token the tiny target first says at the most different steps of its answers to
    `prompts` (made an end-of-turn token, its answers end at different steps)."""
    from specdec_core.training.datasets import answer_batch

    answers = [answer for answer, _ in answer_batch(target.model, prompts, 24, 0, {2})]
    said = {t for answer in answers for t in answer}

    def steps(token: int) -> int:
        return len({answer.index(token) if token in answer else None for answer in answers})

    return max(sorted(said - {2}), key=steps)


def test_status_shows_the_batch_in_progress_before_its_shard_exists(setup, tmp_path, capsys):
    """Mid-generation of a job's first batch, status.json already holds the batch's answer
    tokens (exactly what the running call has generated) and the rate and ETA they imply, and
    `specdec data status` says so; the stopped job's status holds no batch in progress."""
    from transformers import StoppingCriteria

    from specdec_core.training.batch_progress import BatchInProgress
    from specdec_core.training.job_shards import shard_path

    work = tmp_path / "work"
    plan = tiny_plan(setup, mix={"sharegpt-first": 1.0}, tokens=400, max_new_tokens=24)
    target = load_model(plan.target, "cpu", "float32")
    ending = _ending_token(target, _first_turns(setup, target, 400))
    target.model.generation_config.eos_token_id = [2, ending]
    eos = set(target.eos_ids)  # answers end at different steps
    seen: dict = {}

    class ReadStatusMidCall(StoppingCriteria):
        """On the first call's 6th token step (after waiting out the job's write interval):
        what status.json and `specdec data status` say, then the job is interrupted."""

        def __init__(self, width: int) -> None:
            self.width, self.steps = width, 0

        def __call__(self, input_ids, scores, **kwargs):
            self.steps += 1
            if self.steps == 5:
                time.sleep(job.LIVE_EVERY_S + 0.2)
            if self.steps == 6:  # the job's own count of this step came first
                answers = input_ids[:, self.width :].tolist()
                seen["rows"] = len(answers)
                seen["made"] = sum(
                    next((i + 1 for i, t in enumerate(a) if t in eos), len(a)) for a in answers
                )
                seen["status"] = json.loads((work / "status.json").read_text())
                seen["shard"] = shard_path(work, "sharegpt-first", 0).exists()
                main(["data", "status", "--work", str(work)])
                seen["printed"] = capsys.readouterr().out
                raise KeyboardInterrupt
            return input_ids.new_zeros(input_ids.shape[0], dtype=bool)

    generate = target.model.generate

    def watched(*args, **kwargs):
        width = kwargs["input_ids"].shape[1]
        kwargs["stopping_criteria"].append(ReadStatusMidCall(width))
        return generate(*args, **kwargs)

    target.model.generate = watched
    with pytest.raises(KeyboardInterrupt):
        run_job(work, plan, target)
    target.model.generate = generate

    status = seen["status"]
    batch = BatchInProgress.from_record(status["batch"])
    assert not seen["shard"] and status["answer_tokens"] == 0  # no batch has ended
    assert batch is not None and (batch.source, batch.number) == ("sharegpt-first", 0)
    assert batch.phase == "answering" and batch.answer_tokens == seen["made"] > 0
    assert seen["made"] < 6 * seen["rows"]  # some rows had ended: they generate no more
    assert status["tokens_per_s"] > 0 and status["eta_s"] is not None  # from those tokens
    assert status["tokens_per_s"] == pytest.approx(batch.answer_tokens / batch.seconds, rel=0.1)
    assert f"{seen['made']} answer tokens so far in batch 1 (sharegpt-first)" in seen["printed"]
    assert "in progress: " in seen["printed"] and "running (pid" in seen["printed"]
    stopped = json.loads((work / "status.json").read_text())
    assert stopped["state"] == "stopped" and stopped["batch"] is None


def test_status_of_a_job_from_before_the_batch_record_still_prints(tmp_path):
    from specdec_core.cli.data import format_status

    report = {
        "state": "running", "message": "", "target": "t", "updated": time.time(),
        "generation_seconds": 0.0, "budget": 1000, "answer_tokens": 0, "tokens_per_s": None,
        "eta_s": None, "kinds": {}, "sources": {"magpie": {
            "budget": 1000, "answer_tokens": 0, "samples": 0, "batches": 0, "seconds": 0.0,
            "tokens_per_s": None, "eta_s": None, "done": False, "rejected": {}}},
    }  # fmt: skip
    text = format_status(report, 4242, tmp_path)
    assert "running (pid 4242)" in text and "in progress" not in text
