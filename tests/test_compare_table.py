"""Compare's table: every method's name whole on one line, a narrow window scrolls sideways;
a speedup shows its 95 % interval over the steps of its run and the `ar` run."""

import csv
import json

from app.export import COLUMNS, CompareResult, write_csv, write_json
from app.widgets.compare_table import HEADERS, CompareTable
from specdec_core.measurement.run_speedup import StepTime
from tests.test_speedup_bound import AR, DISTURBED, PLAUSIBLE


def test_compare_names_never_wrap_into_tall_rows_in_a_narrow_table(qtbot):
    table = CompareTable()
    qtbot.addWidget(table)
    table.resize(500, 300)
    long_name = "Classic (draft model) with the bundled draft"
    table.show_results(
        [
            CompareResult("ar", "Autoregressive", "#000000", AR),
            CompareResult("classic", long_name, "#ff0000", PLAUSIBLE),
        ]
    )
    name_width = table.fontMetrics().horizontalAdvance(long_name)
    assert table.columnWidth(0) >= name_width  # the whole name, on one line
    assert table.rowHeight(1) == table.rowHeight(0)


def test_a_speedup_cell_shows_its_interval_over_both_runs_steps(qtbot, tmp_path):
    """The ratio and its 95 % interval from the method's and the `ar` run's steps; a ratio
    above τ shows neither; the export carries the interval beside the existing keys."""
    table = CompareTable()
    qtbot.addWidget(table)
    ar_steps = tuple(StepTime(1, 0.1 + 0.01 * (i % 3)) for i in range(64))
    steps = tuple(StepTime(2, 0.125 + 0.02 * (i % 2)) for i in range(32))
    results = [
        CompareResult("ar", "Autoregressive", "#000000", AR, ar_steps),
        CompareResult("eagle2", "EAGLE-2", "#ff0000", PLAUSIBLE, steps),
        CompareResult("eagle", "EAGLE", "#00ff00", DISTURBED, steps),
    ]
    table.show_results(results)
    column = HEADERS.index("Speedup vs AR")
    cell = table.item(1, column).text()
    low, high = (float(x) for x in cell.removeprefix("1.60× (").removesuffix(")").split("–"))
    assert low < 1.6 < high
    assert "95% interval" in table.item(1, column).toolTip()
    assert table.item(2, column).text() == "timing disturbed"
    assert "Run comparison again" in table.item(2, column).toolTip()
    write_csv(results, tmp_path / "c.csv")
    write_json(results, tmp_path / "c.json")
    methods = json.loads((tmp_path / "c.json").read_text())["methods"]
    assert set(COLUMNS) <= set(methods[1]) and methods[1]["speedup_vs_ar"] == 1.6
    assert round(methods[1]["speedup_interval_low"], 2) == low
    assert round(methods[1]["speedup_interval_high"], 2) == high
    rows = list(csv.DictReader((tmp_path / "c.csv").open(encoding="utf-8")))
    assert float(rows[1]["speedup_interval_high"]) == methods[1]["speedup_interval_high"]
    assert methods[0]["speedup_interval_low"] is None  # ar is the reference itself
    assert rows[0]["speedup_interval_low"] == ""
