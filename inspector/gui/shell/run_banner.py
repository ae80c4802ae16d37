"""What the banner says about a live run: while it goes (running, paused, holding before a commit) and when
it ends (the finish, then what the user should know besides: faults that never fired, contention)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt

from inspector.gui.look.banner_colours import BANNER_DONE, BANNER_HINT, BANNER_NEUTRAL, BANNER_WARN
from inspector.gui.look.wording import count_noun
from inspector.gui.model.window_model import WindowModel
from inspector.gui.shell.banner import BANNER_PAD, DETAILS_HREF, DETAILS_LINK, Banner
from inspector.llama.cost_cache import placement
from inspector.session.contention import run_contention_note
from inspector.session.run_states import PAUSED, RUNNING, TOKEN_HOLD


class RunBanner:
    """The run's lines in the banner: said through ``model`` (the ``WindowModel``: its worker's faults and
    runtime, the session shown), measured on ``banner`` (the ``Banner`` widget: a long end is cut to its width).
    ``status``: what the live run does ("source ngram · up to 128 tokens"), set when it starts, None when none
    runs."""

    def __init__(self, model: WindowModel, banner: Banner) -> None:
        self.model = model
        self.banner = banner
        self.worker = model.worker
        self.status: str | None = None

    def during(self, state: str) -> None:
        """During a live run: say what it is doing now: running, paused (with what continues it) or holding
        before a commit; errors and the end set their own text."""
        what = self.status
        if what is None or state not in (RUNNING, PAUSED, TOKEN_HOLD):
            return
        n = count_noun(len(self.model.session.tokens), "token")
        if state == PAUSED:
            self.model.set_banner(f"<b>Paused</b>: {what} · {n} so far. <b>Continue</b> (Ctrl+R) runs on; Step window "
                            "(F10) and Step token (F11) go one window or one token at a time.", BANNER_HINT)
        elif state == TOKEN_HOLD:
            self.model.set_banner(f"<b>Step token</b>: holding before a commit ({n} so far; the token is named above "
                            "the stream, a window's rows in the Windows tab). F11 commits it; Continue (Ctrl+R) "
                            "runs on.", BANNER_HINT)
        elif self.model.banner_html.startswith(("<b>Paused", "<b>Step token")):
            self.model.set_banner(f"Running: {what} …", BANNER_NEUTRAL)

    def finish(self, reason: str, end, record) -> tuple[str, str, str]:
        """The banner after a live run ended with ``reason`` (``RunEnd`` ``end``, its ``SessionRecord``):
        ``(text, style, tooltip)``. Two lines at most, so the view below never moves: the finish, then the
        ``end_notes`` on one line cut to fit before a **details** link that shows them whole (``Banner``: a note
        cut to "…" with the rest only in a tooltip went unread in a trial), all of them in the tooltip too."""
        text = (f"Finished: <b>{reason}</b> · {count_noun(len(record.tokens), 'token')} · "
                f"KV length {end.kv_length} (canonical position {end.canonical_position})")
        notes = self.end_notes(record)
        if not notes:
            return text, BANNER_DONE, ""
        full = "; ".join(f"{title}: {note}" for title, note in notes)
        fm = self.banner.fontMetrics()
        width = max(120, self.banner.width() - 2 * BANNER_PAD - 12 - fm.horizontalAdvance(f" {DETAILS_LINK}"))
        line = fm.elidedText(full, Qt.TextElideMode.ElideRight, width)
        link = "" if line == full else f" <a href='{DETAILS_HREF}'>{DETAILS_LINK}</a>"
        return f"{text}<br>{html.escape(line)}{link}", BANNER_WARN, full

    def end_notes(self, record) -> list[tuple[str, str]]:
        """After a live run (its ``SessionRecord``): ``(title, text)`` of what the user should know
        besides the finish: each fault still pending and why it never fired (``Fault.why_unfired``),
        and contention the run measured (``run_contention_note``)."""
        notes = []
        receipts = record.receipts
        pending = self.worker.faults.pending()
        if pending:
            most = max((len(r.committed_tokens) for r in receipts), default=0)
            notes.append(("Not fired", "; ".join(f.why_unfired(len(receipts), most) for f in pending)))
        rt = self.worker.runtime
        if rt is not None:
            contended = run_contention_note(record, getattr(rt, "model_path", ""), rt.n_threads, placement(rt))
            if contended:
                notes.append(("Slow", contended))
        return notes
