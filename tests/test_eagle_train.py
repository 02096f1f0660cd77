"""`specdec train` on a tiny random target: a few steps produce loadable models."""

import copy
import json

import pytest
import torch

from specdec_core.cli import main
from specdec_core.decoding.config import DecodeConfig
from specdec_core.heads.eagle.formats import load_head
from specdec_core.models.loading import load_model
from specdec_core.run.runner import load_draft, run
from specdec_core.training.card import read_card
from tests.tiny import VOCAB, training_dir


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    prompts = (json.dumps({"prompt": "w1 w2 w3"}), json.dumps({"turns": ["w4 w5", "w6"]}))
    return training_dir(tmp_path_factory.mktemp("tiny"), prompts=prompts)  # texts and prompts


def _tiny_run(tiny_dir, tokens: int, epochs: int) -> list[str]:
    """`specdec train` options for a few steps on the tiny target and its JSONL data."""
    return [
        *("--target", str(tiny_dir / "target"), "--data", str(tiny_dir / "data.jsonl")),
        *("--tokens", str(tokens), "--epochs", str(epochs), "--draft-vocab", "16"),
        *("--batch-tokens", "256", "--feature-dtype", "float32"),
        *("--val-kinds", "0"),  # the table by kind is tests/test_validate_head.py's
    ]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["eagle", "draft"])
def test_a_short_training_run_produces_a_loadable_model(tiny_dir, tmp_path, kind):
    out = tmp_path / kind
    argv = ["train", kind, *_tiny_run(tiny_dir, tokens=800, epochs=2), "--out", str(out)]
    assert main(argv) == 0
    card = json.loads((out / "specdec_card.json").read_text())
    assert card["epochs"] == 2 and card["tokens"] >= 800 and card["draft_vocab"] == 16
    assert read_card(out).to_record() == card  # the card reads back as it was written
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    config = DecodeConfig(max_new_tokens=20, k=3)
    ids = [1, 5, 9, 4]
    reference = run(target, "ar", ids, config)
    if kind == "eagle":
        extra = load_head(str(out), target)
        assert extra.draft_vocab == 16
        method = "eagle"
    else:
        extra = load_draft(str(out), target)  # the partial-draft path
        method = "classic"
    assert run(target, method, ids, config, extra).token_ids == reference.token_ids
    assert main(argv) == 0  # a rerun resumes from the finished checkpoint


def test_an_init_head_is_read_in_float32_not_rounded_through_a_bf16_target(tiny_target, tmp_path):
    from specdec_core.heads.eagle.formats import save_head
    from specdec_core.models.loading import LoadedModel
    from specdec_core.run.runner import load_head as load_any_head
    from tests.eagle_tiny import tiny_head

    head = tiny_head(tiny_target, "eagle1", 12)
    save_head(head, tmp_path / "head", dtype=torch.float16)
    saved = head.fc.weight.detach().half().float()
    assert not torch.equal(saved.bfloat16().float(), saved)  # fp16 values bf16 cannot hold
    model = copy.deepcopy(tiny_target.model).to(torch.bfloat16)
    bf16 = LoadedModel(model, tiny_target.tokenizer, "tiny", "memory", model.device, torch.bfloat16)
    assert load_any_head(str(tmp_path / "head"), bf16).fc.weight.dtype == torch.bfloat16
    exact = load_any_head(str(tmp_path / "head"), bf16, torch.float32)
    assert torch.equal(exact.fc.weight, saved)


def test_unrolled_training_pass_matches_drafting_step_by_step(tiny_target):
    from specdec_core.training.objective import Objective
    from tests.eagle_tiny import tiny_head

    head = tiny_head(tiny_target)
    model = tiny_target.model
    ids = torch.tensor([[1, 5, 9, 4, 7, 12, 3, 8]])  # [1, T]
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state  # [1, T, h]
        objective = Objective("eagle", head, model.lm_head, torch.arange(VOCAB), 0.0, unroll=3)
        objective.eval()
        mask = torch.ones_like(ids, dtype=torch.bool)
        preds, _ = objective(ids, hidden, mask)
        T = ids.shape[1]
        for p in range(T - 3):
            cache = head.new_cache()
            out = head.step(
                hidden[:, : p + 1], ids[:, 1 : p + 2], torch.arange(p + 1)[None], None, cache
            )
            feature = out.hidden[:, -1:]
            for j in (2, 3):
                out = head.step(
                    feature, ids[:, p + j : p + j + 1], torch.tensor([[p + j - 1]]), None, cache
                )
                feature = out.hidden
                offset = (T - 1) + (T - 2) * (j == 3)  # rows of passes before pass j
                torch.testing.assert_close(preds[offset + p], feature[0, 0], atol=1e-4, rtol=1e-4)


def test_self_distillation_never_reuses_sharegpt_or_held_out_conversations(
    tiny_target, tmp_path, monkeypatch
):
    from specdec_core.training import data_sources, datasets

    # conversation i asks "w{i // 29} w{i % 29}": its prompt ids name it
    conversations = [
        [
            {"from": "human", "value": f"w{i // 29} w{i % 29}"},
            {"from": "gpt", "value": "w5 w6 w7"},
        ]
        for i in range(120)
    ]
    monkeypatch.setattr(datasets, "iter_sharegpt", lambda: iter(conversations))
    monkeypatch.setattr(data_sources, "SHAREGPT", slice(30, 50))

    def asked(sample) -> int:
        a, b = (t - 3 for t in sample.ids[:2])
        return 29 * a + b

    distilled = data_sources.collect("self", tiny_target, 10**6, tmp_path, 64, seed=0)
    human = data_sources.collect("sharegpt", tiny_target, 10**6, tmp_path, 64, seed=0).samples
    own, held_answers = distilled.samples, distilled.held
    held = {29 * (p[0] - 3) + (p[1] - 3) for p in distilled.held_prompts}
    assert len(own) == 36 and len(human) == 20 and len(held) == 64
    assert {asked(s) for s in own}.isdisjoint({asked(s) for s in human})
    assert held.isdisjoint({asked(s) for s in own} | {asked(s) for s in human})
    # validation data is the target's own answers to held-out prompts, features included
    assert len(held_answers) == 32
    assert {asked(s) for s in held_answers} <= held


def test_self_long_answers_only_the_long_prompts_and_caches_them_apart(
    tiny_target, tmp_path, monkeypatch
):
    from specdec_core.training import data_sources, datasets

    # even conversations ask 2 words, odd ones 6 (ids: BOS + words, no chat template)
    conversations = [
        [
            {"from": "human", "value": " ".join(["w1"] * (2 if i % 2 == 0 else 6))},
            {"from": "gpt", "value": "w5 w6 w7"},
        ]
        for i in range(160)
    ]
    monkeypatch.setattr(datasets, "iter_sharegpt", lambda: iter(conversations))
    monkeypatch.setattr(data_sources, "SHAREGPT", slice(30, 50))
    monkeypatch.setattr(data_sources, "SELF_PROMPTS", {"self": (1, 4), "self-long": (5, 8)})
    short = data_sources.collect("self", tiny_target, 10**6, tmp_path, 64, seed=0).samples
    long = data_sources.collect("self-long", tiny_target, 10**6, tmp_path, 64, seed=0).samples
    assert short and long
    assert all(s.start <= 4 for s in short) and all(5 <= s.start <= 8 for s in long)
    assert (tmp_path / "self").is_dir() and (tmp_path / "self-long").is_dir()


@pytest.mark.slow
def test_training_continues_from_an_init_head(tiny_dir, tmp_path):
    common = _tiny_run(tiny_dir, tokens=400, epochs=1)
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["train", "eagle", *common, "--out", str(first)]) == 0
    continued = ["--init", str(first), "--ce-weight", "0.5"]
    assert main(["train", "eagle", *common, "--out", str(second), *continued]) == 0
    card = json.loads((second / "specdec_card.json").read_text())
    assert card["init"] == str(first) and card["train_config"]["arch"] == "eagle1"
    assert card["train_config"]["ce_weight"] == 0.5 and card["train_config"]["noise"] == 0.2
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    before, after = load_head(str(first), target), load_head(str(second), target)
    assert torch.equal(before.draft_ids(), after.draft_ids())  # the init's vocabulary
    assert not torch.equal(before.fc.weight, after.fc.weight)  # and trained on from there
    assert (
        main(["train", "draft", *common, "--out", str(tmp_path / "d"), "--init", str(first)]) == 2
    )


@pytest.mark.slow
def test_an_eagle1_head_continues_on_a_draft_vocabulary_picked_anew(tiny_dir, tmp_path):
    common = _tiny_run(tiny_dir, tokens=400, epochs=1)
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["train", "eagle", *common, "--out", str(first)]) == 0
    frozen = ["--init", str(first), "--draft-vocab", "24", "--lr", "0"]  # weights as they were
    assert main(["train", "eagle", *common, "--out", str(second), *frozen]) == 0
    card = json.loads((second / "specdec_card.json").read_text())
    assert card["draft_vocab"] == 24 and card["train_config"]["draft_vocab"] == 24
    target = load_model(str(tiny_dir / "target"), device="cpu", dtype="float32")
    before, after = load_head(str(first), target), load_head(str(second), target)
    assert after.draft_vocab == 24 and set(before.draft_ids().tolist()) < set(
        after.draft_ids().tolist()
    )  # the 24 most frequent tokens hold the 16 most frequent
    for name, weight in before.state_dict().items():
        if name not in ("d2t", "t2d"):
            assert torch.equal(weight, after.state_dict()[name]), name


@pytest.mark.slow
def test_answers_saved_as_npz_train_a_head(tiny_dir, tmp_path):
    import numpy as np

    answers = [[1, 5, 9, 4, 4, 7, 8], [1, 6, 3, 10, 11, 12], [1, 7, 7, 7, 9, 3, 3, 5]]
    flat = np.array([t for a in answers for t in a], dtype=np.uint16)
    offsets = np.cumsum([0] + [len(a) for a in answers])
    path = tmp_path / "answers.npz"
    np.savez(path, ids=flat, offsets=offsets, starts=np.array([3, 2, 4]))
    common = _tiny_run(tiny_dir, tokens=10**6, epochs=1)
    common[common.index("--data") + 1] = str(path)
    assert main(["train", "eagle", *common, "--out", str(tmp_path / "head")]) == 0
    card = json.loads((tmp_path / "head" / "specdec_card.json").read_text())
    assert card["tokens"] == sum(len(a) for a in answers) and card["sequences"] == 3
    np.savez(tmp_path / "bad.npz", tokens=flat)
    common[common.index("--data") + 1] = str(tmp_path / "bad.npz")
    assert main(["train", "eagle", *common, "--out", str(tmp_path / "bad")]) == 2


@pytest.mark.slow
def test_a_checkpoint_from_other_data_is_refused_not_resumed_at_a_wrong_step(
    tiny_dir, tmp_path, capsys
):
    out = str(tmp_path / "head")
    assert main(["train", "eagle", *_tiny_run(tiny_dir, tokens=800, epochs=1), "--out", out]) == 0
    assert main(["train", "eagle", *_tiny_run(tiny_dir, tokens=400, epochs=1), "--out", out]) == 2
    assert "cannot resume" in capsys.readouterr().err


def _two_seconds_of_training(tiny_target, monkeypatch):
    """A tiny EAGLE head's training asked for a million epochs within a 2-second budget (each
    step's target forward included), and the list the learning rate of each optimiser step
    goes to."""
    from specdec_core.training.datasets import Sample
    from specdec_core.training.objective import Objective
    from specdec_core.training.online_features import Sequences
    from specdec_core.training.starting_model import build_model
    from specdec_core.training.train_config import TrainConfig

    model = tiny_target.model
    generator = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(3, VOCAB, (20,), generator=generator).tolist(), 0)] * 8
    data = Sequences.of(samples)
    head = build_model("eagle", model, torch.arange(VOCAB))
    objective = Objective("eagle", head, model.lm_head, torch.arange(VOCAB), 0.2, 2)
    config = TrainConfig(epochs=10**6, batch_tokens=40, warmup=1, seconds=2.0, save_every=10**9)
    rates: list[float] = []
    step = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    return objective, data, config, rates


def test_a_time_budget_stops_training_with_the_schedule_decayed(tiny_target, tmp_path, monkeypatch):
    from specdec_core.training.loop import train

    objective, data, config, rates = _two_seconds_of_training(tiny_target, monkeypatch)
    history = train(objective, tiny_target, data, (), config, tmp_path)
    *epochs, record = history  # a million epochs asked for; two seconds given
    assert all(e.stopped is None for e in epochs) and len(epochs) < 10**6
    assert record.stopped == "time" and record.step == len(rates) > 10
    # decayed over the time, not the million epochs' steps (which would keep it near lr): the
    # schedule ends where the last batch can start, each batch's rate read after it and the
    # epoch's save that follows it, so the last one runs near 0 on a busy machine too
    assert rates[-1] < 0.1 * config.lr and rates[len(rates) // 4] > 0.3 * config.lr


def test_slow_epoch_saves_still_end_the_schedule_near_zero(tiny_target, tmp_path, monkeypatch):
    """Each epoch's save takes a quarter of the budget (a busy disk): the budget never ends
    during a save with the rate still high."""
    import time

    from specdec_core.training.common_training import Checkpoint
    from specdec_core.training.loop import train

    objective, data, config, rates = _two_seconds_of_training(tiny_target, monkeypatch)
    save = Checkpoint.save

    def slow_save(self, *args):
        time.sleep(0.5)
        save(self, *args)

    monkeypatch.setattr(Checkpoint, "save", slow_save)
    *epochs, last = train(objective, tiny_target, data, (), config, tmp_path)
    assert len(epochs) >= 2 and last.stopped == "time"  # an epoch's end timed before the last
    assert rates[-1] < 0.05 * config.lr  # with the saves' time left out of it, the decay ends
    assert rates[0] > 0.99 * config.lr  # the first batch at the peak


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["eagle", "draft"])
def test_an_interrupted_training_run_resumes_from_its_last_checkpoint(
    tiny_dir, tmp_path, capsys, monkeypatch, kind
):
    """Cut off mid-epoch, the same command resumes at the step saved and ends with exactly the
    weights of a run that was never cut off (same batch order, same feature noise)."""
    from safetensors.torch import load_file

    common = ["train", kind, *_tiny_run(tiny_dir, tokens=800, epochs=2), "--save-every", "1"]
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main([*common, "--out", str(whole)]) == 0
    steps = json.loads((whole / "specdec_card.json").read_text())["history"][-1]["step"]
    step, calls = torch.optim.AdamW.step, []

    def interrupt_mid_run(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == steps // 2 + 2:  # past the first epoch's end: mid-epoch
            raise KeyboardInterrupt
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", interrupt_mid_run)
    assert main([*common, "--out", str(cut)]) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    saved = torch.load(cut / "checkpoint.pt", weights_only=True)["state"]["step"]
    assert 0 < saved < steps
    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    assert main([*common, "--out", str(cut)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "resuming from" in line]
    assert len(said) == 1 and f"step {saved} of {steps}" in said[0]  # one line says so
    name = "model.safetensors"
    a, b = load_file(whole / name), load_file(cut / name)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_save_every_below_one_is_refused(tiny_dir, tmp_path, capsys):
    argv = ["train", "eagle", *_tiny_run(tiny_dir, 800, 1), "--save-every", "0"]
    assert main([*argv, "--out", str(tmp_path / "x")]) == 2
    assert "--save-every 0" in capsys.readouterr().err
