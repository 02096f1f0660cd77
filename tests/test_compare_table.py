"""Compare's table: every method's name whole on one line, a narrow window scrolls sideways."""

from app.export import CompareResult
from app.widgets.compare_table import CompareTable
from tests.test_speedup_bound import AR, PLAUSIBLE


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
