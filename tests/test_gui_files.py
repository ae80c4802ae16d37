"""Files: export/open receipts, autosave and recovery, PNG export, settings, bad model, no display.

Runs that need windows get them whatever the model says: single-token n-gram
matches (``ngram_min=1``: the first query always proposes) or ``follow_window``.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings
from PySide6.QtGui import QImage

from inspector.gui import app as gui_app
from inspector.receipts import load_document
from inspector.session.record_from_file import record_from_autosave
from inspector.session.run_states import IDLE
from test_gui_support import follow_window, kv_data_rect, make_window, open_receipts, run_to_end


def test_export_then_open_in_a_fresh_window(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, ngram_min=1)
    run_to_end(qtbot, w)
    out = tmp_path / "receipts.json"
    with qtbot.waitSignal(w.files.exported, timeout=60_000) as blocker:
        w.files.export_receipts(str(out))
    assert blocker.args == [str(out), ""]
    doc = load_document(out)  # validates against the schema
    assert len(doc["windows"]) == len(w.session.receipts) > 0
    live_summary = w.stats.summary

    v = make_window(qtbot, None, tmp_path, settings_file="viewer.ini")
    assert open_receipts(qtbot, v, out) == ""
    v.refresh_all()
    s = v.session
    assert s.origin == "document"
    assert [t.token for t in s.tokens] == [t.token for t in w.session.tokens]
    assert v.token_view.stream.toPlainText() == w.token_view.stream.toPlainText()
    assert v.window_detail.window_count() == w.window_detail.window_count() == len(doc["windows"])
    assert v.timeline.point_count() == w.timeline.point_count()
    assert v.event_log.kinds() == w.event_log.kinds()
    assert v.stats.summary.windows == live_summary.windows
    assert v.stats.summary.acceptance_rate == live_summary.acceptance_rate
    assert v.stats.summary.mean_accepted_length == live_summary.mean_accepted_length
    assert v.stats.summary.acceptance_by_position == live_summary.acceptance_by_position
    assert v.stats.summary.dispositions == live_summary.dispositions
    assert v.stats.summary.plain_steps == live_summary.plain_steps
    assert sum(v.lock_plots.series_counts().values()) > 0
    # Every view works without a model; run controls are disabled.
    assert v.worker.runtime is None
    for b in (v.panel.run, v.panel.step_window, v.panel.step_token, v.panel.stop, v.panel.resume, v.panel.fault_cancel):
        assert not b.isEnabled()
    assert not v.menus.act_run.isEnabled()
    v.window_detail.select_window(1)
    assert v.window_detail.rows.rowCount() == doc["windows"][0]["verification_rows"]
    v.window_detail.detail_tabs.setCurrentWidget(v.window_detail.raw)  # rendered when shown
    assert '"window_index": 1' in v.window_detail.raw.toPlainText()
    # Export of a loaded document writes it again, still valid.
    again = tmp_path / "again.json"
    with qtbot.waitSignal(v.files.exported, timeout=60_000):
        v.files.export_receipts(str(again))
    assert load_document(again)["windows"] == doc["windows"]
    v.new_live_session()
    assert v.panel.run.isEnabled() and v.session.origin == "live"


def test_bad_receipts_and_bad_model_show_errors_and_keep_the_session(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    run_to_end(qtbot, w)
    n = len(w.session.receipts)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "spec-inspector/receipts", "schema_version": 1}))
    assert "does not match schema" in open_receipts(qtbot, w, bad)
    assert "does not match schema" in w.last_error
    assert len(w.session.receipts) == n
    gguf = tmp_path / "broken.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    with qtbot.waitSignal(w.worker.modelFailed, timeout=30_000):
        w.files.use_model(str(gguf))
    qtbot.waitUntil(lambda: "cannot use model" in w.last_error)
    assert w.isVisible() and len(w.session.receipts) == n
    assert w.worker.runtime is runtime  # the loaded model stays


def test_autosave_lines_and_recovery_offer(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    run_to_end(qtbot, w)
    path = w.settings.value("autosave/path")
    assert path and str(path).startswith(str(tmp_path / "data" / "autosave"))
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    kinds = [rec["kind"] for rec in lines]
    assert kinds[0] == "header" and kinds[-1] == "end"
    assert kinds.count("receipt") == len(w.session.receipts)
    assert kinds.count("discard") == len(w.session.discards)
    recovered = record_from_autosave(path)
    assert [t.token for t in recovered.tokens] == [t.token for t in w.session.tokens]
    assert len(recovered.receipts) == len(w.session.receipts)
    assert w.files.last_unclean_autosave() is None
    # A run that did not finish: drop the end line, mark unclean; a new window offers to open it.
    with open(path, "w", encoding="utf-8") as fh:
        for rec in lines[:-1]:
            fh.write(json.dumps(rec) + "\n")
    w.settings.setValue("autosave/clean", False)
    w.settings.sync()
    v = make_window(qtbot, None, tmp_path, offer_recovery=True)
    qtbot.waitUntil(lambda: getattr(v.files, "recovery_box", None) is not None and v.files.recovery_box.isVisible())
    assert v.files.last_unclean_autosave() == str(path)
    v.files.recovery_box.button(v.files.recovery_box.StandardButton.Open).click()
    qtbot.waitUntil(lambda: v.session.origin == "autosave")
    v.refresh_all()
    assert v.window_detail.window_count() == len(w.session.receipts)


def test_damaged_autosave_opens_as_a_partial_view(qtbot, runtime, tmp_path, monkeypatch):
    """Every step of ``follow_window``'s runs is a window: several receipts to damage."""
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    run_to_end(qtbot, w)
    lines = open(w.settings.value("autosave/path"), encoding="utf-8").read().splitlines()
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
    s = w.session
    assert s.origin == "autosave" and s.skipped_lines == 4
    assert len(s.receipts) == len(receipts) - 2
    assert w.window_detail.window_count() == len(receipts) - 2
    assert "Partial view" in w.banner.text() and "4 damaged or incomplete lines skipped" in w.banner.text()
    # A .jsonl that is no autosave is refused with a dialog; the shown session stays.
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    assert "not an autosave file" in open_receipts(qtbot, w, other)
    assert w.session is s


def test_export_plots_as_png(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    run_to_end(qtbot, w)
    written = w.files.export_plots(str(tmp_path / "plots.png"))
    assert len(written) == 3
    for p in written:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # Issue 36, 8 (1): the timeline's legend is in the PNG, in its own row above the data, not over it.
    t = w.timeline
    image = QImage(written[0])
    assert written[0].endswith("-timeline.png") and image.size() == t.size()
    legend = t.legend.geometry()
    assert not t.legend.isHidden() and not legend.intersects(kv_data_rect(t))  # (its tab need not be shown)
    colours = {image.pixelColor(x, y).name() for x in range(legend.left(), legend.right())
               for y in range(legend.top(), legend.bottom())}
    assert "#ef6c00" in colours  # the ▲ of position_after_verification


def test_settings_are_restored(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path, max_tokens=77)
    w.panel.source.setCurrentText("scripted")
    w.panel.script.setPlainText("hello there")
    w.panel.temperature.setValue(0.7)
    w.panel.break_boxes["discard"].setChecked(True)
    w.panel.add_recent_model("/models/other.gguf", select=False)
    w.save_settings()
    v = make_window(qtbot, None, tmp_path, max_tokens=5)
    v.panel.apply_values({})  # nothing breaks on an empty dict
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    assert int(settings.value("controls/max_tokens")) == 77
    from inspector.gui.shell.main_window import MainWindow

    x = MainWindow(None, settings=settings, data_dir=tmp_path / "data")
    qtbot.addWidget(x)
    assert x.panel.source.currentText() == "scripted"
    assert x.panel.script.toPlainText() == "hello there"
    assert abs(x.panel.temperature.value() - 0.7) < 1e-9
    assert x.panel.max_tokens.value() == 77
    assert x.panel.break_on() == {"error", "discard"}
    assert "/models/other.gguf" in x.panel.recent_models()


def test_shortcuts_and_states(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    keys = {a.text(): [s.toString() for s in a.shortcuts()] for a in w.actions()}
    assert "Ctrl+R" in keys["Run / continue"]
    assert "Space" in keys["Pause"] and "Ctrl+P" in keys["Pause"]
    assert keys["Step window"] and keys["Step token"]
    assert "Ctrl+E" in keys["Export receipts…"] and "Ctrl+O" in keys["Open receipts…"]
    assert w.state == IDLE and w.panel.run.isEnabled() and not w.panel.resume.isEnabled()


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
    w.panel.set_source("ngram")
    n_min = w.panel.option_controls["ngram"]["n_min"]
    live = NGRAM.option("n_min").default + 1
    n_min.set_value(live)
    w.panel.show_saved({"source": {"name": "ngram", "settings": {"n_max": 5}}}, "hello", "m.gguf")
    assert w.panel.source_options()["n_max"] == 5
    assert w.panel.source_options()["n_min"] == NGRAM.option("n_min").default != live
    w.panel.show_live()
    assert w.panel.source_options()["n_min"] == live


def test_the_window_remembers_the_live_settings_not_those_of_an_opened_file(qtbot, tmp_path):
    """Issue 54: after viewing a receipts file, a restart showed the file's prompt instead of the user's."""
    w = make_window(qtbot, None, tmp_path, max_tokens=33)
    w.panel.prompt.setPlainText("my own prompt")
    w.panel.show_saved({"max_new_tokens": 7, "source": {"name": "ngram", "settings": {}}}, "the file's prompt",
                       "m.gguf")
    assert w.panel.prompt.toPlainText() == "the file's prompt"
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
    doc = Path(__file__).parent / "data" / "receipts-v1.json"
    other = tmp_path / "notes.txt"
    other.write_text("not a receipts document", "utf-8")
    assert not drop_on(w, str(other), "enter")
    opened = []
    w.files.opened.connect(lambda *args: opened.append(args))
    drop_on(w, str(other))
    qtbot.wait(200)
    assert opened == [] and w.session.origin == "live"
    assert drop_on(w, str(doc), "enter")
    with qtbot.waitSignal(w.files.opened, timeout=120_000) as blocker:
        drop_on(w, str(doc))
    assert blocker.args[1] == ""
    assert w.session.origin == "document" and len(w.session.tokens) > 0
