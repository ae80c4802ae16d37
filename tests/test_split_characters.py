"""CJK and emoji in the token stream (issue 36, defect 2): a character split over tokens.

One rule (``inspector.engine.text``): a token's label is its text where its bytes are valid UTF-8,
each other byte ``<0xNN>``; the stream joins the tokens' bytes and shows a split character whole,
held back until complete (llama-server's ``validate_utf8``). The first tests are pure (byte
sequences, no model); the others run the bundled model and read every view: the token stream, its
tooltips, the Windows rows table, the Receipt pane, the exported document and ``spec-inspector view``.
The model's own words are never asserted: the target is made to say a known text (``Says``), or a
view is compared with the runtime's own detokenization of the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, strategies as st

from inspector.engine.text import ShownText, label_bytes, shown_text, token_label, utf8_complete_length
from inspector.session.session_record import SessionRecord

TEXT = "東京タワーは赤い。🎉🎉 Ünïcödé ✓"
PROMPT = "Copy exactly: " + TEXT
REPLACED = ("\ufffd", "?")
"""What a broken character became: U+FFFD, or '?' where a font or a terminal had no glyph for it."""


def split_bytes(text: str) -> list[bytes]:
    """``text``'s UTF-8 bytes one per piece: every multi-byte character split."""
    return [bytes((b,)) for b in text.encode()]


# -- the rule, on byte sequences (no model) ----------------------------------------------------

def test_each_part_of_a_split_character_is_labelled_by_its_bytes():
    assert [token_label(p) for p in split_bytes("東")] == ["<0xE6>", "<0x9D>", "<0xB1>"]
    assert token_label(b" \xe6") == " <0xE6>"  # the text it has, then the byte that starts a character
    assert token_label("\xe6\x9d".encode("latin-1")) == "<0xE6><0x9D>"
    assert token_label("東京".encode()) == "東京" and token_label(b"<|im_end|>") == "<|im_end|>"
    assert token_label(b"\xe6A") == "<0xE6>A"  # a lead byte without its continuation
    for piece in split_bytes(TEXT):
        assert "\ufffd" not in token_label(piece)


def test_the_stream_shows_a_split_character_whole_once_complete_and_nothing_broken_before():
    s = ShownText()
    shown = [s.push(i, p) for i, p in enumerate(split_bytes("a東🎉"))]
    assert shown == ["a", "", "", "東", "", "", "", "🎉"]
    s = ShownText()
    assert [s.push(0, b" \xe6"), s.push(1, b"\x9d"), s.push(2, b"\xb1\xe4\xba"), s.push(3, b"\xac!")] == \
        [" ", "", "東", "京!"]
    assert shown_text(split_bytes(TEXT)) == TEXT


def test_a_run_that_ends_inside_a_character_holds_its_bytes_then_flushes_them_as_labels():
    s = ShownText()
    assert [s.push(0, b"ok \xf0\x9f"), s.push(1, b"\x8e")] == ["ok ", ""]
    assert s.held == ((0, b"\xf0\x9f"), (1, b"\x8e"))
    assert s.flush() == [(0, "<0xF0><0x9F>"), (1, "<0x8E>")] and s.held == ()
    assert shown_text([b"ok \xf0\x9f", b"\x8e"]) == "ok "


def test_the_hold_is_llama_servers_validate_utf8():
    # tools/server/server-common.cpp validate_utf8: a lead byte among the last ones whose sequence is cut off
    assert utf8_complete_length(b"") == 0
    assert utf8_complete_length("a東".encode()) == 4
    assert utf8_complete_length(b"a\xe6\x9d") == 1
    assert utf8_complete_length(b"a\xf0\x9f\x8e") == 1
    assert utf8_complete_length(b"a\xc3") == 1
    assert utf8_complete_length(b"a\x9d") == 2  # a stray continuation byte: not held (shown as <0x9D>)


@given(st.binary(max_size=24))
def test_a_label_reads_back_to_its_bytes(data):
    assert label_bytes(token_label(data)) == data


@given(st.text(max_size=12), st.lists(st.integers(0, 60), max_size=8))
def test_any_split_of_valid_text_streams_that_text_and_only_prefixes_of_it(text, cuts):
    data = text.encode()
    edges = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    pieces = [data[a:b] for a, b in zip(edges, edges[1:])]
    s = ShownText()
    so_far = ""
    for i, p in enumerate(pieces):
        so_far += s.push(i, p)
        assert text.startswith(so_far)  # never a broken character, never a byte's label
    assert so_far == text and s.held == ()


def test_the_record_gives_every_token_its_label_and_the_stream_its_whole_characters():
    pieces = [b"Hi \xe6", b"\x9d", b"\xb1", b"!", b" \xf0\x9f"]
    s = SessionRecord()
    s.texts = {i: token_label(p) for i, p in enumerate(pieces)}
    for i in range(len(pieces)):
        s.add_token(i, None, 0, 10 + i, None)
    assert [t.text for t in s.tokens] == ["Hi <0xE6>", "<0x9D>", "<0xB1>", "!", " <0xF0><0x9F>"]
    assert [t.shown for t in s.tokens] == ["Hi ", "", "東", "!", " "]
    assert s.output_text == "Hi 東! "
    version = s.version
    s.end_stream()  # read from a file: no token follows, the cut-off emoji shows as its bytes
    assert s.tokens[-1].shown == " <0xF0><0x9F>" and s.token_changes_since(version) == 4
    assert s.output_text == "Hi 東! "  # the text keeps a cut-off character out, as the engine's does
    assert s.snapshot().output_text == s.output_text


# -- the bundled model: every view ----------------------------------------------------------------

def _says(runtime, prompt_tokens, tokens):
    """The target whose predictions are ``tokens`` right after ``prompt_tokens`` (a ``RuntimeProxy``):
    its output is known to split characters over tokens, whatever the model would say."""
    from scenarios import RuntimeProxy

    class Says(RuntimeProxy):
        def adjust(self, preds, position, last_row=False):
            for i in range(len(preds)):
                k = position + i + 1 - len(prompt_tokens)
                if 0 <= k < len(tokens):
                    preds[i] = tokens[k]
            return preds

    return Says(runtime)


def _no_replacement(text: str, where: str) -> None:
    for r in REPLACED:
        assert r not in text, f"{where}: {r!r} in {text!r}"


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, encoding="utf-8")


def test_every_view_of_a_run_shows_cjk_and_emoji_split_over_tokens(qtbot, runtime, tmp_path):
    from inspector.gui.panel.control_panel import ControlPanel
    from inspector.gui.tokens.token_view import TokenView
    from inspector.gui.windows.detail import WindowDetail
    from test_gui_support import export_session, make_window, open_receipts, part, run_to_end

    answer = runtime.tokenize(TEXT)
    split = [i for i, t in enumerate(answer) if len(runtime.token_piece(t)) == 1 and runtime.token_piece(t)[0] >= 0x80]
    assert len(split) >= 10, "the bundled vocabulary splits these characters over tokens (one-byte tokens)"
    prompt = runtime.prompt_tokens(PROMPT)
    w = make_window(qtbot, _says(runtime, prompt, answer), tmp_path, max_tokens=len(answer))
    model = w.model
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    window_detail = part(w, WindowDetail)
    panel.prompt.setPlainText(PROMPT)
    panel.set_source("scripted")
    panel.script.setPlainText(TEXT)  # windows whose proposals and predictions are split characters
    run_to_end(qtbot, w)
    s = model.session
    assert [t.token for t in s.tokens] == answer
    assert runtime.detokenize(answer) == TEXT  # the runtime's own detokenization: no U+FFFD

    # The token stream: every character whole, the same text as the runtime's detokenization.
    assert token_view.stream.toPlainText() == TEXT
    assert s.output_text == TEXT
    # Tooltips: each token's own bytes; a completing token names the character it completes.
    byte = runtime.token_piece(answer[split[0]])[0]
    assert f"&#x27;&lt;0x{byte:02X}&gt;&#x27; ({answer[split[0]]})" in token_view.tooltip(split[0])
    completing = next(k for k in range(len(answer)) if s.tokens[k].shown and s.tokens[k].shown != s.tokens[k].text)
    assert "a character split over tokens" in token_view.tooltip(completing)
    for k in range(len(answer)):
        _no_replacement(token_view.tooltip(k), f"tooltip of token {k}")

    # The Windows rows table and the Receipt pane.
    d = window_detail
    assert d.window_count() >= 1
    labels = 0
    for entry in s.windows():
        d.select_window(entry.window_index)
        for r in range(d.rows.rowCount()):
            for c in range(d.rows.columnCount()):
                item = d.rows.item(r, c)
                text = item.text() if item is not None else ""
                _no_replacement(text, f"window {entry.window_index} row {r} column {c}")
                labels += "<0x" in text
        d.detail_tabs.setCurrentWidget(d.raw)
        raw = d.raw.toPlainText()
        assert "\ufffd" not in raw and "\\ufffd" not in raw
    assert labels > 0, "the rows table names split tokens by their bytes"

    # The exported document, opened again and printed by `view`.
    out = tmp_path / "split.json"
    assert export_session(qtbot, w, out)[1] == ""
    doc = json.loads(out.read_text("utf-8"))
    assert doc["output"]["text"] == TEXT
    assert doc["output"]["token_texts"] == [runtime.token_text(t) for t in answer]
    assert "\ufffd" not in out.read_text("utf-8") and "\\ufffd" not in out.read_text("utf-8")
    v = make_window(qtbot, None, tmp_path, settings_file="viewer.ini")
    v_token_view = part(v, TokenView)
    assert open_receipts(qtbot, v, out) == ""
    v.refresh_all()
    assert v_token_view.stream.toPlainText() == TEXT
    p = cli("view", out, "--events", *(a for e in s.windows() for a in ("--window", e.window_index)))
    assert p.returncode == 0, p.stderr
    assert TEXT in p.stdout and "<0x" in p.stdout
    _no_replacement(p.stdout.replace(TEXT, ""), "view")
    # The window's autosave, printed by `view` (its text rebuilt from the tokens' labels).
    autosave = sorted((tmp_path / "data").rglob("*.jsonl"))[-1]
    p = cli("view", autosave, "--events", "--window", s.windows()[0].window_index)
    assert p.returncode == 0, p.stderr
    assert TEXT in p.stdout and "<0x" in p.stdout
    _no_replacement(p.stdout.replace(TEXT, ""), "view of the autosave")


def test_a_headless_run_and_view_show_what_the_runtime_detokenizes(runtime, tmp_path):
    """The model's own words on a CJK and emoji prompt: ``run``'s text and events and ``view``'s
    output have no replacement character wherever the runtime's detokenization of the same
    generated tokens has none; the scripted proposals (the prompt's text) are split tokens."""
    out = tmp_path / "run.json"
    autosave = tmp_path / "run.jsonl"
    p = cli("run", "--prompt", PROMPT, "--source", "scripted", "--script", TEXT, "--max-tokens", "24",
            "--events", "--receipts", out, "--autosave", autosave)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text("utf-8"))
    generated = doc["output"]["token_ids"]
    full = b"".join(runtime.token_piece(t) for t in generated).decode("utf-8", errors="replace")
    for t in generated:  # each token's event line names it by its label
        assert repr(runtime.token_text(t)) in p.stdout
    windows = [a for w in doc["windows"] for a in ("--window", w["window_index"])]
    v = cli("view", out, "--events", *windows)
    assert v.returncode == 0, v.stderr
    a = cli("view", autosave, "--events", *windows)
    assert a.returncode == 0, a.stderr
    for where, text in (("run", p.stdout), ("view", v.stdout), ("view of the autosave", a.stdout)):
        if "\ufffd" not in full:
            assert "\ufffd" not in text, where
        if "?" not in full:
            assert "?" not in text, where
