"""A lossless run's speedup above its τ is a timing disturbance, never shown as a result: in
Generate's speedup line, in Chat's turn line and in Compare's table."""

from app.export import CompareResult
from app.reference import measured, speedup_text
from app.widgets.chat_view import turn_summary
from app.widgets.compare_table import HEADERS, CompareTable
from specdec_core.decoding.events import RunSummary
from specdec_core.measurement.run_speedup import StepTime
from specdec_core.measurement.speedup_bound import MeasuredSpeedup


def summary(method: str, new_tokens: int, steps: int, seconds: float, lossy=False) -> RunSummary:
    return RunSummary(
        method=method,
        policy="typical" if lossy else "lossless",
        lossy=lossy,
        prompt_tokens=5,
        new_tokens=new_tokens,
        token_ids=tuple(range(new_tokens)),
        text="x" * new_tokens,
        steps=steps,
        wall_seconds=seconds,
        prefill_seconds=0.0,
        stop_reason="max_tokens",
    )


AR = summary("ar", 64, 64, 6.4)  # 10 tokens/s
PLAUSIBLE = summary("eagle2", 64, 32, 4.0)  # τ 2.0, ×1.60
DISTURBED = summary("eagle2", 64, 32, 2.0)  # τ 2.0, ×3.20: above τ


def test_a_speedup_above_tau_is_flagged_only_for_lossless_methods():
    assert not MeasuredSpeedup(1.6, 2.0).disturbed
    assert MeasuredSpeedup(2.01, 2.0).disturbed
    assert MeasuredSpeedup(3.2, 2.0).label() == "timing disturbed"
    assert "cannot reach" in MeasuredSpeedup(3.2, 2.0).why()
    assert not MeasuredSpeedup(3.2, 2.0, lossy=True).disturbed  # outside the rule
    assert MeasuredSpeedup(1.6, 2.0).why() == ""


def test_generate_and_chat_show_a_disturbed_speedup_as_a_disturbance():
    assert speedup_text(PLAUSIBLE, AR).startswith("×1.60 vs autoregressive")
    line = speedup_text(DISTURBED, AR)
    assert line.startswith("timing disturbed") and "×3.20" in line and "run again" in line
    assert "Generate again re-measures" in line
    assert "×1.60 vs autoregressive" in turn_summary("EAGLE-2", PLAUSIBLE, measured(PLAUSIBLE, AR))
    chat = turn_summary("EAGLE-2", DISTURBED, measured(DISTURBED, AR))
    assert "×3.20 vs autoregressive ·" not in chat and "speedup not shown" in chat
    assert "Regenerate re-measures" in chat


def test_a_disturbed_speedup_shows_no_interval_even_when_its_steps_give_one():
    run = [StepTime(2, 0.06 + 0.01 * (i % 3)) for i in range(32)]  # the steps of DISTURBED
    reference = [StepTime(1, 0.09 + 0.02 * (i % 2)) for i in range(64)]
    line = speedup_text(DISTURBED, AR, run, reference)
    assert line.startswith("timing disturbed") and "interval" not in line
    chat = turn_summary("EAGLE-2", DISTURBED, measured(DISTURBED, AR, run, reference))
    assert "interval" not in chat and "speedup not shown" in chat


def test_compare_never_shows_a_speedup_above_tau(qtbot):
    table = CompareTable()
    qtbot.addWidget(table)
    table.show_results(
        [
            CompareResult("ar", "Autoregressive", "#000000", AR),
            CompareResult("eagle2", "EAGLE-2", "#ff0000", PLAUSIBLE),
            CompareResult("eagle", "EAGLE", "#00ff00", DISTURBED),
        ]
    )
    column = HEADERS.index("Speedup vs AR")
    cells = [table.item(r, column).text() for r in range(3)]
    assert cells == ["1.00×", "1.60×", "timing disturbed"]
    assert "cannot reach" in table.item(2, column).toolTip()


def test_bench_marks_a_speedup_above_tau_as_disturbed_in_table_and_json():
    from specdec_core.measurement.bench import BenchResult, format_table
    from specdec_core.measurement.sweep_records import Aggregate

    result = BenchResult(config={})
    result.methods["ar"] = Aggregate(10.0, 1.0, speedup_vs_ar=1.0)
    result.methods["eagle2"] = Aggregate(16.0, 2.0, speedup_vs_ar=1.6)
    result.methods["eagle"] = Aggregate(30.0, 2.0, speedup_vs_ar=3.0)
    result.methods["ngram:typical"] = Aggregate(30.0, 2.0, lossy=True, speedup_vs_ar=3.0)
    table = format_table(result).splitlines()
    assert "1.60x" in table[3] and "disturbed" not in table[3]
    assert "disturbed" in table[4] and "3.00x" not in table[4] and "above tau" in table[4]
    assert "3.00x" in table[5]  # a lossy policy is outside the rule
    records = result.as_dict()["methods"]
    assert records["eagle"]["speedup_disturbed"] is True
    assert "speedup_disturbed" not in records["eagle2"]
