"""Acceptance statistics (``inspector.engine.stats`` definitions, stated in the view).

Figures: acceptance rate (accepted / proposed over verified windows), mean
accepted length (1 + accepted / windows, tokens per window), acceptance by
proposal position, dispositions, decode tokens per second (generated /
decode time, prefill excluded). Computed from receipts only, so
branch-conditioned predictions never reach them. After a comparison with
plain decoding: whether the outputs are identical (or where they first
differ, with the target's top-2 logit margin), plain decode tokens/s and the
observed speedup (speculative / plain decode tokens/s).

Per-row probabilities (issue 15, ``inspector.engine.probability_stats``, judged
proposal tokens only: the accepted ones and a window's first mismatch): the
mean target probability of the proposed token beside each position's bar,
acceptance against that probability in bins of 0.1 with the judged count of
each bin, and for draft sources the same against the draft's q (calibration:
the dashed diagonal). A run without figures (turned off, a schema v1 file)
shows a sentence saying so in place of those charts.

With no verified window (e.g. max tokens 1, or a source that proposed
nothing) every step was plain: the per-window figures and both speedups say
"n/a" (a measured ratio of two plain runs is timing noise, not a speedup; it
is named as such), and the charts are empty on a 0..1 axis.

All of that is the Summary page; the By KV position page (``inspector.gui.plots.positions``) draws the
run's windows and plain steps against the KV position at which each ran (issue 39, long contexts).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from inspector.engine.probability_stats import DRAFT, TARGET, acceptance_by_probability, has_probabilities, \
    probability_by_position
from inspector.engine.no_proposal import ENGINE_REASONS, count_reasons
from inspector.engine.profit import OwnC1, run_balance
from inspector.engine.records import Summary
from inspector.gui.plots.positions import PositionsView
from inspector.gui.plots.probability import TITLE_SIZE, AcceptancePlot, no_figures_reason
from inspector.session.session_record import SessionRecord
from inspector.session.tree_verdict import tree_versus_chain
from inspector.gui.plots.timeline import IntegerAxis
from inspector.gui.look.wording import count_noun
from inspector.sources.registry import PLAIN, describe_source

DISPOSITIONS = ("full_accept", "first_mismatch", "stopped")
DISPOSITION_TICKS = ("full", "mismatch", "stopped")
"""The bars' names under the chart, in ``DISPOSITIONS`` order."""
DISPOSITION_BRUSH = ("#66bb6a", "#ffa726", "#9575cd")
SHARE_BRUSH = "#42a5f5"
MEAN_P_BRUSH = "#26a69a"
POSITION_TITLE = (f'<span style="color:{SHARE_BRUSH}">■</span> accepted share '
                  f'<span style="color:{MEAN_P_BRUSH}">■</span> mean target p')
DISPOSITION_TICK_PT = 8
"""Point size of the dispositions' names under their bars."""
FORM_MAX_WIDTH = 330
"""The figures' column at most (pixels): the charts get the rest (two per row at 1280x800)."""
PLOT_MIN = (160, 105)
"""Smallest chart (pixels): layouts may shrink a chart this far (titles are short enough)."""


BALANCE_TIP = ("each window's time against plain decoding of the tokens it committed: committed × c(1) − "
               "(proposal + verification + repair); c(1) is the median plain step of this run, else the cost model's")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _gives_draft_probabilities(source: str | None) -> bool:
    """The source declares ``draft_probabilities`` (its receipts can carry q); False for an unknown or
    broken source."""
    try:
        return describe_source(source or PLAIN).gives_draft_probabilities
    except Exception:  # noqa: BLE001 - an unknown source, or a plugin that fails to import: no q plot
        return False

class StatsView(QWidget):
    """Summary figures and the charts: by proposal position (with the mean target p), by
    disposition, acceptance against the target's p of the proposed token, and (draft sources)
    against the draft's q."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self._drawn_version = -1
        self._q_source: tuple[str | None, bool] = ("", False)
        """(source name, it declares draft probabilities): the last source asked."""
        self._reasons_counted = 0
        self.reasons: Counter = Counter()
        self.summary: Summary | None = None
        self.cost_model = None
        self._own_c1 = OwnC1()
        """The ``CostModel`` of the loaded model (``set_cost_model``), or None."""
        self.expected_speedup: float | None = None
        self.observed_speedup: float | None = None
        """Shown speedups (x); ``observed_estimated``: the observed one is an estimate (no baseline)."""
        self.observed_estimated = False
        # Two pages: the run's figures and charts (Summary), and the same run against the KV position at
        # which each window and plain step ran (By KV position, issue 39: long contexts). A button on each
        # page shows the other (a tab bar would take the height or width the charts need on a small screen).
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.pages = QStackedWidget()
        summary = QWidget()
        self.pages.addWidget(summary)
        self.positions = PositionsView()
        """The By KV position page (``inspector.gui.plots.positions``)."""
        self.pages.addWidget(self.positions)
        self.to_positions = QPushButton("By KV position ▸")
        self.to_positions.setToolTip("acceptance, c(1), verify cost per row and profit of each window against the "
                                     "KV position it ran at, and where the windows stopped paying")
        self.to_positions.clicked.connect(lambda: self.pages.setCurrentWidget(self.positions))
        back = QPushButton("◂ Summary")
        back.setToolTip("the run's figures and charts")
        back.clicked.connect(lambda: self.pages.setCurrentWidget(summary))
        self.positions.add_to_top(back)
        self.pages.currentChanged.connect(lambda _i: self.positions.refresh())
        outer.addWidget(self.pages)
        lay = QHBoxLayout(summary)
        lay.setContentsMargins(4, 4, 4, 4)
        form_box = QWidget()
        form = QFormLayout(form_box)
        # A value that does not fit beside its name goes under it (small screens), never cut.
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.labels: dict[str, QLabel] = {}
        form.addRow(self.to_positions)
        for key, label, tip in (
            ("windows", "windows", "verified proposal windows (receipts)"),
            ("plain_steps", "plain steps", "one-token decode steps without a proposal, by the reason the engine "
                                           "or the source gave (hover the figure for their meanings)"),
            ("discards", "discards", "proposals that produced no receipt"),
            ("balance", "windows vs plain", BALANCE_TIP),
            ("generated", "generated tokens", ""),
            ("acceptance", "acceptance rate", "accepted proposal tokens / proposed tokens, over verified windows"),
            ("mean_len", "mean accepted length", "1 + accepted / windows: tokens committed per window"),
            ("dispositions", "dispositions", ""),
            ("tps", "decode tokens/s", "generated tokens / decode time (prefill excluded)"),
            ("prefill", "prefill", ""),
            ("finish", "finish reason", ""),
            ("baseline", "baseline", "the same prompt and sampling decoded one token per step (Run: "
                                     "“Compare with plain decoding”)"),
            ("plain_tps", "plain decode tokens/s", "the plain run's generated tokens / decode time"),
            ("expected", "expected speedup", "what the cost model predicts for these windows: tokens · c(1) / "
                                             "(Σ c(verification rows) over windows + plain steps · c(1))"),
            ("observed", "observed speedup", "speculative / plain decode tokens/s (measured with “Compare with "
                                             "plain decoding”; else estimated as decode tokens/s ÷ (1000 / c(1)))"),
            ("tree", "tree or chain", "for a run with tree windows: what the trees committed and cost against "
                                      "what each tree's first branch alone would have, from the same rows' "
                                      "predictions, priced on the cost model"),
        ):
            lab = QLabel("—")
            lab.setWordWrap(True)  # the column is at most FORM_MAX_WIDTH wide
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            name = QLabel(label)
            name.setToolTip(tip)
            lab.setToolTip(tip)
            form.addRow(name, lab)
            self.labels[key] = lab
        defs = QLabel("<small>acceptance rate = accepted / proposed · mean accepted length = 1 + accepted / windows"
                      " · by position i = windows that accepted index i / windows whose proposal had index i"
                      " · judged = accepted proposal tokens and each first mismatch (the probability charts"
                      " count judged tokens only)</small>")
        defs.setWordWrap(True)
        form.addRow(defs)
        # In a scroll area: on a short screen the figures scroll instead of making the tabs taller
        # than the window leaves them (the token stream above keeps its height).
        form_scroll = QScrollArea()
        form_scroll.setWidget(form_box)
        form_scroll.setWidgetResizable(True)
        form_scroll.setFrameShape(QFrame.Shape.NoFrame)
        form_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        form_scroll.setMaximumWidth(FORM_MAX_WIDTH)
        self.form_scroll = form_scroll
        lay.addWidget(form_scroll, 2)

        charts = QVBoxLayout()
        top = QHBoxLayout()
        self.by_pos = pg.PlotWidget(background="w", axisItems={"bottom": IntegerAxis("bottom")})
        self.by_pos.setTitle(POSITION_TITLE, size="8pt")
        self.by_pos.setToolTip("blue: windows that accepted index i / windows whose proposal had index i\n"
                               "teal: the mean target probability of the proposed token at i, over judged "
                               "tokens (accepted, or the first mismatch)")
        self.by_pos.setLabel("bottom", "proposal position (1-based)")
        self.by_pos.setLabel("left", "share / p")
        self.by_pos.setYRange(0, 1.05)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=SHARE_BRUSH)
        self.by_pos.addItem(self.pos_bars)
        self.pos_p_bars = pg.BarGraphItem(x=[], height=[], width=0.4, brush=MEAN_P_BRUSH)
        self.by_pos.addItem(self.pos_p_bars)
        self.disp = pg.PlotWidget(background="w", axisItems={"left": IntegerAxis("left")})
        self.disp.setTitle("Dispositions (windows)", size=TITLE_SIZE)  # no axis label: room for the names
        # Short names under the bars (the three fit side by side in a small chart); the full ones in the tooltip.
        self.disp.getAxis("bottom").setTicks([[(i, d) for i, d in enumerate(DISPOSITION_TICKS)]])
        self.disp.setToolTip("windows by disposition: full = full_accept, mismatch = first_mismatch, stopped")
        tick_font = QFont()
        tick_font.setPointSize(DISPOSITION_TICK_PT)  # the three names fit side by side in half the width
        self.disp.getAxis("bottom").setStyle(tickFont=tick_font)
        self.disp_bars = pg.BarGraphItem(x=list(range(3)), height=[0, 0, 0], width=0.6, brushes=list(DISPOSITION_BRUSH))
        self.disp.addItem(self.disp_bars)
        top.addWidget(self.by_pos, 1)
        top.addWidget(self.disp, 1)
        charts.addLayout(top, 1)

        # Acceptance against probability; a sentence instead when the run has no figures.
        self.prob_stack = QStackedWidget()
        page = QWidget()
        row = QHBoxLayout(page)
        row.setContentsMargins(0, 0, 0, 0)
        self.vs_p = AcceptancePlot(
            "Acceptance vs target p", "target p of the proposed token",
            "judged proposal tokens binned by the target's probability of the proposed token; bar: accepted / "
            "judged, label: judged tokens in the bin\ndashed: accepted with probability p (what sampling gives; "
            "greedy accepts exactly the argmax, so bins above 0.5 reach 1)")
        self.vs_q = AcceptancePlot(
            "Acceptance vs draft q", "draft q of the proposed token",
            "judged proposal tokens binned by the draft model's probability q of the proposed token; bar: "
            "accepted / judged, label: judged tokens in the bin\ndashed: a calibrated draft (accepted as often "
            "as it was sure)", brush="#ab47bc")
        self.vs_q.hide()
        for plot in (self.by_pos, self.disp, self.vs_p, self.vs_q):
            plot.setMinimumSize(*PLOT_MIN)
        row.addWidget(self.vs_p, 1)
        row.addWidget(self.vs_q, 1)
        self.prob_stack.addWidget(page)
        self.no_figures = QLabel("")
        self.no_figures.setWordWrap(True)
        self.no_figures.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_figures.setStyleSheet("color:#555;background:#fafafa;border:1px solid #ddd;padding:12px")
        self.prob_stack.addWidget(self.no_figures)
        charts.addWidget(self.prob_stack, 1)
        lay.addLayout(charts, 3)

    def no_figures_text(self) -> str:
        """The sentence shown instead of the probability charts, "" when the charts are shown."""
        return self.no_figures.text() if self.prob_stack.currentWidget() is self.no_figures else ""

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self.positions.set_session(session)
        self._drawn_version = -1
        self._reasons_counted = 0
        self._c1_key = None
        self.reasons: Counter = Counter()
        """Plain steps by reason code (``inspector.engine.no_proposal``), counted as events arrive."""

    def _count_reasons(self, s: SessionRecord) -> None:
        """Add the reasons of ``s``'s events not counted yet (events only grow within a session)."""
        done = self._reasons_counted
        if len(s.events) < done:  # a record that started again
            done, self.reasons = 0, Counter()
        if len(s.events) > done:
            self.reasons.update(count_reasons(s.events[done:]))
            self._reasons_counted = len(s.events)

    def _own_c1_us(self, s: SessionRecord) -> float | None:
        """The run's median plain step (``OwnC1``: computed again only when lock operations arrived)."""
        return self._own_c1.of(id(s), s.lock_ops, s.main_session_id)

    def _plain_steps_text(self, s: SessionRecord, plain_steps: int) -> tuple[str, str]:
        """(the plain steps figure with its reasons, the tooltip with their meanings)."""
        self._count_reasons(s)
        shown = {k: n for k, n in self.reasons.most_common() if k}
        if not shown:
            return str(plain_steps), "one-token decode steps without a proposal"
        meanings = dict(ENGINE_REASONS)
        try:
            meanings.update(describe_source(s.source_name or PLAIN).reasons)
        except ValueError:  # an unknown or broken source: its codes without words
            pass
        text = f"{plain_steps}: " + ", ".join(f"{n} {k}" for k, n in shown.items())
        tip = "Why these steps ran without a proposal:\n" + "\n".join(
            f"{n} {k}: {meanings.get(k, '(not declared by the source)')}" for k, n in shown.items())
        return text, tip

    def _probability_figures(self, s: SessionRecord) -> tuple:
        """(per position, vs target p, vs draft q, has draft q) of ``s``'s receipts, computed again only
        when a receipt arrived: the record's version moves with every token, its receipts do not."""
        key = (id(s), len(s.receipts))
        if getattr(self, "_figures_key", None) != key:
            r = s.receipts
            self._figures = (probability_by_position(r), acceptance_by_probability(r, self.vs_p.edges, TARGET),
                             acceptance_by_probability(r, self.vs_q.edges, DRAFT), has_probabilities(r, DRAFT))
            self._figures_key = key
        return self._figures

    def set_cost_model(self, cost_model) -> None:
        """Use ``cost_model`` (``inspector.llama.cost_model.CostModel`` or None) for the expected speedup (and
        the By KV position page's profits when the run has no plain step)."""
        self.cost_model = cost_model
        self._drawn_version = -1
        self.positions.set_cost_model(cost_model)

    def refresh(self) -> None:
        if self.pages.currentWidget() is self.positions or not self.isVisible():
            self.positions.refresh()  # the page shown (or every page: an export, the tests)
        s = self.session
        if s is None or s.version == self._drawn_version:
            return
        self._drawn_version = s.version
        m = s.summary()
        self.summary = m
        L = self.labels
        L["windows"].setText(str(m.windows))
        text, tip = self._plain_steps_text(s, m.plain_steps)
        L["plain_steps"].setText(text)
        L["plain_steps"].setToolTip(tip)
        L["discards"].setText(str(m.discards))
        cm = self.cost_model
        b = run_balance(s.receipts, self._own_c1_us(s), None if cm is None else cm.cost(1) * 1000)
        if b is None:
            L["balance"].setText("n/a (no windows yet)" if not s.receipts else
                                 "n/a (no plain step and no cost model to give c(1))")
            L["balance"].setToolTip(BALANCE_TIP)
        else:
            L["balance"].setText(b.short_text())
            L["balance"].setToolTip(f"{b.text()}\n\n{BALANCE_TIP}")
        L["generated"].setText(str(m.generated_tokens))
        L["acceptance"].setText("n/a (no windows)" if not m.windows else
                                f"{_pct(m.acceptance_rate)}  ({m.accepted_tokens} / {m.proposed_tokens})")
        L["mean_len"].setText("n/a (no windows)" if not m.windows or m.mean_accepted_length is None else
                              f"{m.mean_accepted_length:.2f} tokens per window")
        L["dispositions"].setText("n/a (no windows)" if not m.windows else
                                  ", ".join(f"{k} {m.dispositions.get(k, 0)}" for k in DISPOSITIONS))
        L["tps"].setText("n/a" if m.decode_tokens_per_s is None else f"{m.decode_tokens_per_s:.1f}")
        L["prefill"].setText(f"{m.prefill_elapsed_us / 1000:.0f} ms ({count_noun(s.prompt_token_count, 'prompt token')})")
        ended = s.ended_as if s.ended_as != "error" else None
        live = "— (not finished: running)" if s.header is not None else "— (no run yet)"
        if s.ended_as == "error" or (s.errors and s.end is None):
            live = "— (stopped by an error: Resume continues it)"
        L["finish"].setText(m.finish_reason or ended or (live if s.origin == "live" else "unfinished"))
        self._show_baseline(s.baseline)
        self._show_speedups(s, m)
        self._draw_charts(m)
        self._draw_probabilities(s)

    def _draw_charts(self, m: Summary) -> None:
        """Both bar charts, on axes that fit their bars (0..1 windows when there are none)."""
        by_pos = [0.0 if v is None else v for v in m.acceptance_by_position] if m.windows else []
        n = len(by_pos)
        s = self.session
        mean_p = [f.mean_p for f in self._probability_figures(s)[0]] if s is not None and m.windows else []
        x = np.arange(1, n + 1, dtype=float)
        if any(p is not None for p in mean_p):  # the mean target p beside each position's share
            heights = np.array([(mean_p[i] if i < len(mean_p) else None) or 0.0 for i in range(n)], float)
            self.pos_bars.setOpts(x=x - 0.2, height=np.array(by_pos, float), width=0.4)
            self.pos_p_bars.setOpts(x=x + 0.2, height=heights, width=0.4)
        else:
            self.pos_bars.setOpts(x=x, height=np.array(by_pos, float), width=0.7)
            self.pos_p_bars.setOpts(x=[], height=[], width=0.4)
        self.by_pos.setXRange(0.5, max(n, 1) + 0.5, padding=0)
        self.by_pos.setYRange(0, 1.05, padding=0)
        heights = [m.dispositions.get(k, 0) for k in DISPOSITIONS]
        self.disp_bars.setOpts(height=heights)
        self.disp.setXRange(-0.5, len(DISPOSITIONS) - 0.5, padding=0)
        self.disp.setYRange(0, max(1, max(heights)) * 1.05, padding=0)

    def _draw_probabilities(self, s: SessionRecord) -> None:
        """Acceptance against the target's p (and the draft's q for draft sources), or the sentence
        saying why the run has no figures."""
        why = no_figures_reason(s)
        if why is not None:
            if self.no_figures.text() != why:
                self.no_figures.setText(why)
            self.prob_stack.setCurrentWidget(self.no_figures)
            return
        self.prob_stack.setCurrentIndex(0)
        _by_position, vs_p, vs_q, has_q = self._probability_figures(s)
        self.vs_p.draw(vs_p)
        if self._q_source[0] != s.source_name:  # asked once per source: describing one reads the entry points
            self._q_source = (s.source_name, _gives_draft_probabilities(s.source_name))
        draft = has_q or self._q_source[1]
        if draft == self.vs_q.isHidden():
            self.vs_q.setVisible(draft)
        if draft:
            self.vs_q.draw(vs_q)

    def _show_baseline(self, b: dict | None) -> None:
        L = self.labels
        if not b:
            L["baseline"].setText("not run")
            L["baseline"].setStyleSheet("")  # not the color of an earlier session's result
            L["plain_tps"].setText("—")
            return
        d = b.get("divergence")
        if d is None:
            L["baseline"].setText(f"identical to plain decoding ({count_noun(len(b.get('plain_token_ids', [])), 'token')})")
            L["baseline"].setStyleSheet("color:#1b5e20")
        else:
            def tok(key):
                t = d[key]
                text = d.get(key.replace("_token", "_text"))
                return "(ended)" if t < 0 else f"{text!r} ({t})" if text is not None else str(t)

            L["baseline"].setText(f"diverges at generated token {d['index']}: plain {tok('plain_token')}, "
                                  f"speculative {tok('speculative_token')}; top-2 margin {float(d['margin']):.4f} logits")
            L["baseline"].setStyleSheet("color:#c62828")
        tps = b.get("plain_decode_tokens_per_s")
        L["plain_tps"].setText("n/a" if tps is None else f"{tps:.1f}")

    def _show_speedups(self, s: SessionRecord, m: Summary) -> None:
        """Expected speedup (cost model over the receipts) beside the observed one (baseline, else estimate)."""
        L = self.labels
        cm = self.cost_model
        versus = tree_versus_chain(s.receipts, cm)
        L["tree"].setText("n/a (no tree windows)" if versus is None else versus.text())
        self.expected_speedup = None
        self.observed_speedup, self.observed_estimated = None, False
        if not m.windows:  # nothing was verified: a speedup of speculation has no meaning
            why = "no windows yet" if s.origin == "live" and m.finish_reason is None else \
                "no windows: every decode step was plain"
            L["expected"].setText("n/a — measure the cost model (Cost model tab)" if cm is None else f"n/a ({why})")
            measured = (s.baseline or {}).get("observed_speedup")
            L["observed"].setText(f"n/a ({why})" if measured is None else
                                  f"n/a ({why}; the measured {measured:.2f}x compares two plain runs: timing noise)")
            return
        if cm is None:
            L["expected"].setText("n/a — measure the cost model (Cost model tab)")
        else:
            self.expected_speedup = cm.expected_speedup(
                [(r.decoded_rows, r.canonical_prediction_count) for r in s.receipts], m.plain_steps)
            L["expected"].setText("n/a (no decode steps yet)" if self.expected_speedup is None else
                                  f"{self.expected_speedup:.2f}x (cost model, c(1) = {cm.row_ms[0]:.1f} ms)")
        b = s.baseline or {}
        self.observed_speedup, self.observed_estimated = b.get("observed_speedup"), False
        if self.observed_speedup is not None:
            L["observed"].setText(f"{self.observed_speedup:.2f}x (measured against the plain run)")
        elif m.decode_tokens_per_s and (own := self._own_c1_us(s)) is not None:
            # c(1) from this run's own plain steps: the same machine load as its windows (a stored cost
            # model measured on a quiet machine would make a busy run look many times slower)
            self.observed_speedup, self.observed_estimated = m.decode_tokens_per_s * own / 1e6, True
            L["observed"].setText(f"≈ {self.observed_speedup:.2f}x (estimate: decode tokens/s × c(1) of this "
                                  f"run's plain steps, {own / 1000:.1f} ms; “Compare with plain decoding” measures it)")
        elif cm is not None and m.decode_tokens_per_s:
            self.observed_speedup, self.observed_estimated = m.decode_tokens_per_s * cm.row_ms[0] / 1000.0, True
            L["observed"].setText(f"≈ {self.observed_speedup:.2f}x (estimate: decode tokens/s ÷ 1000/c(1); "
                                  "“Compare with plain decoding” measures it)")
        else:
            L["observed"].setText("n/a — “Compare with plain decoding” measures it")
