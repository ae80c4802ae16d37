"""Files: export/open receipts, autosave and recovery, PNG export, settings, bad model, no display.

Runs that need windows get them whatever the model says: single-token n-gram
matches (``ngram_min=1``: the first query always proposes) or ``follow_window``.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings
from PySide6.QtGui import QImage

from inspector.gui import app as gui_app
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.event_log import EventLog
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.gui.plots.timeline import Timeline
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.windows.detail import WindowDetail
from inspector.receipts import load_document
from inspector.session.record_from_file import record_from_autosave
from inspector.session.run_states import IDLE
from test_gui_support import follow_window, kv_data_rect, make_window, open_receipts, part, run_to_end


def test_export_then_open_in_a_fresh_window(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, ngram_min=1)
    model = w.model
    token_view = part(w, TokenView)
    window_detail = part(w, WindowDetail)
    timeline = part(w, Timeline)
    stats = part(w, StatsView)
    event_log = part(w, EventLog)
    run_to_end(qtbot, w)
    out = tmp_path / "receipts.json"
    with qtbot.waitSignal(model.exported, timeout=60_000) as blocker:
        model.commands.export_receipts_file(str(out))
    assert blocker.args == [str(out), ""]
    doc = load_document(out)  # validates against the schema
    assert len(doc["windows"]) == len(model.session.receipts) > 0
    live_summary = stats.summary

    v = make_window(qtbot, None, tmp_path, settings_file="viewer.ini")
    v_model = v.model
    v_panel = part(v, ControlPanel)
    v_token_view = part(v, TokenView)
    v_window_detail = part(v, WindowDetail)
    v_timeline = part(v, Timeline)
    v_lock_plots = part(v, LockPlots)
    v_stats = part(v, StatsView)
    v_event_log = part(v, EventLog)
    assert open_receipts(qtbot, v, out) == ""
    v.refresh_all()
    s = v_model.session
    assert s.origin == "document"
    assert [t.token for t in s.tokens] == [t.token for t in model.session.tokens]
    assert v_token_view.stream.toPlainText() == token_view.stream.toPlainText()
    assert v_window_detail.window_count() == window_detail.window_count() == len(doc["windows"])
    assert v_timeline.point_count() == timeline.point_count()
    assert v_event_log.kinds() == event_log.kinds()
    assert v_stats.summary.windows == live_summary.windows
    assert v_stats.summary.acceptance_rate == live_summary.acceptance_rate
    assert v_stats.summary.mean_accepted_length == live_summary.mean_accepted_length
    assert v_stats.summary.acceptance_by_position == live_summary.acceptance_by_position
    assert v_stats.summary.dispositions == live_summary.dispositions
    assert v_stats.summary.plain_steps == live_summary.plain_steps
    assert sum(v_lock_plots.series_counts().values()) > 0
    # Every view works without a model; run controls are disabled.
    assert v_model.worker.runtime is None
    for b in (v_panel.run, v_panel.step_window, v_panel.step_token, v_panel.stop, v_panel.resume, v_panel.fault_cancel):
        assert not b.isEnabled()
    assert not v.menus.act_run.isEnabled()
    v_window_detail.select_window(1)
    assert v_window_detail.rows.rowCount() == doc["windows"][0]["verification_rows"]
    v_window_detail.detail_tabs.setCurrentWidget(v_window_detail.raw)  # rendered when shown
    assert '"window_index": 1' in v_window_detail.raw.toPlainText()
    # Export of a loaded document writes it again, still valid.
    again = tmp_path / "again.json"
    with qtbot.waitSignal(v_model.exported, timeout=60_000):
        v_model.commands.export_receipts_file(str(again))
    assert load_document(again)["windows"] == doc["windows"]
    v.new_live_session()
    assert v_panel.run.isEnabled() and v_model.session.origin == "live"


def test_bad_receipts_and_bad_model_show_errors_and_keep_the_session(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    run_to_end(qtbot, w)
    n = len(model.session.receipts)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "spec-inspector/receipts", "schema_version": 1}))
    assert "does not match schema" in open_receipts(qtbot, w, bad)
    assert "does not match schema" in model.last_error
    assert len(model.session.receipts) == n
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    with qtbot.waitSignal(model.worker.modelFailed, timeout=30_000):
        w.files.use_model(str(gguf))
    qtbot.waitUntil(lambda: "cannot use model" in model.last_error)
    assert w.isVisible() and len(model.session.receipts) == n
    assert model.worker.runtime is runtime  # the loaded model stays


def test_autosave_lines_and_recovery_offer(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    run_to_end(qtbot, w)
    path = model.settings.value("autosave/path")
    assert path and str(path).startswith(str(tmp_path / "data" / "autosave"))
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    kinds = [rec["kind"] for rec in lines]
    assert kinds[0] == "header" and kinds[-1] == "end"
    assert kinds.count("receipt") == len(model.session.receipts)
    assert kinds.count("discard") == len(model.session.discards)
    recovered = record_from_autosave(path)
    assert [t.token for t in recovered.tokens] == [t.token for t in model.session.tokens]
    assert len(recovered.receipts) == len(model.session.receipts)
    assert w.files.last_unclean_autosave() is None
    # A run that did not finish: drop the end line, mark unclean; a new window offers to open it.
    with open(path, "w", encoding="utf-8") as fh:
        for rec in lines[:-1]:
            fh.write(json.dumps(rec) + "\n")
    model.settings.setValue("autosave/clean", False)
    model.settings.sync()
    v = make_window(qtbot, None, tmp_path, offer_recovery=True)
    v_model = v.model
    v_window_detail = part(v, WindowDetail)
    qtbot.waitUntil(lambda: getattr(v.files, "recovery_box", None) is not None and v.files.recovery_box.isVisible())
    assert v.files.last_unclean_autosave() == str(path)
    v.files.recovery_box.button(v.files.recovery_box.StandardButton.Open).click()
    qtbot.waitUntil(lambda: v_model.session.origin == "autosave")
    v.refresh_all()
    assert v_window_detail.window_count() == len(model.session.receipts)


def test_damaged_autosave_opens_as_a_partial_view(qtbot, runtime, tmp_path, monkeypatch):
    """Every step of ``follow_window``'s runs is a window: several receipts to damage."""
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    window_detail = part(w, WindowDetail)
    run_to_end(qtbot, w)
    lines = open(model.settings.value("autosave/path"), encoding="utf-8").read().splitlines()
    receipts = [i for i, line in enumerate(lines) if '"kind": "receipt"' in line]
    assert len(receipts) >= 2
    torn = lines[receipts[0]][: len(lines[receipts[0]]) // 2]  # cut in the middle of a window
    bad_types = json.loads(lines[receipts[1]])
    bad_types["receipt"]["base_position"] = "twelve"
    damaged = [torn if i == receipts[0] else json.dumps(bad_types) if i == receipts[1] else line
               for i, line in enumerate(lines[:-1])]  # and no end line: the run was killed
    damaged.insert(2, "\x00\x01 not json")
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(damaged) + "\n" + '{"kind": "receipt", "rec', encoding="utf-8")
    assert open_receipts(qtbot, w, path) == ""
    s = model.session
    assert s.origin == "autosave" and s.skipped_lines == 4
    assert len(s.receipts) == len(receipts) - 2
    assert window_detail.window_count() == len(receipts) - 2
    assert "Partial view" in model.banner_html and "4 damaged or incomplete lines skipped" in model.banner_html
    # A .jsonl that is no autosave is refused with a dialog; the shown session stays.
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    assert "not an autosave file" in open_receipts(qtbot, w, other)
    assert model.session is s


def test_export_plots_as_png(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    timeline = part(w, Timeline)
    run_to_end(qtbot, w)
    written = model.commands.export_plots_to(str(tmp_path / "plots.png"))
    assert len(written) == 3
    for p in written:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # Issue 36, 8 (1): the timeline's legend is in the PNG, in its own row above the data, not over it.
    t = timeline
    image = QImage(written[0])
    assert written[0].endswith("-timeline.png") and image.size() == t.size()
    legend = t.legend.geometry()
    assert not t.legend.isHidden() and not legend.intersects(kv_data_rect(t))  # (its tab need not be shown)
    colours = {image.pixelColor(x, y).name() for x in range(legend.left(), legend.right())
               for y in range(legend.top(), legend.bottom())}
    assert "#ef6c00" in colours  # the ▲ of position_after_verification


def test_settings_are_restored(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path, max_tokens=77)
    panel = part(w, ControlPanel)
    panel.source.setCurrentText("scripted")
    panel.script.setPlainText("hello there")
    panel.temperature.setValue(0.7)
    panel.break_boxes["discard"].setChecked(True)
    panel.add_recent_model("/models/other.gguf", select=False)
    w.save_settings()
    v = make_window(qtbot, None, tmp_path, max_tokens=5)
    v_panel = part(v, ControlPanel)
    v_panel.apply_values({})  # nothing breaks on an empty dict
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert int(settings.value("controls/max_tokens")) == 77
    from inspector.gui.shell.main_window import MainWindow

    x = MainWindow(None, settings=settings, data_dir=tmp_path / "data")
    x_panel = part(x, ControlPanel)
    qtbot.addWidget(x)
    assert x_panel.source.currentText() == "scripted"
    assert x_panel.script.toPlainText() == "hello there"
    assert abs(x_panel.temperature.value() - 0.7) < 1e-9
    assert x_panel.max_tokens.value() == 77
    assert x_panel.break_on() == {"error", "discard"}
    assert "/models/other.gguf" in x_panel.recent_models()


def test_shortcuts_and_states(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    keys = {a.text(): [s.toString() for s in a.shortcuts()] for a in w.actions()}
    assert "Ctrl+R" in keys["Run / continue"]
    assert "Space" in keys["Pause"] and "Ctrl+P" in keys["Pause"]
    assert keys["Step window"] and keys["Step token"]
    assert "Ctrl+E" in keys["Export receipts…"] and "Ctrl+O" in keys["Open receipts…"]
    assert model.state == IDLE and panel.run.isEnabled() and not panel.resume.isEnabled()


def test_no_display_prints_one_line(monkeypatch, capsys):
    for k in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(gui_app.sys, "platform", "linux")
    assert gui_app.main([]) == gui_app.EXIT_NO_DISPLAY
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "spec-inspector run" in err[0] and "QT_QPA_PLATFORM=offscreen" in err[0]
    assert gui_app.display_available({"QT_QPA_PLATFORM": "offscreen"}, "linux")


def test_an_option_a_saved_file_does_not_record_shows_its_declared_default_not_the_live_value(qtbot, tmp_path):
    from inspector.sources.ngram import NGRAM

    w = make_window(qtbot, None, tmp_path)
    panel = part(w, ControlPanel)
    panel.set_source("ngram")
    n_min = panel.option_controls["ngram"]["n_min"]
    live = NGRAM.option("n_min").default + 1
    n_min.set_value(live)
    panel.show_saved({"source": {"name": "ngram", "settings": {"n_max": 5}}}, "hello", "m.gguf")
    assert panel.source_options()["n_max"] == 5
    assert panel.source_options()["n_min"] == NGRAM.option("n_min").default != live
    panel.show_live()
    assert panel.source_options()["n_min"] == live


def test_the_window_remembers_the_live_settings_not_those_of_an_opened_file(qtbot, tmp_path):
    """Issue 54: after viewing a receipts file, a restart showed the file's prompt instead of the user's."""
    w = make_window(qtbot, None, tmp_path, max_tokens=33)
    panel = part(w, ControlPanel)
    panel.prompt.setPlainText("my own prompt")
    panel.show_saved({"max_new_tokens": 7, "source": {"name": "ngram", "settings": {}}}, "the file's prompt",
                       "m.gguf")
    assert panel.prompt.toPlainText() == "the file's prompt"
    w.save_settings()
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert settings.value("controls/prompt") == "my own prompt"
    assert int(settings.value("controls/max_tokens")) == 33


def drop_on(window, path: str, kind: str = "drop") -> bool:
    """Drag ``path`` onto ``window`` (``kind``: "enter" for the drag entering, "drop" for the drop itself);
    returns whether the window accepted it."""
    from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(path)])
    if kind == "enter":
        ev = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                             Qt.KeyboardModifier.NoModifier)
    else:
        ev = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                        Qt.KeyboardModifier.NoModifier)
    ev.ignore()
    QApplication.sendEvent(window, ev)
    return ev.isAccepted()


def test_a_receipts_document_dropped_on_the_window_is_opened_and_other_files_are_refused(qtbot, tmp_path):
    from pathlib import Path

    from inspector.gui.files.file_drop import dropped_kind

    assert [dropped_kind(p) for p in ("a.GGUF", "r.json", "s.jsonl", "notes.txt")] == ["model", "receipts",
                                                                                    "receipts", None]
    w = make_window(qtbot, None, tmp_path)
    model = w.model
    doc = Path(__file__).parent / "data" / "receipts-v1.json"
    other = tmp_path / "notes.txt"
    other.write_text("not a receipts document", "utf-8")
    assert not drop_on(w, str(other), "enter")
    opened = []
    model.fileOpened.connect(lambda *args: opened.append(args))
    drop_on(w, str(other))
    qtbot.wait(200)
    assert opened == [] and model.session.origin == "live"
    assert drop_on(w, str(doc), "enter")
    with qtbot.waitSignal(model.fileOpened, timeout=120_000) as blocker:
        drop_on(w, str(doc))
    assert blocker.args[1] == ""
    assert model.session.origin == "document" and len(model.session.tokens) > 0
