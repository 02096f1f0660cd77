"""`specdec validate --why`: the evidence for a head's τ (top-1 by draft position, the target's
own answers against a dataset's, draft-vocabulary coverage, top-1 by kind against the training
data's share) and at most two things to do, each tied to the number it comes from."""

import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.models.loading import load_model
from specdec_core.training.datasets import Sample
from specdec_core.training.diagnosis import Diagnosis, Positions, advice, trained_share
from specdec_core.training.kinds import KINDS
from specdec_core.training.objective import Objective
from specdec_core.training.online_features import feature_batches
from specdec_core.training.validation import hits_by_position
from tests.eagle_tiny import tiny_head
from tests.tiny import chat_target, tiny_tokenizer, training_dir


def _diagnosis(**changes) -> Diagnosis:
    even = Positions((80, 70, 62, 55), (100, 100, 100, 100))
    fields = dict(own=even, dataset=even, coverage=0.995, draft_vocab=0,
                  by_kind=dict.fromkeys(KINDS, Positions((70,), (100,))),
                  trained_share=dict.fromkeys(KINDS, 1 / len(KINDS)), share_from="its card",
                  trained_tokens=5_000_000, trained_epochs=4.0)  # fmt: skip
    return Diagnosis(**{**fields, **changes})


def test_a_chain_implies_tau_from_its_top1_by_position():
    chain = Positions((8, 6), (10, 10))
    assert chain.top1 == (0.8, 0.6)
    assert chain.chain_tau == pytest.approx(1 + 0.8 + 0.8 * 0.6)
    both = Positions.pooled([chain, Positions((2, 0, 5), (10, 10, 10))])
    assert both.hits == (10, 6) and both.counted == (20, 20)


def test_nothing_to_do_when_no_number_stands_out():
    assert advice(_diagnosis()) == []


def test_each_advice_comes_from_its_number():
    said = advice(_diagnosis(dataset=Positions((90, 75, 66, 58), (100,) * 4)))
    assert len(said) == 1 and "regenerate the training answers" in said[0].do
    assert "0.90 on a dataset's answers but 0.80 on the target's own" in said[0].because

    said = advice(_diagnosis(coverage=0.9, draft_vocab=4096))
    assert (
        "--draft-vocab" in said[0].do and "10.0% of the target's answer tokens" in said[0].because
    )

    said = advice(_diagnosis(own=Positions((80, 40, 30, 20), (100,) * 4)))
    assert "--unroll 4" in said[0].do and "from 0.80 at position 1 to 0.40 at position 2" in (
        said[0].because
    )

    weak = {**dict.fromkeys(KINDS, Positions((70,), (100,))), "maths": Positions((40,), (100,))}
    share = {**dict.fromkeys(KINDS, 0.15), "maths": 0.02}
    said = advice(_diagnosis(by_kind=weak, trained_share=share))
    assert said[0].do == "add training data of kind maths" and "2.0% of the answer" in (
        said[0].because
    )

    said = advice(_diagnosis(trained_tokens=250_000, trained_epochs=1.0))
    assert "more epochs and more data" in said[0].do and "250,000 tokens for 1 epochs" in (
        said[0].because
    )


def test_at_most_two_things_to_do_the_largest_first():
    said = advice(
        _diagnosis(
            dataset=Positions((95, 75, 66, 58), (100,) * 4),
            coverage=0.9,
            draft_vocab=4096,
            trained_tokens=100_000,
            trained_epochs=1.0,
        )
    )
    assert [a.do.split()[0] for a in said] == ["regenerate", "train"]
    assert "--draft-vocab" in said[1].do


def test_the_training_share_by_kind_counts_later_turns_as_their_kind():
    share = trained_share({"generated": {"kinds": {"coding": 30, "coding-turn2": 10, "chat": 60}}})
    assert share["coding"] == pytest.approx(0.4) and share["maths"] == 0.0
    assert trained_share({"sources": {}}) is None and trained_share(None) is None


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    root = training_dir(tmp_path_factory.mktemp("why"), layers=4)
    tiny_tokenizer(chat=True).save_pretrained(root / "target")
    chat_target(root / "chats", conversations=120)  # chats/chats.json: ShareGPT-format
    return root


def test_position_one_of_a_longer_chain_is_the_one_pass_top1(chat_dir):
    """The hits are split by draft position in the order the objective makes them: the first
    position of a 3-pass measurement is what a 1-pass measurement counts."""
    target = load_model(str(chat_dir / "target"), "cpu", "float32")
    head = tiny_head(target)
    lm_head = target.model.get_output_embeddings()
    lengths = (9, 14, 20)
    samples = [Sample(list(range(3, 3 + n)), 2) for n in lengths]
    data = feature_batches(target, samples, (), 24)  # a batch per sample
    ids = torch.arange(target.vocab_size)
    one = Objective("eagle", head, lm_head, ids, 0.0, 1).eval()
    three = Objective("eagle", head, lm_head, ids, 0.0, 3).eval()
    hits1, counted1 = hits_by_position(one, data, lm_head, 1)
    hits3, counted3 = hits_by_position(three, data, lm_head, 3)
    assert (hits3[0], counted3[0]) == (hits1[0], counted1[0])
    # position j counts the answer tokens from max(start, j) on: a chain needs j tokens first
    assert counted3 == [sum(n - max(2, j) for n in lengths) for j in (1, 2, 3)]


@pytest.mark.slow
def test_validate_why_gives_the_evidence_and_what_to_do(chat_dir, tmp_path, capsys):
    head = tmp_path / "head"
    argv = [
        *("train", "eagle", "--target", str(chat_dir / "target"), "--arch", "eagle1"),
        *("--data", str(chat_dir / "data.jsonl"), "--tokens", "600", "--epochs", "1"),
        *("--draft-vocab", "16", "--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--val-prompts", "1", "--val-kinds", "0", "--out", str(head)),
    ]
    assert main(argv) == 0
    capsys.readouterr()
    why = ["validate", "--why", "--head", str(head), "--target", str(chat_dir / "target")]
    why += ["--per-kind", "1", "--dtype", "float32", "--device", "cpu", "--positions", "3"]
    why += ["--conversations", str(chat_dir / "chats" / "chats.json")]
    why += ["--work", str(tmp_path / "work")]
    assert main([*why, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found["own"]["top1"]) == len(found["dataset"]["top1"]) == 3
    assert found["own"]["counted"][0] >= found["own"]["counted"][2] > 0
    assert set(found["by_kind"]) == set(KINDS)
    assert 0 < found["coverage"] < 1 and found["draft_vocab"] == 16
    assert found["trained_tokens"] > 0 and found["trained_epochs"] == 1
    assert 1 <= len(found["advice"]) <= 2

    assert main(why) == 0  # the same, as a user reads it (answers and features from the cache)
    text = capsys.readouterr().out
    assert "where the chain breaks" in text and "a chain of 3 implies tau" in text
    assert f"16-token draft vocabulary holds {found['coverage']:.1%}" in text
    assert "what to do:" in text and found["advice"][0]["because"] in text
    assert "share of the answers in the corpus" not in text  # its card has no kinds: "?"

    corpus = tmp_path / "corpus"  # a corpus card's kinds stand in for the training data's
    corpus.mkdir()
    (corpus / "card.json").write_text(json.dumps({"kinds": {"maths": 10, "chat": 90}}))
    assert main([*why, "--corpus", str(corpus)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line}
    assert rows["maths"][-1] == "10.0%" and rows["qa"][-1] == "0.0%"


def test_validate_why_refuses_bad_input_in_one_line(chat_dir, capsys):
    target = ["--target", str(chat_dir / "target"), "--dtype", "float32"]
    assert main(["validate", "--why", *target, "--positions", "0"]) == 2
    assert "--positions 0: give 1 or more" in capsys.readouterr().err
    assert main(["validate", "--why", *target, "--corpus", "/no/such/corpus"]) == 2
    error = capsys.readouterr().err.strip()
    assert "no card.json" in error and "\n" not in error


def test_the_train_tabs_why_words_say_the_evidence_and_what_to_do(tmp_path):
    from app.training_plan import read_why, why_words

    record = {
        "head": "WORK/head",
        "own": {"top1": [0.6, 0.5], "counted": [10, 10], "chain_tau": 1.9},
        "dataset": {"top1": [0.4, 0.3], "counted": [10, 10], "chain_tau": 1.52},
        "coverage": 0.94,
        "advice": [{"do": "train with a larger draft vocabulary (--draft-vocab)",
                    "because": "6.0% of the target's answer tokens are outside"}],
    }  # fmt: skip
    log = tmp_path / "why.log"
    log.write_text("[train] loading\n" + json.dumps(record) + "\nLoading weights: 100%\n")
    assert read_why(log) == record
    assert why_words(record).splitlines() == [
        "top-1 by draft position: 0.60 / 0.50 (a chain of 2 implies τ 1.90)",
        "on the target's own answers 0.60, on a dataset's 0.40 (position 1)",
        "the draft vocabulary holds 94.0% of the answer tokens",
        "to do: train with a larger draft vocabulary (--draft-vocab) (6.0% of the target's "
        "answer tokens are outside)",
    ]
    assert read_why(tmp_path / "none.log") is None
