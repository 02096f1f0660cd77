"""A policy profile (`specdec tune-policy`) chosen in the Decoding panel: it reaches every run
request, the engine runs the policy it gives the prompt's kind and the panel names that kind;
a file that is not a profile is one line and no profile; the choice round-trips through the
panel's saved values."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from app.engine import SpecdecEngine
from app.engine_api import POLICY_KIND, MethodInfo, Registries, RunRequest, TargetRequest
from app.widgets.decoding_panel import NO_PROFILE
from specdec_core.decoding.config import DecodeConfig
from specdec_core.decoding.events import Finished, Started
from specdec_core.errors import SpecdecError
from specdec_core.measurement.measure import run_distance
from specdec_core.run.policy_profile import KindSetting, PolicyProfile
from specdec_core.run.prompts import encode_prompt
from tests.gui_fake import METHODS, POLICIES, FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)
from tests.test_generate_policy_profile import (  # loops: threshold tau=0.01, words: lossless
    LOOP,
    WORDS,
    profile_file_fixture,  # noqa: F401  (a fixture)
)

NEVER = threading.Event()


def quiet(message: str, fraction: float) -> None:
    """Progress nobody shows."""


def run(engine: SpecdecEngine, request: RunRequest) -> tuple[Started, Finished]:
    events = list(engine.events(request, NEVER, quiet))
    started = next(event for event in events if isinstance(event, Started))
    return started, next(event for event in events if isinstance(event, Finished))


CONFIG = DecodeConfig(max_new_tokens=10, k=3)


def test_the_engine_runs_the_policy_the_profile_gives_the_prompts_kind(tiny_target, profile_file):
    engine = SpecdecEngine(tiny_target)
    request = RunRequest("ngram", LOOP, CONFIG, raw=True, policy_profile=str(profile_file))
    started, finished = run(engine, request)
    summary = finished.summary
    assert started.config[POLICY_KIND] == "loop" and started.config["policy"] == "threshold"
    assert summary.policy == "threshold" and summary.lossy
    assert summary.config[POLICY_KIND] == "loop"
    assert summary.config["policy_params"] == {"tau": 0.01}
    chosen = replace(CONFIG, policy="threshold", policy_params={"tau": 0.01})
    _, by_hand = run(engine, RunRequest("ngram", LOOP, chosen, raw=True))
    assert summary.token_ids == by_hand.summary.token_ids  # the same run as the policy chosen
    ids = encode_prompt(tiny_target.tokenizer, LOOP, True)
    assert engine.distance(request, summary, NEVER) == run_distance(
        "ngram", tiny_target, ids, chosen
    )  # the distance of the policy the run had

    words = replace(request, prompt=WORDS)
    _, finished = run(engine, words)
    assert finished.summary.policy == "lossless" and not finished.summary.lossy
    assert finished.summary.config[POLICY_KIND] == "words"


def test_an_autoregressive_run_ignores_the_profile(tiny_target, profile_file):
    request = RunRequest("ar", LOOP, CONFIG, raw=True, policy_profile=str(profile_file))
    started, finished = run(SpecdecEngine(tiny_target), request)
    assert finished.summary.policy == "lossless"  # a reference stays lossless
    assert POLICY_KIND not in started.config and POLICY_KIND not in finished.summary.config


def test_a_profile_tuned_on_another_target_is_refused_in_one_line(tiny_target, tmp_path):
    other = KindSetting("code", 0.1, 0.0, 0.0, 1, (1.0,) * 8)  # hidden size 8, not 32
    path = PolicyProfile("threshold", "tau", 0.05, (other,)).save(tmp_path / "other.json")
    request = RunRequest("ngram", LOOP, CONFIG, raw=True, policy_profile=str(path))
    with pytest.raises(SpecdecError, match="hidden size 8, this one has 32") as raised:
        run(SpecdecEngine(tiny_target), request)
    assert "\n" not in str(raised.value)


def test_a_profile_chosen_in_the_panel_reaches_every_run_request(make_window, qtbot, profile_file):
    engine = FakeEngine(steps=3)
    window = make_window(engine)
    decoding = window.decoding
    decoding.select(decoding.policy, "threshold")
    decoding.params["tau"].setValue(0.42)
    assert decoding.set_profile(str(profile_file))
    assert not decoding.policy.isEnabled() and decoding.policy.currentIndex() == -1
    assert decoding.policy.placeholderText() == "by profile: threshold"
    assert decoding.profile_name.text() == "profile.json"
    assert decoding.profile_note.text() == "threshold tau per kind: loop 0.01, words lossless"
    assert decoding.lossy_badge.isVisibleTo(window)
    window.generate()
    wait_idle(qtbot, window)
    window.run_compare()
    wait_idle(qtbot, window)
    window.show_chat()
    window.generate()  # the prompt box as the chat's next message
    wait_idle(qtbot, window)
    window.tabs.setCurrentIndex(0)  # back to Output; sending took the prompt box's text
    window.prompt.set_text("Explain speculative decoding in three sentences.")
    methods = [request.method for request in engine.requests]
    assert methods == ["classic", "ar", "ar", "classic", "classic", "ar"]  # Generate, Compare, chat
    assert engine.requests[4].conversation  # the chat turn
    assert {request.policy_profile for request in engine.requests} == {str(profile_file)}
    assert engine.requests[0].config.policy == "lossless"  # the engine applies the profile

    decoding.profile_clear.click()  # Clear: the policy box decides again, as it was
    assert decoding.profile_path() == "" and decoding.policy.isEnabled()
    assert decoding.policy_name() == "threshold"
    assert decoding.params["tau"].value() == pytest.approx(0.42)
    window.generate()
    wait_idle(qtbot, window)
    assert engine.requests[-2].policy_profile == ""
    assert engine.requests[-2].config.policy_params == {"tau": pytest.approx(0.42)}


class TinyRunEngine(FakeEngine):
    """The fake engine, but its runs are the real engine's on the tiny target (n-gram)."""

    def __init__(self, target) -> None:
        super().__init__()
        self.real = SpecdecEngine(target)

    def registries(self) -> Registries:
        return Registries((*METHODS, MethodInfo("ngram", "N-gram lookup", None)), POLICIES)

    def events(self, request, stop, progress):
        self.requests.append(request)
        yield from self.real.events(request, stop, progress)

    def distance(self, request, summary, stop):
        return self.real.distance(request, summary, stop)

    def token_text(self, token_id: int) -> str:
        return self.real.token_text(token_id)


def test_the_panel_names_the_kind_and_policy_of_a_run(
    make_window, qtbot, tiny_target, profile_file
):
    window = make_window(TinyRunEngine(tiny_target))
    decoding = window.decoding
    decoding.select(decoding.method, "ngram")
    decoding.max_new_tokens.setValue(8)
    window.prompt.set_text(LOOP)
    window.prompt.raw.setChecked(True)
    decoding.set_profile(str(profile_file))
    window.generate()
    wait_idle(qtbot, window, timeout=30_000)
    assert decoding.profile_note.text() == "profile: kind loop → threshold tau=0.01"
    window.prompt.set_text(WORDS)
    window.generate()
    wait_idle(qtbot, window, timeout=30_000)
    assert decoding.profile_note.text() == "profile: kind words → lossless"


def test_a_file_not_a_profile_is_one_line_and_no_profile(make_window, tmp_path, profile_file):
    window = make_window()
    decoding = window.decoding
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    missing = tmp_path / "missing.json"
    unknown = PolicyProfile.from_record({**_record(profile_file), "policy": "nonesuch"})
    unknown_file = unknown.save(tmp_path / "unknown.json")
    for path, why in (
        (broken, "not a policy profile (not JSON)"),
        (missing, "policy profile not found"),
        (unknown_file, "this engine has no policy 'nonesuch'"),
    ):
        assert decoding.set_profile(str(profile_file))
        assert not decoding.set_profile(str(path))
        note = decoding.profile_note.text()
        assert why in note and note.endswith("no policy profile is used") and "\n" not in note
        assert decoding.profile_path() == "" and decoding.profile_name.text() == NO_PROFILE
        assert decoding.policy.isEnabled() and decoding.policy.currentIndex() >= 0


def _record(path) -> dict:
    import json

    return json.loads(path.read_text())


def test_the_profile_round_trips_through_the_panels_saved_values(make_window, profile_file):
    first = make_window()
    first.decoding.select(first.decoding.policy, "threshold")
    first.decoding.set_profile(str(profile_file))
    values = first.decoding.values()
    assert values["policy_profile"] == str(profile_file)
    assert values["policy"] == "threshold"  # the box's own choice, kept under the profile
    second = make_window()
    assert second.decoding.profile_path() == ""
    second.decoding.apply(values)
    assert second.decoding.profile_path() == str(profile_file)
    assert second.decoding.policy.placeholderText() == "by profile: threshold"
    assert second.decoding.values() == values

    second.decoding.apply({**values, "k": 7})  # Tune's point: the profile stays
    assert second.decoding.k.value() == 7 and second.decoding.profile_path() == str(profile_file)
    assert second.decoding.policy.currentIndex() == -1

    profile_file.unlink()  # gone by the next start: one line, the rest restored
    third = make_window()
    third.decoding.apply({**values, "k": 7})
    assert third.decoding.profile_path() == "" and third.decoding.k.value() == 7
    assert third.decoding.policy_name() == "threshold"
    assert "policy profile not found" in third.decoding.profile_note.text()


@pytest.mark.slow  # an engine process
def test_the_engine_process_reads_the_profile_and_runs_the_kinds_policy(tmp_path, profile_file):
    from app.process_engine import ProcessEngine
    from tests.process_engines import SlowEngine
    from tests.tiny import tiny_model, tiny_tokenizer

    tiny_model(1).save_pretrained(tmp_path / "target")  # the session's tiny_target, on disk
    tiny_tokenizer().save_pretrained(tmp_path / "target")
    request = RunRequest("ngram", LOOP, CONFIG, raw=True, policy_profile=str(profile_file))
    child = ProcessEngine(SlowEngine)
    try:
        child.load_target(TargetRequest(str(tmp_path / "target"), "cpu", "float32"), quiet)
        events = list(child.events(request, NEVER, quiet))
    finally:
        child.close()
    summary = next(event.summary for event in events if isinstance(event, Finished))
    assert summary.policy == "threshold" and summary.config[POLICY_KIND] == "loop"
