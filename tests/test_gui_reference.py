"""The answer at the method's speed: Generate (and a chat turn) shows its answer and the window
is ready at once; the speedup's autoregressive reference runs in the background, is cancelled
by the next action and filled in when it ends, is reused (re-timed) where it was measured
before on this machine, and Run ▸ Measure the speedup turns it off."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

from app.reference_store import CHECK_STEPS, ReferenceStore, store_path
from specdec_core.decoding.events import Step, StepPhases
from tests.gui_fake import FakeEngine
from tests.gui_window import make_window_fixture, wait_idle  # noqa: F401  (fixture)


class ReferenceEngine(FakeEngine):
    """The fake engine whose autoregressive runs take `reference_delay` more a step (a
    reference slower than the answer), with steps timed `pace` times the fake's own (the
    machine slower or faster than when a reference was kept); `most_in_flight` is the most
    runs it ever had under way at once, `runs_at_load` the runs under way at each load."""

    def __init__(self, reference_delay: float = 0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reference_delay = reference_delay
        self.pace = 1.0
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        self.runs_at_load: list[int] = []

    def load_target(self, target, progress, stop=None):
        self.runs_at_load.append(self.in_flight)
        return super().load_target(target, progress, stop)

    def events(self, request, stop, progress):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for event in super().events(request, stop, progress):
                if isinstance(event, Step) and request.method == "ar":
                    time.sleep(self.reference_delay)
                    phases = event.phases
                    paced = StepPhases(
                        draft=phases.draft * self.pace, target=phases.target * self.pace
                    )
                    event = replace(event, phases=paced)
                yield event
        finally:
            with self.lock:
                self.in_flight -= 1


def last_line(window) -> str:
    return window.summary.text().splitlines()[-1]


def test_the_answer_is_shown_and_the_window_ready_while_its_reference_runs(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: window.single.measured is not None, timeout=5000)
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    assert window.ready() and window.actions.generate.isEnabled()  # the next action may start
    assert window.prompt.generate_button.isEnabled() and window.actions.compare.isEnabled()
    assert "τ = 2.75" in window.summary.text()  # the answer's own numbers, at once
    assert last_line(window).startswith("measuring the autoregressive reference")
    assert window.status.state.text().startswith("measuring the autoregressive reference")
    wait_idle(qtbot, window)
    line = last_line(window)
    assert line.startswith("×2.75 vs autoregressive (95% interval ")  # filled in
    assert line.endswith("reference measured just now, after the answer)")
    assert window.status.state.text() == "ready"


def test_a_new_generate_cancels_the_reference_and_starts_once_it_has_ended(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    qtbot.waitUntil(lambda: engine.produced >= 1, timeout=5000)
    window.prompt.set_text("another prompt")
    window.generate()
    qtbot.waitUntil(lambda: len(engine.summaries) >= 3, timeout=5000)
    cancelled = engine.summaries[1]
    assert cancelled.method == "ar" and cancelled.stop_reason == "stopped"
    assert engine.most_in_flight == 1  # the new run waited for the reference to end
    assert engine.summaries[2].method == "classic"
    wait_idle(qtbot, window, timeout=10_000)
    assert [r.prompt for r in engine.requests] == [
        "Explain speculative decoding in three sentences."
    ] * 2 + ["another prompt"] * 2
    assert "measured just now" in last_line(window)  # the new answer's own reference


def test_a_compare_cancels_the_reference_and_the_output_says_no_speedup(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    window.run_compare()
    wait_idle(qtbot, window, timeout=10_000)
    assert engine.summaries[1].stop_reason == "stopped"
    assert last_line(window) == (
        "speedup not measured: the next action cancelled its autoregressive reference"
    )
    assert [r.method for r in engine.requests] == ["classic", "ar", "ar", "classic"]
    assert window.compare.results  # the Compare measured its own ar row


def test_a_second_start_reuses_the_reference_at_once_and_re_times_a_few_of_its_steps(
    make_window, qtbot
):
    first = make_window(ReferenceEngine())
    first.generate()
    wait_idle(qtbot, first)
    assert "measured just now" in last_line(first)
    assert store_path().exists()  # kept in the user data dir
    first.close()

    engine = ReferenceEngine(reference_delay=0.2)
    second = make_window(engine)  # a second start: a new window, the same machine
    second.decoding.k.setValue(6)  # ar ignores k: the same reference
    second.generate()
    qtbot.waitUntil(lambda: second.single.measured is not None, timeout=5000)
    shown = last_line(second)
    assert shown.startswith("×2.75 vs autoregressive (95% interval ")  # with the answer
    assert "reference reused: measured today at " in shown
    assert f"re-timing {CHECK_STEPS} of its steps now…" in shown
    wait_idle(qtbot, second, timeout=10_000)
    check = engine.requests[-1]
    assert check.method == "ar" and check.config.max_new_tokens == CHECK_STEPS
    assert "steps re-timed now within 0 %" in last_line(second)


def test_a_reused_reference_is_scaled_when_the_machine_runs_at_another_pace(make_window, qtbot):
    engine = ReferenceEngine()
    window = make_window(engine)
    window.generate()
    wait_idle(qtbot, window)
    engine.pace = 0.5  # the machine now runs the reference's steps in half the time
    window.generate()
    wait_idle(qtbot, window)
    line = last_line(window)
    assert "reference re-timed: measured today at " in line
    assert "now take ×0.50 as long" in line
    assert line.startswith("×1.38 vs autoregressive")  # against a reference twice as fast
    assert "200.0 tokens/s" in line


def test_different_settings_measure_a_reference_of_their_own(make_window, qtbot):
    engine = ReferenceEngine()
    window = make_window(engine)
    window.generate()
    wait_idle(qtbot, window)
    window.decoding.max_new_tokens.setValue(32)
    window.generate()
    wait_idle(qtbot, window)
    assert engine.requests[-1].config.max_new_tokens == 32  # a whole reference, not a check
    assert "measured just now" in last_line(window)


def test_an_autoregressive_run_is_kept_as_the_reference_of_the_methods_after_it(make_window, qtbot):
    engine = ReferenceEngine()
    window = make_window(engine)
    window.decoding.select(window.decoding.method, "ar")
    window.generate()
    wait_idle(qtbot, window)
    window.decoding.select(window.decoding.method, "classic")
    window.generate()
    qtbot.waitUntil(lambda: window.single.measured is not None, timeout=5000)
    assert "reference reused" in last_line(window)


def test_the_setting_turns_the_reference_off_and_is_remembered(make_window, qtbot, tmp_path):
    engine = ReferenceEngine()
    window = make_window(engine)
    window.actions.measure_speedup.setChecked(False)
    window.generate()
    wait_idle(qtbot, window)
    assert [r.method for r in engine.requests] == ["classic"]  # no reference ran
    assert last_line(window).startswith("speedup not measured: the autoregressive reference is off")
    window.close()
    saved = json.loads((tmp_path / "config" / "settings.json").read_text())
    assert saved["measure_speedup"] is False
    again = make_window(ReferenceEngine())
    assert not again.actions.measure_speedup.isChecked()


def test_stop_ends_a_reference_in_the_background(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.2, steps=40)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    assert window.actions.stop.isEnabled()  # Stop (Esc) is live for it too
    pressed = time.monotonic()
    window.stop()
    wait_idle(qtbot, window)
    assert time.monotonic() - pressed < 2
    assert engine.summaries[-1].stop_reason == "stopped"


def test_a_chat_reply_is_shown_at_once_and_its_speedup_filled_in(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    window.show_chat()
    window.prompt.set_text("a question")
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    turn = window.chat_view.turns[0]
    assert window.ready() and "measuring the speedup…" in turn.summary.text()
    wait_idle(qtbot, window)
    assert "×2.75 vs autoregressive (95% interval " in turn.summary.text()
    assert window.chat.chat.turns[0].speedup is not None

    window.chat.regenerate("classic")  # the same history: its reference is reused
    qtbot.waitUntil(lambda: engine.summaries[-1].method == "classic", timeout=5000)
    wait_idle(qtbot, window)
    text = window.chat_view.turns[0].summary.text()
    assert "reference reused: measured today at " in text and "re-timed now" in text


def test_a_chat_turn_sent_while_the_reference_runs_cancels_it(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    window.show_chat()
    window.prompt.set_text("a question")
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    window.prompt.set_text("and another")
    window.generate()
    wait_idle(qtbot, window, timeout=10_000)
    first, second = window.chat_view.turns
    assert "no speedup: its reference was cancelled" in first.summary.text()
    assert "×2.75 vs autoregressive" in second.summary.text()
    assert engine.most_in_flight == 1


def test_kept_references_survive_a_new_store_and_are_keyed_by_what_ar_reads(tmp_path):
    from app.engine_api import RunRequest, TargetInfo
    from app.reference import References
    from specdec_core.decoding.config import DecodeConfig
    from specdec_core.decoding.events import RunSummary
    from specdec_core.measurement.run_speedup import StepTime

    target = TargetInfo("embedded", "cpu", "float32", 1)
    path = tmp_path / "references.json"
    references = References(ReferenceStore(path), target=lambda: target)
    run = RunRequest("eagle2", "a prompt", DecodeConfig(max_new_tokens=8, k=4))
    summary = RunSummary(
        method="ar", policy="lossless", lossy=False, prompt_tokens=3, new_tokens=8,
        token_ids=tuple(range(8)), text="", steps=8, wall_seconds=0.4, prefill_seconds=0.0,
        stop_reason="max_tokens",
    )  # fmt: skip
    references.keep(run, summary, [StepTime(1, 0.05)] * 8)
    again = References(ReferenceStore(path), target=lambda: target)
    kept = again.kept(replace(run, method="ngram", config=replace(run.config, k=2)))
    assert kept is not None and kept.tokens_per_second == 20.0 and len(kept.steps) == 8
    for other in (
        replace(run, prompt="another prompt"),
        replace(run, config=replace(run.config, temperature=0.7)),
        replace(run, config=replace(run.config, seed=1)),
        replace(run, config=replace(run.config, max_new_tokens=16)),
    ):
        assert again.kept(other) is None
    bf16 = References(ReferenceStore(path), target=lambda: replace(target, dtype="bfloat16"))
    assert bf16.kept(run) is None
    stopped = replace(summary, stop_reason="stopped")
    references.keep(replace(run, prompt="cut short"), stopped, [StepTime(1, 0.05)])
    assert references.kept(replace(run, prompt="cut short")) is None  # no reference


def test_stop_before_the_reference_began_drops_it_and_says_so(make_window, qtbot):
    engine = ReferenceEngine(delay=0.05)  # a lossy run's distance: one decode more, paced
    window = make_window(engine)
    window.decoding.select(window.decoding.policy, "threshold")
    window.generate()
    qtbot.waitUntil(lambda: window.single.measured is not None, timeout=5000)
    assert window.controller.running  # the distance is measured before the queue ends
    window.stop()
    wait_idle(qtbot, window)
    assert [r.method for r in engine.requests] == ["classic"]  # the reference never ran
    assert "cancelled its autoregressive reference" in last_line(window)


def test_a_step_stalled_by_another_job_does_not_re_time_a_kept_reference():
    from app.reference import Reference
    from app.reference_store import KeptReference
    from specdec_core.measurement.run_speedup import StepTime

    kept = KeptReference(8, 0.8, (StepTime(1, 0.1),) * 8, time.time())
    stalled = [StepTime(1, 0.1)] * 7 + [StepTime(1, 2.0)]
    assert kept.pace(stalled) == 1.0
    assert "re-timed now within 0 %" in Reference.kept(kept, stalled).source
    slower = Reference.kept(kept, [StepTime(1, 0.2)] * 8)
    assert slower.tokens_per_second == 5.0 and "now take ×2.00 as long" in slower.source


def test_a_model_load_stops_the_reference_and_loads_once_it_has_ended(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1)
    window = make_window(engine)
    loads = len(engine.loads)
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    window.load_target()
    qtbot.waitUntil(lambda: len(engine.loads) == loads + 1, timeout=5000)
    assert engine.summaries[-1].method == "ar" and engine.summaries[-1].stop_reason == "stopped"
    assert engine.runs_at_load[-1] == 0  # the reference had ended before the load began
    qtbot.waitUntil(window.ready, timeout=5000)


def test_closing_while_the_reference_runs_leaves_no_live_thread(make_window, qtbot):
    engine = ReferenceEngine(reference_delay=0.1, steps=100)
    window = make_window(engine)
    window.generate()
    qtbot.waitUntil(lambda: window.controller.measuring_reference, timeout=5000)
    window.close()
    assert window.controller.live_threads() == 0 and engine.closed
