"""A long prompt's prefill tells its progress (issue 39, long contexts): after each chunk of the
runtime's ``n_batch`` rows, through the engine's observer to the session record, the window's
status line and ``run``'s standard error; the batches, and so the output, are the ones without it."""

from __future__ import annotations

import subprocess
import sys

from inspector.engine import Generation, GenerationObserver, GenerationSettings
from inspector.engine.runtime_calls import prefill_call
from inspector.engine.settings import SamplingSettings
from inspector.session.run_records import PrefillProgress
from inspector.session.session_record import SessionRecord


class CallLog:
    """A runtime stand-in that logs the prefill calls it gets: (name, first token, count, position)."""

    n_batch = 4

    def __init__(self):
        self.calls = []
        self.kv = 0

    def trim(self, sid, position):
        self.kv = min(self.kv, position)
        return True

    def prefill(self, sid, tokens, position):
        self.calls.append(("prefill", tokens[0], len(tokens), position))
        self.kv = position + len(tokens)

    def prefill_predict(self, sid, tokens, position):
        self.calls.append(("prefill_predict", tokens[0], len(tokens), position))
        self.kv = position + len(tokens)
        return 99

    def kv_length(self, sid):
        return self.kv


def test_the_prefill_goes_in_chunks_of_n_batch_and_tells_each_one():
    told = []
    rt = CallLog()
    out = prefill_call(0, list(range(10)), True, SamplingSettings(), False, progress=lambda d, t: told.append((d, t)))(rt)
    assert rt.calls == [("prefill", 0, 4, 0), ("prefill", 4, 4, 4), ("prefill_predict", 8, 2, 8)]
    assert told == [(4, 10), (8, 10), (10, 10)]
    assert out == (10, 99, None)


def test_reused_prompt_positions_count_as_done_and_a_whole_last_chunk_still_predicts():
    told = []
    rt = CallLog()
    rt.kv = 3
    prefill_call(0, list(range(11)), True, SamplingSettings(), False, kept=3,
                 progress=lambda d, t: told.append((d, t)))(rt)
    # 8 tokens after the 3 kept: one whole chunk, then the last chunk (also whole) predicts
    assert rt.calls == [("prefill", 3, 4, 3), ("prefill_predict", 7, 4, 7)]
    assert told == [(7, 11), (11, 11)]


def test_without_a_listener_the_runtime_gets_the_whole_prompt_in_one_call():
    rt = CallLog()
    prefill_call(0, list(range(10)), True, SamplingSettings(), False)(rt)
    assert rt.calls == [("prefill_predict", 0, 10, 0)]


def test_a_session_record_holds_the_last_progress_told():
    r = SessionRecord()
    r.apply(PrefillProgress(256, 700))
    assert (r.prefill_done, r.prefill_total) == (256, 700)


class Told(GenerationObserver):
    def __init__(self):
        self.progress = []

    def on_prefill(self, done, total):
        self.progress.append((done, total))


class Silent:
    """An observer of the engine's older shape: no ``on_prefill`` (the runtime gets one call)."""

    def __getattr__(self, name):
        if name == "on_prefill":
            raise AttributeError(name)
        return lambda *a, **k: None


def test_on_the_real_model_a_long_prompt_is_told_per_chunk_and_decodes_as_in_one_call(scheduler, runtime):
    text = " ".join(f"line {i}: the value of x{i} is {i * 7 % 13}." for i in range(25))
    prompt = runtime.tokenize(text, True, False)
    n_batch = runtime.n_batch
    assert len(prompt) > n_batch, (len(prompt), n_batch)
    settings = GenerationSettings(max_new_tokens=6, draft_max=4)
    told = Told()
    g = Generation(scheduler, None, prompt, settings, observer=told)
    g.run()
    g.close()
    assert told.progress == [(d, len(prompt)) for d in [*range(n_batch, len(prompt), n_batch), len(prompt)]]
    plain = Generation(scheduler, None, prompt, settings, observer=Silent())
    plain.run()
    plain.close()
    assert g.generated == plain.generated and len(g.generated) == 6


def test_run_says_a_long_prefill_once_on_standard_error_and_nothing_on_standard_output(tmp_path):
    prompt = tmp_path / "long.txt"
    prompt.write_text(" ".join(f"item {i} costs {i % 9} coins." for i in range(80)))
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt-file", str(prompt), "--max-tokens", "2",
                        "-c", "2048", "-b", "256", "--source", "none", "--receipts", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("prefill:")]
    assert len(lines) == 1 and lines[0].endswith("prompt tokens …"), p.stderr
    assert "prefill:" not in p.stdout


def test_the_windows_status_line_shows_the_prefill_until_the_first_token(qtbot, tmp_path):
    from PySide6.QtWidgets import QLabel
    from test_gui_support import make_window, part

    w = make_window(qtbot, None, tmp_path)
    model = w.model
    status_counts = part(w, QLabel, "status-counts")
    model.session.apply(PrefillProgress(512, 1300))
    w.redraw()
    assert status_counts.text() == "prefill: 512/1300 prompt tokens"
    model.session.apply(PrefillProgress(1300, 1300))
    w.redraw()
    assert "prefill" not in status_counts.text() and "canonical position" in status_counts.text()
