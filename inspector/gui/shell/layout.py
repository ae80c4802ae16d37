"""The main window's widgets and their layout (``build_ui``, which returns them as a ``WindowUI``), and
how the token stream's share of the height is kept on small screens.

Right of the control panel: the banner, the token stream and the Next turn row above the tabs
(Windows, Conversation, KV timeline, ..., Cost model, Synthetic acceptance, Requests). On a first start (no saved splitter state) the split
between the stream and the tabs follows the window's height (``stream_split``): half of it for
the stream on a 1024x640 screen, at most ``STREAM_MAX`` px on a tall one, until the user drags the
handle (then the user's split is kept and remembered).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QLabel, QMainWindow, QProgressBar, QSplitter, QTabWidget, QVBoxLayout, QWidget

from inspector.gui.cost.synthetic_view import SyntheticView
from inspector.gui.cost.view import CostView
from inspector.gui.look.screen_fit import keep_on_screen
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.panel.widgets import ElidedLabel
from inspector.gui.plots.event_log import EventLog
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.gui.plots.timeline import Timeline
from inspector.gui.model.request_log import RequestLog
from inspector.gui.model.window_model import BUSY_PROGRESS, WindowModel
from inspector.gui.serve.requests_view import RequestsView
from inspector.gui.shell.banner import Banner
from inspector.gui.tokens.conversation_bar import ConversationBar
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.tokens.transcript_view import TranscriptView
from inspector.gui.windows.detail import WindowDetail

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


@dataclass(frozen=True)
class WindowUI:
    """The main window's widgets, as ``build_ui`` made and laid them out."""

    panel: ControlPanel
    """The side panel: model, prompt, source and its options, sampling, context, faults, run buttons."""
    banner: Banner
    """Above the tokens: hint, run status, finish, error (never hidden: the view below never jumps)."""
    token_view: TokenView
    """The token stream."""
    conversation_bar: ConversationBar
    """Next turn: continue the run as a conversation."""
    tabs: QTabWidget
    window_detail: WindowDetail
    transcript: TranscriptView
    timeline: Timeline
    lock_plots: LockPlots
    stats: StatsView
    event_log: EventLog
    cost_view: CostView
    synthetic_view: SyntheticView
    """Synthetic acceptance: would a better draft pay (the heatmap beside the Cost model tab)."""
    request_log: RequestLog
    """The served requests (``ServeActions`` fills it)."""
    requests: RequestsView
    session_views: tuple
    """The views shown the session (``set_session``): the one place a view is registered."""
    tab_views: tuple
    """The tabs redrawn only while shown (and all of them by ``refresh_all``)."""
    main_split: QSplitter
    right_split: QSplitter
    stream_split: StreamSplitKeeper
    status_state: ElidedLabel
    """The status line (a long error ends with "…", all of it in the tooltip)."""
    status_counts: QLabel
    status_speed: QLabel
    load_progress: "StatusProgress"


class StatusProgress(QProgressBar):
    """The status bar's progress bar: it follows the model's ``progressChanged`` (``show_progress``)."""

    def show_progress(self, value: int | None, maximum: int) -> None:
        """Show ``value`` of ``maximum`` (``BUSY_PROGRESS``: busy, no value), or hide the bar (None)."""
        if value is None:
            self.hide()
            return
        self.setRange(0, maximum)
        if maximum != BUSY_PROGRESS:
            self.setValue(value)
        self.show()


def build_ui(window: QMainWindow, model: WindowModel) -> WindowUI:
    """Make the panel, views, tabs, splitters and status bar of ``window`` (its central widget and status
    bar are set); ``model``: the window's model (its ``settings``, where the token view remembers its threshold,
    and its served ``requests``, the Requests tab's). The Conversation tab's turns come from its ``source``,
    which the conversation's helper sets."""
    settings = model.settings
    panel = ControlPanel()
    panel.setMinimumWidth(max(380, panel.minimumWidth()))
    banner = Banner()
    token_view = TokenView()
    token_view.use_settings(settings)  # the near-tie threshold is remembered
    window_detail = WindowDetail()
    timeline = Timeline()
    lock_plots = LockPlots()
    stats = StatsView()
    cost_view = CostView()
    synthetic_view = SyntheticView()
    event_log = EventLog()
    tabs = QTabWidget()
    tabs.setObjectName("views")
    tabs.addTab(window_detail, "Windows")
    transcript = TranscriptView()
    tabs.addTab(transcript, "Conversation")
    tabs.addTab(timeline, "KV timeline")
    tabs.addTab(lock_plots, "Lock timing")
    tabs.addTab(stats, "Statistics")
    tabs.addTab(event_log, "Event log")
    tabs.addTab(cost_view, "Cost model")
    tabs.addTab(synthetic_view, "Synthetic acceptance")
    request_log = model.requests
    requests = RequestsView(request_log)
    tabs.addTab(requests, "Requests")
    tabs.currentChanged.connect(lambda _i: tabs.currentWidget().refresh())

    top = QWidget()
    tl = QVBoxLayout(top)
    tl.setContentsMargins(0, 0, 0, 0)
    tl.addWidget(banner)
    tl.addWidget(token_view, 1)
    conversation_bar = ConversationBar()
    tl.addWidget(conversation_bar)
    right_split = QSplitter(Qt.Orientation.Vertical)
    right_split.addWidget(top)
    right_split.addWidget(tabs)
    right_split.setSizes(stream_split(760))
    keeper = StreamSplitKeeper(right_split)
    main_split = QSplitter(Qt.Orientation.Horizontal)
    main_split.addWidget(panel)
    main_split.addWidget(right_split)
    main_split.setSizes([panel.minimumWidth() + 4, 1280 - panel.minimumWidth() - 4])
    main_split.setStretchFactor(1, 1)
    window.setCentralWidget(main_split)

    status_state = ElidedLabel("")
    status_counts = QLabel("")
    status_counts.setObjectName("status-counts")
    # A fixed size: the counts change at every redraw and must not re-lay out the window.
    fm = status_counts.fontMetrics()
    status_counts.setFixedSize(fm.horizontalAdvance(STATUS_TEMPLATE), fm.height() + 2)
    status_counts.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    status_speed = QLabel("")  # live decode tokens/s of the session shown
    status_speed.setObjectName("status-speed")
    status_speed.setFixedSize(fm.horizontalAdvance(" 0000.0 tokens/s "), fm.height() + 2)
    status_speed.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    status_speed.setToolTip("decode tokens/s: generated tokens / decode time, prefill excluded")
    load_progress = StatusProgress()
    load_progress.setRange(0, 100)
    load_progress.setMaximumWidth(200)
    load_progress.hide()
    sb = window.statusBar()
    sb.addWidget(status_state, 1)
    sb.addWidget(load_progress)
    sb.addPermanentWidget(status_counts)
    sb.addPermanentWidget(status_speed)
    # A first start on a 1280x800 screen fits it, title bar included; a saved geometry wins later, and
    # it too is fitted to the screen at every show.
    keep_on_screen(window, 1280, 800)
    return WindowUI(
        panel=panel, banner=banner, token_view=token_view, conversation_bar=conversation_bar, tabs=tabs,
        window_detail=window_detail, transcript=transcript, timeline=timeline, lock_plots=lock_plots, stats=stats,
        event_log=event_log, cost_view=cost_view, synthetic_view=synthetic_view, request_log=request_log, requests=requests,
        session_views=(token_view, window_detail, timeline, lock_plots, stats, event_log, synthetic_view),
        tab_views=(transcript, timeline, lock_plots, stats, event_log, cost_view, synthetic_view, requests),
        main_split=main_split, right_split=right_split, stream_split=keeper, status_state=status_state,
        status_counts=status_counts, status_speed=status_speed, load_progress=load_progress)
