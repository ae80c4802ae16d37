"""The target's probabilities in the window (issue 15): the token hover, the rows table's figure
columns, the near-tie mark and its remembered threshold, and a schema-v1 file.

Runs are short (16 tokens) on the bundled model; the figures are compared with the session
record's own (``SessionRecord.token_probabilities``, the receipts' ``probabilities``), never
with the model's particular words or numbers. The source follows the target's own continuation
(``scenarios.Follower``): accepted tokens and corrections whatever the model says."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QItemSelectionModel

from inspector.engine.probabilities import DEFAULT_NEAR_TIE_MARGIN
from inspector.gui.look import outcomes as O
from inspector.gui.look.table_copy import selected_rows_text
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.tokens.token_figures import margin_text, probability_text, quoted
from inspector.gui.tokens.token_view import NEAR_TIE_KEY, TokenView
from inspector.gui.windows.detail import WindowDetail
from inspector.gui.windows.verification_rows import FIGURE_COLUMNS, ROW_HEADERS
from test_gui_support import make_window, open_receipts, part, run_to_end, use_source

MAX_TOKENS = 16
V1_FILE = Path(__file__).parent / "data" / "receipts-v1.json"


def _run(qtbot, monkeypatch, runtime, tmp_path):
    """A window after a 16-token run whose source proposes the target's own continuation with a
    surely rejected token every other window (``scenarios.Follower``, ``ALTERNATE``), end of
    generation banned: accepted tokens and corrections whatever the model says."""
    from scenarios import ALTERNATE, Follower, NoEndOfTurn

    holder = {}

    def factory(ctx, **options):  # on the engine thread; a short reference: 16 tokens need no more
        return Follower(holder["w"].worker.scheduler, ALTERNATE, prompt=holder["prompt"], horizon=MAX_TOKENS + 4)

    use_source(monkeypatch, "follow", factory)
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, max_tokens=MAX_TOKENS)
    model = w.model
    panel = part(w, ControlPanel)
    holder["w"] = w
    holder["prompt"] = runtime.prompt_tokens(panel.prompt.toPlainText())
    assert panel.set_source("follow")
    run_to_end(qtbot, w)
    assert model.session.receipts, "the follow source proposes at the first query"
    return w


def _expected_marks(s, threshold: float) -> list[int]:
    return [t.index for t in s.tokens
            if (p := s.token_probabilities(t)) is not None and p.margin < threshold and t.index != s.divergence_index]


def test_hover_names_the_rows_p_rank_and_top_five(qtbot, monkeypatch, runtime, tmp_path):
    w = _run(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    token_view = part(w, TokenView)
    s, view = model.session, token_view
    assert all(s.token_probabilities(t) is not None for t in s.tokens), "every committed token has its row's figures"
    seen = set()
    for t in s.tokens:
        p = s.token_probabilities(t)
        tip = view.tooltip(t.index)
        # The existing lines stay.
        assert f"predicted (committed): {quoted(t.text)} ({t.token})" in tip
        assert "target's figures" in tip and "softmax of the logits, T=0" in tip
        assert f"predicted {quoted(s.text_of(p.predicted))} p={probability_text(p.predicted_p)}" in tip
        assert p.predicted == t.token
        if p.proposed is not None:
            assert f"proposed {quoted(s.text_of(p.proposed))} p={probability_text(p.proposed_p)} " \
                   f"(rank {p.proposed_rank})" in tip
        assert f"entropy {p.entropy:.3f} nats" in tip and f"margin {margin_text(p.margin)} logits" in tip
        assert len(p.top) == 5
        for tok, prob in p.top:
            assert f"{quoted(s.text_of(tok))} ({tok})" in tip and f"&nbsp;{probability_text(prob)}</td>" in tip
        assert ("near-tie" in tip) == (p.margin < DEFAULT_NEAR_TIE_MARGIN)
        seen.add(t.outcome)
    assert {O.ACCEPTED, O.CORRECTION} <= seen
    # An accepted token at T=0 was the target's top choice; a correction's proposed token was not.
    acc = next(t for t in s.tokens if t.outcome == O.ACCEPTED)
    assert s.token_probabilities(acc).proposed_rank == 1
    cor = next(t for t in s.tokens if t.outcome == O.CORRECTION)
    assert s.token_probabilities(cor).proposed_rank > 1


def test_rows_table_shows_the_selected_windows_figures_and_copies_them(qtbot, monkeypatch, runtime, tmp_path):
    w = _run(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    window_detail = part(w, WindowDetail)
    d = window_detail
    assert ROW_HEADERS[FIGURE_COLUMNS:] == ("p(proposed)", "rank", "p(target)", "margin")
    tips = [d.rows.horizontalHeaderItem(c).toolTip() for c in range(FIGURE_COLUMNS, len(ROW_HEADERS))]
    assert "0..1" in tips[0] and "logits" in tips[3]
    for r in model.session.receipts:
        p = r.probabilities
        d.select_window(r.window_index)
        assert d.rows.rowCount() == r.verification_rows >= p.rows
        for i in range(r.verification_rows):
            if i >= p.rows:  # after the first mismatch: never judged, no figures
                assert [d.rows.item(i, c).text() for c in range(FIGURE_COLUMNS, FIGURE_COLUMNS + 4)] == [""] * 4
                continue
            cells = [d.rows.item(i, c).text() for c in range(FIGURE_COLUMNS, FIGURE_COLUMNS + 4)]
            rank = p.proposed_rank[i]
            assert cells == [probability_text(p.proposed_p[i]), "—" if rank is None else str(rank),
                             probability_text(p.predicted_p[i]), margin_text(p.margin[i])]
        if r.disposition == "full_accept":
            assert d.rows.item(p.rows - 1, FIGURE_COLUMNS).text() == "—"  # the bonus row has no proposal token
        assert d.rows.item(0, 5).text()  # the outcome column stays where it was
    # Shown (and copied) before the outcome, which stays last; the cells keep their columns.
    shown = sorted(range(len(ROW_HEADERS)), key=d.rows.horizontalHeader().visualIndex)
    assert shown == [0, 1, 2, 3, 4, 6, 7, 8, 9, 5]
    # Ctrl+C's text: every column in the order shown, the figures included.
    d.rows.selectionModel().select(d.rows.model().index(0, 0), QItemSelectionModel.SelectionFlag.ClearAndSelect
                                   | QItemSelectionModel.SelectionFlag.Rows)
    lines = selected_rows_text(d.rows).splitlines()
    assert lines[0].split("\t") == [ROW_HEADERS[c] for c in shown]
    assert lines[1].split("\t") == [d.rows.item(0, c).text() for c in shown]


def test_near_tie_threshold_marks_tokens_and_is_remembered(qtbot, monkeypatch, runtime, tmp_path):
    w = _run(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    token_view = part(w, TokenView)
    s, view = model.session, token_view
    assert view.near_tie_spin.value() == DEFAULT_NEAR_TIE_MARGIN
    assert view.near_tie_marks() == _expected_marks(s, DEFAULT_NEAR_TIE_MARGIN)
    view.near_tie_spin.setValue(10.0)
    assert view.near_tie_marks() == _expected_marks(s, 10.0)
    assert view.near_tie_marks(), "some row of 16 tokens has a margin below 10 logits"
    view.near_tie_spin.setValue(0.0)
    assert view.near_tie_marks() == []
    # A value in between restyles only the tokens that change, and a full redraw agrees.
    middle = sorted(s.token_probabilities(t).margin for t in s.tokens)[len(s.tokens) // 2]
    view.set_near_tie_margin(round(middle, 1))
    marks = view.near_tie_marks()
    assert marks == _expected_marks(s, round(middle, 1))
    view.set_session(s)
    assert view.near_tie_marks() == marks
    assert token_view.stream.toPlainText() == "".join(t.shown for t in s.tokens)  # the mark adds no text
    view.near_tie_spin.setValue(3.7)
    w.close()
    again = make_window(qtbot, None, tmp_path)  # same settings file
    again_model = again.model
    again_token_view = part(again, TokenView)
    assert again_token_view.near_tie_spin.value() == 3.7
    assert again_token_view.near_tie_margin == 3.7
    assert float(again_model.settings.value(NEAR_TIE_KEY)) == 3.7
    fresh = make_window(qtbot, None, tmp_path, settings_file="other.ini")
    fresh_token_view = part(fresh, TokenView)
    assert fresh_token_view.near_tie_margin == DEFAULT_NEAR_TIE_MARGIN


def test_tokens_drawn_before_their_receipt_get_their_mark_when_it_arrives(qtbot, make_generation, scheduler,
                                                                          chat_tokens, runtime):
    """The view draws a window's tokens as they are committed, before the receipt with their
    figures: replaying a run's records in their order, with a redraw after each, ends with the
    same marks as a drawing of the finished record; meanwhile the hover says the window is not
    verified yet."""
    from scenarios import ALTERNATE, Follower
    from inspector.session.session_record import SessionRecord
    from inspector.session.run_records import RecordingObserver, RunHeader
    from test_gui_support import example_text

    prompt = chat_tokens(example_text("copy-with-corrections"))
    records = []
    g = make_generation(Follower(scheduler, ALTERNATE, prompt=prompt, horizon=MAX_TOKENS + 4), prompt,
                        RecordingObserver(records.append, runtime.token_text, runtime.n_vocab),
                        max_new_tokens=MAX_TOKENS)
    g.run()
    assert g.receipts
    s = SessionRecord()
    s.apply(RunHeader(g.session_id or 0, "", None, tuple(prompt), runtime.describe(),
                      {"probabilities": True}, g.started_us))
    view = TokenView()
    qtbot.addWidget(view)
    view.set_near_tie_margin(10.0)
    view.set_session(s)
    said_not_verified = False
    for item in records:
        s.apply(item)
        view.refresh()
        t = s.tokens[-1] if s.tokens else None
        if t is not None and t.window is not None and s.window(t.window) is None:
            said_not_verified |= "no probability figures (window not verified yet)" in view.tooltip(t.index)
    assert said_not_verified
    assert [t.token for t in s.tokens] == g.generated
    assert view.near_tie_marks() == _expected_marks(s, 10.0)
    assert view.near_tie_marks()
    whole = TokenView()
    qtbot.addWidget(whole)
    whole.set_near_tie_margin(10.0)
    whole.set_session(s)
    assert whole.near_tie_marks() == view.near_tie_marks()


def test_schema_v1_file_opens_and_says_it_has_no_figures(qtbot, tmp_path):
    v = make_window(qtbot, None, tmp_path, settings_file="viewer.ini")
    v_model = v.model
    v_token_view = part(v, TokenView)
    v_window_detail = part(v, WindowDetail)
    assert open_receipts(qtbot, v, V1_FILE) == ""
    v.refresh_all()
    s, view = v_model.session, v_token_view
    assert s.origin == "document" and len(s.receipts) == 5
    assert view.token_count() == len(s.tokens) > 0
    for t in s.tokens:
        assert "no probability figures (schema v1 file)" in view.tooltip(t.index)
        assert f"predicted (committed): {quoted(t.text)} ({t.token})" in view.tooltip(t.index)
    view.near_tie_spin.setValue(10.0)
    assert view.near_tie_marks() == []
    d = v_window_detail
    d.select_window(1)
    assert d.rows.rowCount() > 0
    assert all(d.rows.item(i, c).text() == "" for i in range(d.rows.rowCount())
               for c in range(FIGURE_COLUMNS, len(ROW_HEADERS)))
    assert d.rows.item(0, 3).text()  # the other columns are filled


def test_probabilities_turned_off_are_named_so(qtbot, tmp_path):
    """A schema-v2 record of a run with probabilities off (``--no-probabilities``): the hover
    says they were turned off, not that the file is old."""
    from inspector.receipts import load_document
    from inspector.session.record_from_file import record_from_document

    doc = load_document(V1_FILE)
    doc["settings"] = {**doc["settings"], "probabilities": False}
    s = record_from_document(doc)
    view = TokenView()
    qtbot.addWidget(view)
    view.set_session(s)
    assert "no probability figures (turned off for this run)" in view.tooltip(0)


def test_plain_steps_drawn_before_their_batch_ran_get_their_mark_once_it_has_run(qtbot, make_generation, chat_tokens,
                                                                                 runtime, monkeypatch):
    """A plain step's figures wait in a batch of up to 8 rows (issue 41; the sampler basis, or a build without
    the C kernel, which this test stands for: with it a greedy row is summarised at once): the view, redrawn after every
    step of a run on the bundled model, draws those tokens without running the batch on the GUI thread,
    and ends with the marks of a drawing of the finished record."""
    from inspector.session.session_record import SessionRecord
    from inspector.session.run_records import RecordingObserver, RunHeader
    from test_gui_support import example_text

    from inspector.engine import deferred_figures

    monkeypatch.setattr(deferred_figures, "summarises_at_once", lambda sampling, top=5: False)
    prompt = chat_tokens(example_text("open-ended"))
    records = []
    g = make_generation(None, prompt, RecordingObserver(records.append, runtime.token_text, runtime.n_vocab),
                        max_new_tokens=MAX_TOKENS, probabilities=True)
    s = SessionRecord()
    s.apply(RunHeader(g.session_id or 0, "", None, tuple(prompt), runtime.describe(), {"probabilities": True},
                      g.started_us))
    view = TokenView()
    qtbot.addWidget(view)
    view.set_near_tie_margin(10.0)
    view.set_session(s)
    g.start()
    drawn_pending = 0
    while not g.finished:
        g.step()
        for item in records:
            s.apply(item)
        records.clear()
        batches = g.figures.batches
        drawn_pending += sum(1 for t in s.tokens if s.figures_pending(t))
        view.refresh()
        assert g.figures.batches == batches, "the redraw ran a batch of figures"
    for item in records:
        s.apply(item)
    assert drawn_pending > 0 and s.plain_steps == MAX_TOKENS - 1
    assert not any(s.figures_pending(t) for t in s.tokens)  # the finish ran the last batch
    view.refresh()
    whole = TokenView()
    qtbot.addWidget(whole)
    whole.set_near_tie_margin(10.0)
    whole.set_session(s)
    assert view.near_tie_marks() == whole.near_tie_marks() == _expected_marks(s, 10.0)
    assert view.near_tie_marks(), "some row of 16 tokens has a margin below 10 logits"
