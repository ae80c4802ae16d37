"""The main window's widgets and their layout (``build_ui``), and how the token stream's share of
the height is kept on small screens.

Right of the control panel: the banner, the token stream and the Next turn row above the tabs
(Windows, Conversation, KV timeline, ..., Requests). On a first start (no saved splitter state) the split
between the stream and the tabs follows the window's height (``stream_split``): half of it for
the stream on a 1024x640 screen, at most ``STREAM_MAX`` px on a tall one, until the user drags the
handle (then the user's split is kept and remembered).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QSplitter, QTabWidget, QVBoxLayout, QWidget

from inspector.gui.cost.view import CostView
from inspector.gui.look.screen_fit import keep_on_screen
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.panel.widgets import ElidedLabel
from inspector.gui.plots.event_log import EventLog
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.gui.plots.timeline import Timeline
from inspector.gui.serve.request_log import RequestLog
from inspector.gui.serve.requests_view import RequestsView
from inspector.gui.shell.banner import Banner
from inspector.gui.tokens.conversation_bar import ConversationBar
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.tokens.transcript_view import TranscriptView
from inspector.gui.windows.detail import WindowDetail
from inspector.session.run_states import IDLE

STATUS_TEMPLATE = "000000 tokens · 00000 windows · 00000 plain steps · 0000 discards · canonical position 000000"
STREAM_SHARE = 0.5
"""Share of the right-hand height for the banner, token stream and Next turn row on a first start."""
STREAM_MAX = 340
"""Most pixels they get on a first start (a tall screen gives the rest to the tabs)."""


def stream_split(height: int) -> list[int]:
    """Sizes of (stream part, tabs) of a right-hand split ``height`` px high, on a first start."""
    top = min(int(height * STREAM_SHARE), STREAM_MAX)
    return [top, max(0, height - top)]


class StreamSplitKeeper(QObject):
    """Sets the right-hand split by ``stream_split`` at every resize until the user moves its handle
    (or a saved state is restored: ``stop``)."""

    def __init__(self, split: QSplitter) -> None:
        super().__init__(split)
        self.split = split
        self.active = True
        split.installEventFilter(self)
        split.splitterMoved.connect(lambda *_a: self.stop())

    def stop(self) -> None:
        """Keep the split as it is from now on."""
        self.active = False

    def eventFilter(self, obj, ev) -> bool:
        """A resize of the split while active: share its height again."""
        if self.active and obj is self.split and ev.type() == QEvent.Type.Resize:
            h = self.split.height() - self.split.handleWidth()
            if h > 0:
                self.split.setSizes(stream_split(h))
        return False


def transcript_source(win) -> tuple:
    """The Conversation tab's ``(records, shown, pickable)`` in ``win``: the conversation's turns (the
    running one included), or the shown run alone when it is no turn; a turn is picked only while idle."""
    shown = win.session
    records = win.turns.records()
    if shown not in records:
        records = [shown] if shown.header is not None or shown.document is not None else []
    return records, shown, win.state == IDLE


def build_ui(win) -> None:
    """Make ``win``'s (the ``MainWindow``'s) panel, views, tabs, splitters and status bar."""
    win.panel = ControlPanel()
    win.panel.setMinimumWidth(max(380, win.panel.minimumWidth()))

    win.banner = Banner()  # always shown (hint, run status, finished, error): the view below never jumps
    win.token_view = TokenView()
    win.token_view.use_settings(win.settings)  # the near-tie threshold is remembered
    win.window_detail = WindowDetail()
    win.timeline = Timeline()
    win.lock_plots = LockPlots()
    win.stats = StatsView()
    win.cost_view = CostView()
    win.event_log = EventLog()
    win.tabs = QTabWidget()
    win.tabs.addTab(win.window_detail, "Windows")
    win.transcript = TranscriptView(lambda: transcript_source(win))
    win.transcript.turnChosen.connect(lambda i: win.turns.show_turn(i))
    win.tabs.addTab(win.transcript, "Conversation")
    win.tabs.addTab(win.timeline, "KV timeline")
    win.tabs.addTab(win.lock_plots, "Lock timing")
    win.tabs.addTab(win.stats, "Statistics")
    win.tabs.addTab(win.event_log, "Event log")
    win.tabs.addTab(win.cost_view, "Cost model")
    win.request_log = RequestLog()  # the served requests (``ServeActions`` fills it)
    win.requests = RequestsView(win.request_log)
    win.tabs.addTab(win.requests, "Requests")
    # The one place a view is registered: ``session_views`` are shown the session (``set_session``);
    # ``tab_views`` are redrawn only while their tab is shown (and all of them by ``refresh_all``).
    win.session_views = (win.token_view, win.window_detail, win.timeline, win.lock_plots, win.stats, win.event_log)
    win.tab_views = (win.transcript, win.timeline, win.lock_plots, win.stats, win.event_log, win.cost_view,
                     win.requests)
    win.token_view.windowClicked.connect(win.show_window)
    win.tabs.currentChanged.connect(lambda _i: win.tabs.currentWidget().refresh())

    top = QWidget()
    tl = QVBoxLayout(top)
    tl.setContentsMargins(0, 0, 0, 0)
    tl.addWidget(win.banner)
    tl.addWidget(win.token_view, 1)
    win.conversation_bar = ConversationBar()  # Next turn: continue the run as a conversation
    tl.addWidget(win.conversation_bar)
    win.right_split = QSplitter(Qt.Orientation.Vertical)
    win.right_split.addWidget(top)
    win.right_split.addWidget(win.tabs)
    win.right_split.setSizes(stream_split(760))
    win.stream_split = StreamSplitKeeper(win.right_split)
    win.main_split = QSplitter(Qt.Orientation.Horizontal)
    win.main_split.addWidget(win.panel)
    win.main_split.addWidget(win.right_split)
    win.main_split.setSizes([win.panel.minimumWidth() + 4, 1280 - win.panel.minimumWidth() - 4])
    win.main_split.setStretchFactor(1, 1)
    win.setCentralWidget(win.main_split)

    win.status_state = ElidedLabel("")  # a long error ends with "…" (all of it in the tooltip)
    win.status_counts = QLabel("")
    # A fixed size: the counts change at every redraw and must not re-lay out the window.
    fm = win.status_counts.fontMetrics()
    win.status_counts.setFixedSize(fm.horizontalAdvance(STATUS_TEMPLATE), fm.height() + 2)
    win.status_counts.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    win.status_speed = QLabel("")  # live decode tokens/s of the session shown
    win.status_speed.setFixedSize(fm.horizontalAdvance(" 0000.0 tokens/s "), fm.height() + 2)
    win.status_speed.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    win.status_speed.setToolTip("decode tokens/s: generated tokens / decode time, prefill excluded")
    win.load_progress = QProgressBar()
    win.load_progress.setRange(0, 100)
    win.load_progress.setMaximumWidth(200)
    win.load_progress.hide()
    sb = win.statusBar()
    sb.addWidget(win.status_state, 1)
    sb.addWidget(win.load_progress)
    sb.addPermanentWidget(win.status_counts)
    sb.addPermanentWidget(win.status_speed)
    # A first start on a 1280x800 screen fits it, title bar included; a saved geometry wins later, and
    # it too is fitted to the screen at every show.
    keep_on_screen(win, 1280, 800)

