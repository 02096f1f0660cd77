"""`--data magpie`: prompts the target writes itself are deduplicated, filtered, never an
evaluation or held-out prompt, answered, and the card records the mix and the table by kind."""

import json
import random

import pytest

from specdec_core.cli import main
from specdec_core.errors import SpecdecError
from specdec_core.models.loading import load_model
from specdec_core.training import magpie
from specdec_core.training.generation_job import magpie_samples
from specdec_core.training.kinds import HELD_OUT, KINDS, held_out_prompts
from specdec_core.training.magpie import PromptFilter, filter_prompts, normalise
from tests.tiny import VOCAB, chat_target, tiny_tokenizer

EVALUATION = ["w1 w2 w3 w4 w5 w6", "W7, w8 w9 w10 w11 w12 w13 w14 w15 w16"]


def test_duplicates_and_near_duplicates_are_dropped_and_counted():
    gate = PromptFilter()
    kept = [
        t
        for t in [
            "Write a poem about the sea at night.",
            "write a POEM about the sea at night",  # the same once normalised
            "Write a poem about the sea at night, please.",  # nearly the same
            "Explain how a bicycle gear works.",
            "",
            "Hi there",
            None,  # cut off before its end-of-turn token
        ]
        if gate.keep(t)
    ]
    assert kept == ["Write a poem about the sea at night.", "Explain how a bicycle gear works."]
    assert gate.rejected == {"duplicate": 2, "empty": 1, "short": 1, "unfinished": 1}
    assert normalise("  Hello,   WORLD! ") == "hello world"


def test_evaluation_prompts_and_their_near_matches_are_never_kept():
    evaluation = ["Who played Anna in Once Upon a Time?", "Calculate the atomic mass for lithium."]
    texts = [
        "who played anna in once upon a time",  # the same
        "Tell me: who played Anna in Once Upon a Time?",  # contains it
        "Calculate the atomic mass for lithium, step by step.",  # nearly it
        "Calculate the boiling point of water at altitude.",  # another question
    ]
    assert filter_prompts(texts, evaluation) == [texts[3]]
    gate = PromptFilter(evaluation)
    assert [gate.reason(t) for t in texts[:3]] == ["evaluation"] * 3


def test_held_out_prompts_cover_every_kind():
    assert set(HELD_OUT) == set(KINDS) and all(len(HELD_OUT[k]) >= 3 for k in KINDS)
    assert filter_prompts(held_out_prompts()) == held_out_prompts()  # no two alike


def test_the_opening_ends_at_the_user_role_header():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}w1 {{ m['content'] }} w2 {% endfor %}"
    opening = magpie.user_turn_opening(tokenizer, "w5 w6")
    assert tokenizer.decode(opening) == "w1 w5 w6 w2 w1"
    tokenizer.chat_template = None
    with pytest.raises(SpecdecError, match="chat template"):
        magpie.user_turn_opening(tokenizer, "w5")


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(VOCAB - 3)}" for _ in range(n))


def stub_writer(asked, seed):
    """What a target might write: new prompts, repeats, evaluation prompts (exact and nearly),
    held-out ones, unfinished, empty and too short ones."""
    rng = random.Random(seed)
    junk = [*EVALUATION, EVALUATION[0] + " w20", held_out_prompts()[0], None, "", "w3"]
    written = []
    for i, opening in enumerate(asked):
        if i % 4 == 1:
            text = junk[rng.randrange(len(junk))]
        elif i % 4 == 2 and written:
            text = written[rng.randrange(len(written))][1] or "w4 w4 w4 w4 w4"  # a repeat
        else:
            text = _words(rng, 8)
        written.append((opening, text))
    return written


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("magpie")
    chat_target(root)
    lines = [json.dumps({"turns": [EVALUATION[0], "w9 w9"]}), json.dumps({"prompt": EVALUATION[1]})]
    (root / "eval.jsonl").write_text("\n".join(lines))
    return root


def test_generated_prompts_are_unique_and_never_evaluation_prompts(chat_dir, tmp_path):
    target = load_model(str(chat_dir / "target"), device="cpu", dtype="float32")
    exclude = magpie.evaluation_prompts([str(chat_dir / "eval.jsonl")])
    assert exclude == [EVALUATION[0], "w9 w9", EVALUATION[1]]
    samples, mix = magpie_samples(
        target, 3000, tmp_path, seed=0, exclude=exclude, write=stub_writer
    )
    # the template renders a user turn as <s> TEXT </s> <s>: the prompt asked is ids[1:start-2]
    asked = [target.tokenizer.decode(s.ids[1 : s.start - 2]) for s in samples]
    assert sum(len(s.ids) for s in samples) >= 3000
    assert filter_prompts(asked, exclude) == asked  # no two alike, no evaluation prompt
    assert not {normalise(t) for t in EVALUATION} & {normalise(t) for t in asked}
    assert sum(mix["kinds"].values()) == len(samples) and set(mix["kinds"]) == set(KINDS)
    assert {"evaluation", "duplicate", "unfinished", "empty", "short"} <= set(mix["rejected"])
    again, _ = magpie_samples(target, 3000, tmp_path, seed=0, exclude=exclude, write=None)
    assert [s.ids for s in again] == [s.ids for s in samples]  # a rerun reads the cache


@pytest.mark.slow
def test_training_on_magpie_records_the_mix_and_a_table_by_kind(chat_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(magpie, "sampled_turns", lambda target: stub_writer)
    out = tmp_path / "head"
    argv = [
        *("train", "eagle", "--target", str(chat_dir / "target"), "--data", "magpie"),
        *("--exclude-prompts", str(chat_dir / "eval.jsonl"), "--tokens", "1500"),
        *("--epochs", "1", "--draft-vocab", "16", "--batch-tokens", "512"),
        *("--feature-dtype", "float32", "--val-prompts", "1", "--val-kinds", "1"),
        *("--out", str(out)),
    ]
    assert main(argv) == 0
    card = json.loads((out / "specdec_card.json").read_text())
    mix = card["data_mix"]
    assert list(mix["by_source"]) == ["magpie"] and card["data"] == ["magpie"]
    assert mix["by_source"]["magpie"]["tokens"] == card["tokens"]
    assert sum(mix["by_kind"].values()) == mix["by_source"]["magpie"]["sequences"]
    table = card["validation_by_kind"]
    assert set(table) == set(KINDS)
    assert all(0 <= row["teacher_forced_top1"] <= 1 and row["tau"] >= 1 for row in table.values())


def test_an_exclude_pattern_that_matches_nothing_is_refused(tmp_path):
    assert main(["train", "eagle", "--exclude-prompts", str(tmp_path / "none*.jsonl"),
                 "--out", str(tmp_path / "out")]) == 2  # fmt: skip
