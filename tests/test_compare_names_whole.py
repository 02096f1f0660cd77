"""Compare's table shows every method's name whole in a 1280×800 window: a name longer than
the column the numbers leave wraps onto a second line (its row grows) instead of being cut
with "…"; the numbers stay on one line. With every method compared, the columns still show
several lines of text: the tab scrolls up and down instead."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

from app.export import CompareResult
from app.widgets.compare_panel import COLUMN_LINES
from app.widgets.compare_table import HEADERS, CompareTable
from specdec_core.run.methods import METHODS
from tests.gui_window import make_window_fixture  # noqa: F401  (fixture)
from tests.test_speedup_bound import AR, DISTURBED, PLAUSIBLE


def _text_room(table: CompareTable, row: int, column: int) -> QRect:
    """The rectangle the cell's text is drawn in (its swatch and margins taken off)."""
    index = table.model().index(row, column)
    option = QStyleOptionViewItem()
    option.rect = table.visualRect(index)
    option.font = table.font()
    size = table.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize, None, table)
    option.decorationSize = QSize(size, size)
    table.itemDelegateForColumn(column).initStyleOption(option, index)
    style = table.style()
    room = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, table)
    margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    return room.adjusted(margin, 0, -margin, 0)


def _shown_whole(table: CompareTable, row: int) -> bool:
    text = table.item(row, 0).text()
    room = _text_room(table, row, 0)
    metrics = QFontMetrics(table.font())
    words_fit = all(metrics.horizontalAdvance(word) <= room.width() for word in text.split())
    wrapped = metrics.boundingRect(QRect(0, 0, room.width(), 10**5), Qt.TextWordWrap, text)
    return words_fit and wrapped.height() <= room.height()


def _every_method_compared(window, qtbot):
    window.tabs.setCurrentIndex([window.tabs.tabText(i) for i in range(4)].index("Compare"))
    window.resize(1280, 800)
    panel = window.compare
    for number, (name, method) in enumerate(METHODS.items()):
        summary = AR if name == "ar" else (DISTURBED, PLAUSIBLE)[number % 2]
        panel.columns.add_column(name, method.label, "#000000")
        panel.add_result(CompareResult(name, method.label, "#000000", summary))
    qtbot.wait(50)
    return panel


def test_every_method_name_is_whole_in_compare_at_1280_by_800(make_window, qtbot):
    table = _every_method_compared(make_window(), qtbot).table
    metrics = QFontMetrics(table.font())
    longest = max(metrics.horizontalAdvance(method.label) for method in METHODS.values())
    assert table.columnWidth(0) < longest  # the column cannot hold every name on one line
    assert [
        table.item(r, 0).text() for r in range(table.rowCount()) if not _shown_whole(table, r)
    ] == []
    assert table.height() >= table.verticalHeader().length()  # every row shows, none scrolls
    speedup = HEADERS.index("Speedup vs AR")
    one_line = max(table.rowHeight(r) for r in range(table.rowCount()) if table.rowHeight(r))
    assert (
        min(table.rowHeight(r) for r in range(table.rowCount())) < one_line
    )  # short names: one line
    assert table.columnWidth(speedup) >= metrics.horizontalAdvance("timing disturbed")


def test_with_every_method_compared_each_column_shows_lines_and_the_tab_scrolls(make_window, qtbot):
    window = make_window()
    panel = _every_method_compared(window, qtbot)
    assert window.height() <= 800
    line = panel.columns.fontMetrics().lineSpacing()
    for column in panel.columns.columns.values():
        assert column.view.height() >= COLUMN_LINES * line, column.header.text()
    assert panel.table.height() >= panel.table.verticalHeader().length()  # every row shows
    button = panel.run_button  # nothing is cut at the right by the scroll bar
    right = button.mapTo(panel.scroll.viewport(), button.rect().topRight()).x()
    assert right < panel.scroll.viewport().width()
    bar = panel.scroll.verticalScrollBar()
    assert bar.maximum() > 0  # taller than the tab: it scrolls rather than squeezing

    def last_row_reached() -> bool:  # scrolled to the end (once the rows' refit has settled)
        bar.setValue(bar.maximum())
        bottom = panel.table.mapTo(panel.scroll.viewport(), panel.table.rect().bottomLeft()).y()
        return bottom <= panel.scroll.viewport().height()

    qtbot.waitUntil(last_row_reached, timeout=2000)


def test_the_plots_key_shows_every_compared_method_at_1280_by_800(make_window, qtbot):
    window = make_window()
    window.resize(1280, 800)
    for method in METHODS.values():
        window.plots.begin_series(method.label, "#000000")
    qtbot.wait(50)
    key = window.plots.key
    assert key.height() >= key.heightForWidth(key.width())  # no line of the key is cut


def test_a_narrower_window_wraps_names_again_and_grows_their_rows(qtbot):
    from app.widgets.compare_panel import ComparePanel

    panel = ComparePanel()
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    label = METHODS["eagle2-suffix"].label
    for name, text, summary in (("ar", "Autoregressive", AR), ("eagle2-suffix", label, DISTURBED)):
        panel.columns.add_column(name, text, "#000000")
        panel.add_result(CompareResult(name, text, "#000000", summary))
    qtbot.wait(20)
    table = panel.table
    wide = table.rowHeight(1)
    assert wide == table.rowHeight(0)  # room for the whole name on one line
    panel.resize(300, 600)  # as narrow as it goes
    qtbot.waitUntil(lambda: table.rowHeight(1) > wide, timeout=2000)
    assert _shown_whole(table, 1)
    assert table.height() >= table.verticalHeader().length()
