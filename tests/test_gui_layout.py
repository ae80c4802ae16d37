"""The window's layout on small screens (issue 26): decision ids on one line, the token stream's height
at 1024x640, nothing cut at 1280x800. Offscreen, on the real model; no test relies on the model's words."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QFontMetrics, QWheelEvent
from PySide6.QtWidgets import QApplication, QTabWidget

from inspector.engine.records import decision_id_text
from inspector.gui.cost.view import CostView
from inspector.gui.engine_thread.analysis import CostMeasured
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.windows.detail import WindowDetail
from inspector.llama.cost_model import CostModel
from test_gui_support import make_window, part, run_to_end


def text_blocks(doc):
    """Every text block of ``doc`` (table cells included), in order."""
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


def decision_block(detail):
    """The Receipt pane's block holding the decision id (the one after the block "decision")."""
    blocks = list(text_blocks(detail.fields.document()))
    i = next(k for k, b in enumerate(blocks) if b.text() == "decision")
    return blocks[i + 1]


def test_a_decision_id_never_wraps_in_the_receipt_pane_and_is_elided_with_all_of_it_in_the_tooltip(qtbot, runtime,
                                                                                                  tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24, ngram_min=1)
    model = w.model
    window_detail = part(w, WindowDetail)
    tabs = part(w, QTabWidget, "views")
    run_to_end(qtbot, w)
    d = window_detail
    receipt = model.session.receipts[-1]
    full = decision_id_text(receipt.decision_id)
    assert len(full) >= 10
    tabs.setCurrentWidget(d)
    d.select_window(receipt.window_index)
    QApplication.processEvents()
    block = decision_block(d)
    assert block.text() == full and block.layout().lineCount() == 1
    # Narrow: the id is elided in the middle on one line, and the pane's tooltip holds all of it.
    fm = d.fields.fontMetrics()
    d.fields.setFixedWidth(160)
    QApplication.processEvents()
    block = decision_block(d)
    assert block.layout().lineCount() == 1 and "…" in block.text() and block.text() != full
    assert fm.horizontalAdvance(block.text()) <= d.decision_room()
    assert d.fields.toolTip() == f"decision {full}"
    d.fields.setMinimumWidth(0)
    d.fields.setMaximumWidth(16777215)
    d.fields.setFixedWidth(600)
    QApplication.processEvents()
    assert decision_block(d).text() == full and d.fields.toolTip() == ""


def layout_at(qtbot, w, width: int, height: int) -> None:
    """Resize ``w`` as a first start on a ``width`` x ``height`` screen does (its title bar left out)."""
    from inspector.gui.look.screen_fit import FRAME_ALLOWANCE

    w.resize(width, height - FRAME_ALLOWANCE)
    qtbot.waitExposed(w)
    for _ in range(3):
        QApplication.processEvents()


def test_the_token_stream_gets_half_the_height_at_1024x640_and_nothing_is_cut_at_1280x800(qtbot, runtime, tmp_path):
    """Issue 26: at 1024x640 the token stream showed two or three lines: on a first start the stream part
    gets half the right-hand height (the legend one line at 1280 px, two at most at 1024), and at 1280x800
    the tabs keep their room; a split the user dragged is kept."""
    w = make_window(qtbot, runtime, tmp_path)
    token_view = part(w, TokenView)
    tabs = part(w, QTabWidget, "views")
    stream = token_view.stream
    line = QFontMetrics(stream.document().defaultFont()).lineSpacing()  # a line of the stream's text
    layout_at(qtbot, w, 1024, 640)
    assert w.width() <= 1024 and w.height() <= 640
    assert stream.height() >= 7 * line, (stream.height(), line)
    assert tabs.height() >= 230
    legend = token_view.legend
    legend_line = legend.fontMetrics().lineSpacing()
    assert legend.heightForWidth(legend.width()) <= 2 * legend_line + 6
    layout_at(qtbot, w, 1280, 800)
    assert stream.height() >= 11 * line and tabs.height() >= 330
    assert legend.sizeHint().width() <= legend.width()  # one line
    for tab in range(tabs.count()):  # every tab's name whole
        assert tabs.tabBar().tabRect(tab).right() <= tabs.width(), tabs.tabText(tab)
    # The user's split wins from then on.
    w.ui.right_split.splitterMoved.emit(100, 1)
    w.ui.right_split.setSizes([150, 500])
    layout_at(qtbot, w, 1024, 640)
    assert w.ui.right_split.sizes()[0] < 200


def test_the_cost_model_tab_never_widens_the_window_past_1024_px_while_it_measures(qtbot, runtime, tmp_path):
    """Issue 54: with a curve shown, Measure's progress bar and Cancel beside the buttons made the window
    1,209 px wide on a 1024x640 screen."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    cost_view = part(w, CostView)
    tabs = part(w, QTabWidget, "views")
    layout_at(qtbot, w, 1024, 640)
    cv = cost_view
    tabs.setCurrentWidget(cv)
    cv.use_layout.setText("Use Q8_0 form")  # what a measured curve offers
    cv.use_layout.show()
    cv.use_draft_max.setText("Use draft max 15")
    cv.use_draft_max.show()
    QApplication.processEvents()
    assert w.minimumSizeHint().width() <= 1024
    assert model.commands.measure_cost()
    qtbot.waitUntil(lambda: cv.cancel.isVisible(), timeout=10_000)
    QApplication.processEvents()
    assert cv.busy.isVisible() and w.minimumSizeHint().width() <= 1024 and w.width() <= 1024, w.minimumSizeHint()
    cv.cancel.click()
    qtbot.waitUntil(lambda: not cv.busy.isVisible(), timeout=60_000)


def test_the_wheel_over_the_cost_plots_scrolls_the_tab_and_never_zooms_the_curve(qtbot, runtime, tmp_path):
    """Issue 54: at 1024x640 the wheel over the c(k) plot zoomed it (its axis read -5000 ms) instead of
    scrolling the tab's plots."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    cost_view = part(w, CostView)
    tabs = part(w, QTabWidget, "views")
    layout_at(qtbot, w, 1024, 640)
    cv = cost_view
    tabs.setCurrentWidget(cv)
    cv.set_cost_model(CostMeasured(CostModel(tuple(10.0 + 3 * k for k in range(16))), str(runtime.model_path), 2, 40))
    cv.refresh()
    QApplication.processEvents()
    bar = cv.plots.verticalScrollBar()
    assert bar.maximum() > 0, "the plots fit: nothing to scroll at this size"
    before = cv.cost_plot.getViewBox().viewRange()
    view = cv.layout_widget.viewport()
    centre = QPointF(view.rect().center())
    event = QWheelEvent(centre, QPointF(view.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, -120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(view, event)
    QApplication.processEvents()
    assert cv.cost_plot.getViewBox().viewRange() == before
    assert bar.value() > 0, "the wheel did not scroll the plots"
