"""The corpus of the target's own answers: compact shards with checksums, a card that says what
they hold, sampled batches where the plan asks for them, and the bundled corpus free of every
evaluation prompt."""

import gzip
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from specdec_core.errors import SpecdecError
from specdec_core.resources import resource_path
from specdec_core.training.corpus_card import check, contaminated, read_corpus_card
from specdec_core.training.generation_job import load_samples, run_job
from specdec_core.training.job_plan import JobPlan
from specdec_core.training.job_shards import Answered, Answering, Shard, Written, read_shards
from specdec_core.training.kinds import held_out_prompts
from specdec_core.training.magpie import bundled_evaluation_prompts, evaluation_prompts
from tests.tiny import chat_target, tiny_tokenizer

REPOSITORY = Path(__file__).resolve().parents[1]
CORPUS = REPOSITORY / "resources" / "corpus" / "embedded"


def _shard(ids_top: int) -> Shard:
    samples = [Answered([1, 2, ids_top, 7], 2, "chat"), Answered([5, ids_top - 1, 3], 1, "maths")]
    return Shard("code", 3, 8, False, [Written("coding", 1, "Write a loop.")], {"short": 2},
                 4.5, samples, 0.25, Answering(1.0, "bfloat16", "a CPU"))  # fmt: skip


@pytest.mark.parametrize(("top", "width"), [(255, 1), (49_151, 2), (70_000, 4)])
def test_a_shard_reads_back_whole_with_ids_in_the_smallest_type_that_holds_them(
    tmp_path, top, width
):
    shard = _shard(top)
    path = shard.write(tmp_path)
    assert path.name == "000003.shard"
    assert Shard.read(path) == shard
    body = shard.to_bytes()
    ids = list(range(max(0, top - 4000), top + 1))
    sized = replace(shard, samples=[Answered(ids, 10, "chat")])
    assert len(sized.to_bytes()) < len(ids) * width + 1000  # no wider than the type, compressed
    assert Shard.read(sized.write(tmp_path)) == sized
    assert body.startswith(b"specdec-shard 1\n")


def test_a_damaged_shard_is_refused_by_name_with_what_to_do(tmp_path):
    path = _shard(300).write(tmp_path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(SpecdecError, match=r"000003\.shard: damaged shard.*delete it and resume"):
        Shard.read(path)


def test_a_shard_of_the_first_format_still_reads(tmp_path):
    shard = _shard(300)
    record = asdict(shard)
    record.pop("answering")
    old = tmp_path / "shards" / "code" / "000000.json.gz"
    old.parent.mkdir(parents=True)
    old.write_bytes(gzip.compress(json.dumps({**record, "batch": 0}).encode()))
    (read,) = read_shards(tmp_path, "code")
    assert read == replace(shard, batch=0, answering=Answering())


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    chat_target(root, conversations=300)
    return root


def _plan(setup, **changes) -> JobPlan:
    settings = {"target": str(setup / "target"), "dtype": "float32", "tokens": 600, "batch": 6,
                "long_batch": 3, "rows": 4, "max_new_tokens": 12,
                "mix": {"sharegpt-first": 1.0, "code": 1.0},
                "conversations": str(setup / "chats.json")}  # fmt: skip
    return JobPlan(**{**settings, **changes})


def test_the_card_lists_every_shard_with_its_checksum_and_the_corpus_totals(setup, tmp_path):
    work = tmp_path / "job"
    final = run_job(work, _plan(setup, sample_every=2))
    card = check(work)
    assert card["answer_tokens"] == final["answer_tokens"] > 0
    assert {s: t["answer_tokens"] for s, t in card["sources"].items()} == {
        s: v["answer_tokens"] for s, v in final["sources"].items()
    }
    assert sum(card["kinds"].values()) == card["answer_tokens"]
    assert sum(card["answering"].values()) == card["answer_tokens"]
    assert set(card["answering"]) == {"greedy", "T=1"}  # every second batch sampled
    for source in card["sources"]:
        for shard in read_shards(work, source):
            assert shard.answering.temperature == (1.0 if shard.batch % 2 else 0.0)
            assert shard.answering.dtype == "float32" and shard.answering.machine
    assert len(card["weights_sha256"]) == 64
    assert "mt-bench.jsonl" in card["evaluation_sets"]

    # a shard replaced by other bytes, or one the card does not list, is found
    first = sorted((work / "shards").rglob("*.shard"))[0]
    first.write_bytes(replace(Shard.read(first), seconds=99.0).to_bytes())
    with pytest.raises(SpecdecError, match="SHA-256 differs"):
        check(work)


def test_a_larger_budget_appends_shards_and_the_card_grows_with_them(setup, tmp_path):
    work = tmp_path / "job"
    small = run_job(work, _plan(setup, tokens=300))
    before = read_corpus_card(work)
    larger = run_job(work, _plan(setup, tokens=700))
    after = check(work)
    assert larger["answer_tokens"] > small["answer_tokens"]
    assert after["shards"][: len(before["shards"])] != [] and all(
        entry in after["shards"] for entry in before["shards"]
    )
    samples, _ = load_samples(work)
    assert sum(len(s.ids) - s.start for s in samples) == after["answer_tokens"]


def test_no_bundled_evaluation_prompt_is_asked_by_a_job(setup, tmp_path):
    """The bundled evaluation sets are excluded from every job, whatever its plan says: a
    conversation that asks an MT-bench question is dropped as an evaluation prompt."""
    question = evaluation_prompts([str(resource_path("evaluation", "mt-bench.jsonl"))])[0]
    chats = json.loads((setup / "chats.json").read_text())
    planted = [{"conversations": [{"from": "human", "value": question},
                                  {"from": "gpt", "value": "An answer."}]}] * 40  # fmt: skip
    (tmp_path / "chats.json").write_text(json.dumps(planted + chats))
    plan = _plan(setup, conversations=str(tmp_path / "chats.json"), mix={"sharegpt-first": 1.0})
    final = run_job(tmp_path / "job", plan)
    assert final["sources"]["sharegpt-first"]["rejected"].get("evaluation", 0) >= 1
    samples, _ = load_samples(tmp_path / "job")
    asked = tiny_tokenizer(chat=True).batch_decode([s.ids[: s.start] for s in samples])
    assert asked and contaminated(asked, [question]) == []  # the job answered the rest


def test_contamination_finds_an_evaluation_prompt_inside_a_longer_prompt():
    evaluation = ["Who painted the ceiling of the Sistine Chapel, and how long did it take?"]
    inside = "Please help. who painted the ceiling of the sistine chapel and how long did it take"
    found = contaminated(["Tell me about Rome.", inside, "Ceiling paint colours?"], evaluation)
    assert found == [(1, evaluation[0])]


@pytest.mark.slow
def test_the_bundled_corpus_matches_its_card_and_holds_no_evaluation_prompt():
    from specdec_core.models.loading import load_model

    card = check(CORPUS)
    assert card["answer_tokens"] > 0
    tokenizer = load_model("embedded", "cpu", "float32").tokenizer
    bench = evaluation_prompts([str(REPOSITORY / "docs" / "bench" / "*.jsonl")])
    evaluation = [*bundled_evaluation_prompts(), *held_out_prompts(), *bench]
    samples, _ = load_samples(CORPUS)
    prompts = tokenizer.batch_decode([s.ids[: s.start] for s in samples], skip_special_tokens=True)
    assert contaminated(prompts, evaluation) == []
