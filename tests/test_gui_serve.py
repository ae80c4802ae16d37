"""The window's Serve switch and Requests tab (issue 35), on the real model: a chat request from the ``openai``
SDK on a Python thread (the Qt event loop never blocks), listed in the Requests tab and shown in every view,
then Serve off and Run again. Nothing here names the model's words."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import openai
from PySide6.QtCore import QSettings

from inspector.bench.compare_result import CompareConfig
from inspector.receipts import load_document

from PySide6.QtWidgets import QTabWidget
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.serve.requests_view import RequestsView
from inspector.gui.tokens.token_view import TokenView
from test_gui_support import make_window, part, RUN_TIMEOUT_MS

MAX = 12
GREEDY = {"temperature": 0}


def serving_window(qtbot, runtime, tmp_path, port: int = 0):
    """A window whose Serve listens on ``port`` (0: any free port, through the remembered setting) and writes
    receipts under ``tmp_path``."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("serve/port", port)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    requests_view = part(w, RequestsView)
    assert requests_view.port.value() == port
    model.serve_receipts_dir = tmp_path / "served"
    return w


def ask(address: str, text: str, out: dict) -> threading.Thread:
    """Send one chat request from a thread of its own; its reply (or error) lands in ``out``."""
    def go():
        try:
            client = openai.OpenAI(base_url=address + "/v1", api_key="none", max_retries=0, timeout=120)
            model = client.models.list().data[0].id
            out["reply"] = client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}],
                                                          max_tokens=MAX, **GREEDY)
        except Exception as exc:  # reported by the test
            out["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def serve_on(qtbot, w) -> str:
    model = w.model
    panel = part(w, ControlPanel)
    requests_view = part(w, RequestsView)
    model.commands.serve(True)
    assert model.state == "serving" and not panel.run.isEnabled() and not w.menus.act_run.isEnabled()
    qtbot.waitUntil(lambda: model.serve_address != "" or not model.serving, timeout=30_000)
    assert model.serve_address.startswith("http://127.0.0.1:"), requests_view.status.text()
    qtbot.waitUntil(lambda: "Serving" in model.banner_html, timeout=5_000)  # said on the redraw tick after
    return model.serve_address


def test_a_served_chat_request_is_listed_and_shown_in_every_view_then_serve_off_runs_again(qtbot, runtime,
                                                                                           tmp_path):
    w = serving_window(qtbot, runtime, tmp_path)
    wm = w.model
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    requests_view = part(w, RequestsView)
    tabs = part(w, QTabWidget, "views")
    address = serve_on(qtbot, w)
    assert wm.serving and requests_view.copy.isEnabled()
    assert "Serving" in wm.banner_html and address in wm.banner_html
    assert not panel.step_window.isEnabled() and not panel.source.isEnabled() and panel.model_combo.isEnabled()
    tabs.setCurrentWidget(requests_view)
    out: dict = {}
    client = ask(address, "Name three colors.", out)
    qtbot.waitUntil(lambda: not client.is_alive(), timeout=RUN_TIMEOUT_MS)
    assert "error" not in out, out.get("error")
    reply = out["reply"]
    model = requests_view.model
    qtbot.waitUntil(lambda: model.rowCount() == 1 and model.values(model.rows[0])[-1] != "running…", timeout=10_000)
    row = model.rows[0]
    cells = dict(zip(("id", "arrived", "endpoint", "prompt", "reused", "output"), model.values(row)))
    assert cells["endpoint"] == "/v1/chat/completions"
    assert cells["prompt"] == reply.usage.prompt_tokens and cells["output"] == reply.usage.completion_tokens
    # Every view follows the request: the token stream holds its tokens, the Windows tab its windows.
    qtbot.waitUntil(lambda: token_view.token_count() == reply.usage.completion_tokens, timeout=10_000)
    shown = token_view.stream.toPlainText()  # the reply's text, then the end-of-generation token's when it ended so
    assert shown == "".join(t.shown for t in wm.session.tokens)
    assert shown.startswith(reply.choices[0].message.content)
    assert wm.session is wm.requests.records[row.id]
    qtbot.waitUntil(lambda: wm.session.end is not None, timeout=10_000)  # its end arrives through the record feed
    assert len(wm.session.receipts) == row.windows
    assert "request <b>1</b>" in wm.banner_html
    # The table reads the row in place; the plots redraw once the request's end reached the window's log (a
    # queued note), so wait for that redraw rather than racing it.
    qtbot.waitUntil(lambda: w.refresh_all() or requests_view.plots.drawn_points()["tokens_per_s"] == 1, timeout=10_000)
    assert requests_view.table.selectionModel().isRowSelected(0)
    assert (tmp_path / "served").is_dir() and row.receipts_path

    # A second request is followed; picking the first holds it (Follow the newest unticks); the newest follows again.
    client = ask(address, "Name three animals.", out)
    qtbot.waitUntil(lambda: not client.is_alive(), timeout=RUN_TIMEOUT_MS)
    qtbot.waitUntil(lambda: wm.session is wm.requests.records.get(2) and wm.session.end is not None, timeout=10_000)
    requests_view.table.selectRow(0)
    assert wm.session is wm.requests.records[1] and not w.serve.follow and not requests_view.follow.isChecked()
    assert "request <b>1</b>" in wm.banner_html and "held" in wm.banner_html
    requests_view.table.selectRow(1)
    assert wm.session is wm.requests.records[2] and requests_view.follow.isChecked()

    # Off: the server stops on its own thread, then Run works again and the requests stay listed.
    wm.commands.serve(False)
    qtbot.waitUntil(lambda: wm.state == "idle", timeout=30_000)
    assert not wm.serving and panel.run.isEnabled() and w.menus.act_run.isEnabled()
    assert panel.source.isEnabled() and not requests_view.copy.isEnabled()
    assert model.rowCount() == 2 and "Serving stopped" in wm.banner_html
    # The request shown is the client's conversation, not a raw prompt (the trial read "turn raw off").
    why = w.turns.why_not()
    assert "served request" in why and "raw" not in why, why
    # Export session… (issue 54 item 3): the run's requests as the conversation document serve --session writes.
    assert requests_view.export.isEnabled()
    out_path = tmp_path / "served-session.json"
    w.serve.export.write(out_path)
    qtbot.waitUntil(lambda: "session:" in requests_view.status.text() or "not exported" in requests_view.status.text(),
                    timeout=30_000)
    doc = load_document(out_path)
    assert doc["kind"] == "conversation" and [t["conversation"]["user_text"] for t in doc["turns"]] == [
        "Name three colors.", "Name three animals."]
    assert "tune --turns" in requests_view.status.text()
    # Replay under other sources… (issue 54 item 3): the same document, chosen in the Compare window, which runs
    # every served request as a turn under the configurations chosen there.
    assert requests_view.replay.isEnabled()
    requests_view.replay.trigger()  # Session > Replay under other sources…
    qtbot.waitUntil(lambda: w.analysis.compare_view is not None and w.analysis.compare_view.isVisible(), timeout=30_000)
    v = w.analysis.compare_view
    name, turns = v.conversation()
    assert Path(name).parent == tmp_path / "served" / "sessions" and turns == ("Name three colors.", "Name three animals.")
    assert v.input.currentText().endswith("(2 turns)") and "Compare window" in requests_view.status.text()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("ngram", "ngram", 4)])
    v.max_tokens.setValue(6)
    v.repeats.setValue(1)
    with qtbot.waitSignal(wm.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        v.run.click()
    result, note = blocker.args
    assert note == "" and [len(run.generations) for run in result.runs] == [2, 2]
    assert all(row.error is None and 0 < row.summary.generated_tokens <= 12 for row in result.rows)


def test_a_busy_port_is_said_on_the_error_line_and_the_switch_goes_back_off(qtbot, runtime, tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        w = serving_window(qtbot, runtime, tmp_path, port=taken.getsockname()[1])
        model = w.model
        panel = part(w, ControlPanel)
        requests_view = part(w, RequestsView)
        model.commands.serve(True)
        qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)
    finally:
        taken.close()
    assert not model.serving and model.server is None and panel.run.isEnabled()
    assert "cannot listen on 127.0.0.1" in requests_view.status.text()


def test_a_request_listed_before_its_arrival_is_handed_over_gets_its_whole_record():
    from inspector.gui.model.request_log import RequestLog
    from inspector.serve.job import ServedRequest
    from inspector.session.run_records import RecordStream

    rows = [ServedRequest(1, "/completion", 0.0, 3, feed=RecordStream())]
    log = RequestLog()
    log.attach(lambda: list(rows))
    rows[0].state = "running"
    log.drain()  # the server's rows are read before the window heard of the request
    assert 1 in log.records and log.newest_started() is rows[0]
    log.note(rows[0])  # then its arrival comes: nothing is made twice
    assert list(log.records) == [1]


def test_the_serving_banner_names_the_weight_form_it_serves(qtbot, runtime, tmp_path, monkeypatch):
    """The trial after issue 36: with Q8_0 loaded the banner said "Serving X.Q4_1.gguf"."""
    from test_gui_new_user import load_weights

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = serving_window(qtbot, runtime, tmp_path)
    model = w.model
    load_weights(qtbot, w, "Q8_0")
    serve_on(qtbot, w)
    assert "in Q8_0 form" in model.banner_html, model.banner_html
    model.commands.serve(False)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)


def test_a_receipts_folder_that_cannot_be_written_is_said_on_the_error_line_instead_of_serving(qtbot, runtime,
                                                                                               tmp_path):
    """Issue 52: the window served and silently wrote no record."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    w = serving_window(qtbot, runtime, tmp_path)
    model = w.model
    requests_view = part(w, RequestsView)
    model.serve_receipts_dir = a_file / "served"
    model.commands.serve(True)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)
    assert not model.serving and model.server is None and model.serve_address == ""
    said = requests_view.status.text()
    assert "Serve did not start" in said and str(a_file / "served") in said and "cannot write" in said, said


def test_a_comparison_asked_while_serving_is_refused_over_the_compare_window_naming_serve_off(qtbot, runtime,
                                                                                             tmp_path):
    """Issue 54: Run comparison while serving showed its refusal over the main window, and the Compare window
    dropped behind it."""
    w = serving_window(qtbot, runtime, tmp_path)
    model = w.model
    serve_on(qtbot, w)
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0)])
    v.with_server.setChecked(False)
    v.run.click()
    assert v.error_box is not None and v.error_box.parent() is v
    assert "Stop serving" in v.error_box.text() and "Ctrl+Shift+S" in v.error_box.text()
    assert model.state == "serving"
    model.commands.serve(False)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)
