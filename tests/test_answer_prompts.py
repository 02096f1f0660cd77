"""`training.datasets.answer_prompts`, the one way the target answers prompts for training: every
prompt once, in calls of like-length prompts, read back from its shards by a rerun, within a
token budget or a deadline."""

import time

from specdec_core.training.datasets import CallDone, Deadline, answer_prompts, generate_answers
from tests.tiny import prompt

PROMPTS = [prompt(length=3 + i % 5, offset=i) for i in range(10)]


def test_every_prompt_is_answered_once_under_its_own_index(tiny_target):
    model, tok = tiny_target.model, tiny_target.tokenizer
    found = list(answer_prompts(model, tok, PROMPTS, 4, 3, None, shuffle=0))
    assert sorted(index for index, _ in found) == list(range(len(PROMPTS)))
    for index, sample in found:
        assert sample.ids[: sample.start] == PROMPTS[index] and len(sample.ids) > sample.start


def test_a_rerun_reads_the_shards_instead_of_answering_again(tiny_target, tmp_path):
    model, tok = tiny_target.model, tiny_target.tokenizer
    first = generate_answers(model, tok, PROMPTS, 4, 3, tmp_path / "gen")
    shards = sorted(path.name for path in (tmp_path / "gen").iterdir())
    assert len(shards) > 1 and shards == [f"gen-{n:05d}.pt" for n in range(len(shards))]
    again = generate_answers(model, tok, PROMPTS, 4, 3, tmp_path / "gen", cached_only=True)
    assert [s.ids for s in again] == [s.ids for s in first]
    assert generate_answers(model, tok, PROMPTS, 4, 3, tmp_path / "none", cached_only=True) == []


def test_answering_stops_after_the_call_that_reaches_the_token_budget(tiny_target):
    model, tok = tiny_target.model, tiny_target.tokenizer
    done: list[CallDone] = []
    samples = generate_answers(model, tok, PROMPTS, 4, 3, None, budget=1, progress=done.append)
    assert len(done) == 1 and done[0].number == 1 and done[0].calls >= 4
    assert 0 < len(samples) <= 3
    assert done[0].answer_tokens == sum(len(s.ids) - s.start for s in samples)


def test_no_call_starts_unless_the_slowest_call_so_far_fits_before_the_deadline(tiny_target):
    model, tok = tiny_target.model, tiny_target.tokenizer
    passed = Deadline(time.monotonic() - 1)
    assert generate_answers(model, tok, PROMPTS, 4, 3, None, deadline=passed) == []
    too_slow = Deadline(time.monotonic() + 60, spent=[120.0])
    assert generate_answers(model, tok, PROMPTS, 4, 3, None, deadline=too_slow) == []
    ample = Deadline(time.monotonic() + 600)
    done: list[CallDone] = []
    answered = generate_answers(model, tok, PROMPTS, 4, 3, None, deadline=ample,
                                progress=done.append)  # fmt: skip
    assert len(answered) == len(PROMPTS)
    assert len(ample.spent) == done[-1].calls == len(done)  # every call's time, for the next run


def test_a_shard_made_for_other_prompts_is_answered_again(tiny_target, tmp_path):
    model, tok = tiny_target.model, tiny_target.tokenizer
    generate_answers(model, tok, PROMPTS[:3], 4, 3, tmp_path / "gen")
    other = [prompt(length=4, offset=20 + i) for i in range(3)]
    assert generate_answers(model, tok, other, 4, 3, tmp_path / "gen", cached_only=True) == []
    answered = generate_answers(model, tok, other, 4, 3, tmp_path / "gen")
    assert [s.ids[: s.start] for s in answered] == other
    again = generate_answers(model, tok, other, 4, 3, tmp_path / "gen", cached_only=True)
    assert [s.ids for s in again] == [s.ids for s in answered]  # the shard now answers these
