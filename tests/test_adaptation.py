"""Online adaptation: the buffer is bounded, the head adapts only between runs, output stays
the target's, and an adapted head saves and reloads to the same drafts."""

import threading

import pytest
import torch

from app.engine import SpecdecEngine
from app.engine_api import RunRequest
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Step
from specdec_core.decoding.target import Target
from specdec_core.drafters.eagle import EagleDrafter
from specdec_core.errors import SpecdecError
from specdec_core.heads.eagle.formats import load_head
from specdec_core.run import runner
from specdec_core.run.runner import run
from specdec_core.training.adaptation import AdaptationBuffer, Adapter, AdaptSettings
from specdec_core.training.online_features import FeatureBatch
from tests.eagle_tiny import tiny_head
from tests.tiny import prompt

CONFIG = DecodeConfig(max_new_tokens=24, k=3)
PROMPTS = [prompt(6, offset) for offset in (0, 3, 5)]


def _item(n: int, start: int = 1) -> FeatureBatch:
    """A run of `n` tokens with its features (a batch of one row), the loss from `start`."""
    loss = torch.arange(n)[None] >= start
    return FeatureBatch(torch.arange(n)[None], torch.ones(1, n), loss, (), torch.zeros(1, n, 4))


def test_the_buffer_keeps_at_most_its_cap_evicting_the_oldest_runs():
    buffer = AdaptationBuffer(cap_tokens=100)
    for n in (40, 30, 20):
        buffer.add(_item(n))
    assert buffer.tokens == 90 and len(buffer) == 3
    buffer.add(_item(50))  # the oldest (40) goes
    assert buffer.tokens == 100 and [i.tokens for i in buffer.items()] == [30, 20, 50]
    buffer.add(_item(130, start=40))  # longer than the cap: its last 100 tokens stay
    (kept,) = buffer.items()
    assert kept.tokens == 100 and kept.ids[0, 0] == 30 and kept.hidden.shape[1] == 100
    assert kept.loss_mask[0].nonzero()[0].item() == 10  # the loss still from token 40


def _adapted(target, runs: int = 3, steps: int = 4, **settings) -> Adapter:
    head = tiny_head(target, draft_vocab=16)
    adapter = Adapter(head, target, AdaptSettings(**settings), source="tiny")
    for ids in PROMPTS[:runs]:
        summary = run(target, "eagle", ids, CONFIG, head)
        assert adapter.add_run(ids, summary.token_ids, summary.mean_accept_length)
    adapter.adapt(60.0, max_steps=steps)
    return adapter


def test_greedy_output_with_an_adapted_head_is_the_targets(tiny_target):
    adapter = _adapted(tiny_target, lr=1e-2)
    changed = any(
        not torch.equal(value, adapter.initial[name])
        for name, value in adapter.head.state_dict().items()
    )
    assert changed and adapter.steps == 4
    for ids in PROMPTS:
        reference = run(tiny_target, "ar", ids, CONFIG).token_ids
        assert run(tiny_target, "eagle", ids, CONFIG, adapter.head).token_ids == reference
        assert run(tiny_target, "eagle2", ids, CONFIG, adapter.head).token_ids == reference
    after = run(tiny_target, "eagle", PROMPTS[0], CONFIG, adapter.head)
    adapter.add_run(PROMPTS[0], after.token_ids, after.mean_accept_length)
    assert f"→ {after.mean_accept_length:.2f} in the latest run" in adapter.tau_line()


def test_the_same_run_twice_is_kept_once(tiny_target):
    adapter = Adapter(tiny_head(tiny_target, draft_vocab=16), tiny_target)
    output = run(tiny_target, "ar", PROMPTS[0], CONFIG).token_ids
    assert adapter.add_run(PROMPTS[0], output) and not adapter.add_run(PROMPTS[0], output)
    assert not adapter.add_run(PROMPTS[1], ())  # no output: nothing to learn
    assert len(adapter.buffer) == 1


def test_adaptation_is_refused_while_a_run_holds_the_adapter(tiny_target):
    adapter = Adapter(tiny_head(tiny_target, draft_vocab=16), tiny_target)
    output = run(tiny_target, "ar", PROMPTS[0], CONFIG).token_ids
    with adapter.during_run():
        with pytest.raises(SpecdecError, match="between runs"):
            adapter.adapt(1.0)
        with pytest.raises(SpecdecError, match="between runs"):
            adapter.add_run(PROMPTS[0], output)
    assert adapter.add_run(PROMPTS[0], output) and adapter.adapt(1.0, max_steps=1).steps == 1


def test_the_engine_adapts_only_after_the_run_has_ended(tiny_target, monkeypatch):
    head = tiny_head(tiny_target, draft_vocab=16)
    monkeypatch.setitem(runner.EXTRA_LOADERS, "head", lambda spec, target, **options: head)
    engine = SpecdecEngine(tiny_target)
    engine.set_adapt(True)
    request = RunRequest("eagle", "w1 w2 w3", CONFIG, raw=True, specs={"head": "tiny"})
    stream = engine.events(request, threading.Event(), lambda *_: None)
    while not isinstance(next(stream), Step):  # the run is under way, suspended mid-run
        pass
    lines: list[str] = []
    adapting = threading.Thread(target=lambda: lines.append(engine.adapt(0.2, lambda *_: None)))
    adapting.start()
    adapting.join(0.5)
    assert adapting.is_alive() and not lines  # waits for the run
    finished = [event for event in stream if isinstance(event, Finished)]
    adapting.join(30)
    assert finished and not adapting.is_alive()
    assert lines and "before adaptation" in lines[0]
    assert "loaded one" in engine.reset_adaptation()


def test_an_adapted_head_saves_and_reloads_to_the_same_drafts(tiny_target, tmp_path):
    adapter = _adapted(tiny_target, lr=1e-2)
    out = adapter.save(tmp_path / "adapted")
    with pytest.raises(SpecdecError, match="not empty"):
        adapter.save(out)
    reloaded = load_head(str(out), tiny_target, torch.float32)
    ids = PROMPTS[1]
    proposals = []
    for head in (adapter.head, reloaded):
        drafter = EagleDrafter(head, tiny_target.model.config.num_hidden_layers)
        features = Target(tiny_target.model).prefill(ids[:-1])
        drafter.begin(ids, features)
        proposal = drafter.propose(ids, DecodeConfig(k=4), torch.Generator())
        proposals.append((proposal.tokens, proposal.q))
    assert proposals[0][0] == proposals[1][0]
    torch.testing.assert_close(proposals[0][1], proposals[1][1], rtol=0, atol=0)


def test_reset_returns_to_the_loaded_head_and_regularisation_holds_it_close(tiny_target):
    free = _adapted(tiny_target, lr=1e-2, l2=0.0, kl=0.0, steps=8)
    held = _adapted(tiny_target, lr=1e-2, l2=100.0, kl=5.0, steps=8)

    def drift(adapter: Adapter) -> float:
        named = adapter.model.named_parameters()
        return sum(float(((p.detach() - adapter.initial[n]) ** 2).sum()) for n, p in named)

    assert drift(held) < drift(free)
    free.reset()
    assert drift(free) == 0 and not len(free.buffer) and free.tau_line() == ""
    assert all(torch.equal(v, free.initial[n]) for n, v in free.head.state_dict().items())


@pytest.fixture
def saved(tmp_path):
    """A tiny target and head saved as directories, and a prompt file: the CLI's options."""
    import json

    from specdec_core.heads.eagle.formats import save_head
    from specdec_core.models.loading import load_model
    from tests.tiny import tiny_model, tiny_tokenizer

    tiny_model(1).save_pretrained(tmp_path / "target")
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    target = load_model(str(tmp_path / "target"), device="cpu", dtype="float32")
    save_head(tiny_head(target, draft_vocab=16), tmp_path / "head")
    lines = [json.dumps({"prompt": f"w{i} w{i + 1} w{i + 2} w4"}) for i in range(3)]
    (tmp_path / "p.jsonl").write_text("\n".join(lines))
    common = ["--target", str(tmp_path / "target"), "--head", str(tmp_path / "head")]
    return [*common, "--max-new-tokens", "16", "--raw"]


def test_bench_adapt_keeps_every_output_identical_to_ar_and_saves_the_head(saved, tmp_path):
    import json

    from specdec_core.cli import main

    common = [*saved, "--prompts", str(tmp_path / "p.jsonl")]
    out, adapted = tmp_path / "bench.json", tmp_path / "adapted"
    argv = ["bench", "--methods", "ar,eagle,eagle2", *common, "--adapt", "--adapt-seconds", "0.05"]
    assert main([*argv, "--json-out", str(out), "--save-adapted", str(adapted)]) == 0
    record = json.loads(out.read_text())
    assert all(m["identical_to_ar"] == 1.0 for m in record["methods"].values())
    adaptation = record["config"]["adaptation"]["methods"]
    assert set(adaptation) == {"eagle", "eagle2"} and len(adaptation["eagle"]["tau_by_prompt"]) == 3
    assert (adapted / "specdec_card.json").is_file()
    assert main(["bench", "--methods", "ar", *common, "--adapt"]) == 2  # no head to adapt
    assert main(["bench", "--methods", "ar,eagle", *common, "--save-adapted", "x"]) == 2


def test_generate_adapt_saves_a_head_that_drafts_the_same_output(saved, tmp_path, capsys):
    import json

    from specdec_core.cli import main

    adapted = tmp_path / "adapted"
    argv = ["generate", "--method", "eagle", "--prompt", "w1 w2 w3", *saved, "--json"]
    assert main([*argv, "--adapt", "--save-adapted", str(adapted)]) == 0
    first = json.loads(capsys.readouterr().out)
    card = json.loads((adapted / "specdec_card.json").read_text())
    assert card["adapted_from"] == saved[3] and card["adaptation"]["steps"] >= 1
    assert main([*argv, "--head", str(adapted)]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == first["token_ids"]
