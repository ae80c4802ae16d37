"""The window's Serve has llama-server's prompt cache switch (``-cram``): on by default, remembered, and what it
says is what the server runs with."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from inspector.gui.serve.requests_view import RequestsView
from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB
from test_gui_support import make_window, part


def _serve(qtbot, w):
    model = w.model
    requests_view = part(w, RequestsView)
    model.commands.serve(True)
    qtbot.waitUntil(lambda: model.serve_address != "" or not model.serving, timeout=30_000)
    assert model.serve_address, requests_view.status.text()
    return model.server


def _stop(qtbot, w):
    model = w.model
    model.commands.serve(False)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)


def test_the_prompt_cache_is_on_by_default_and_off_when_unchecked_and_remembered(qtbot, runtime, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("serve/port", 0)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    requests_view = part(w, RequestsView)
    model.serve_receipts_dir = None
    assert requests_view.cache_ram.isChecked()
    assert requests_view.slot_options()["cache_ram_mib"] == DEFAULT_CACHE_RAM_MIB
    server = _serve(qtbot, w)
    assert server.slots.prompt_cache is not None
    assert not requests_view.cache_ram.isEnabled(), "the switch must not change while serving"
    _stop(qtbot, w)
    requests_view.cache_ram.setChecked(False)
    server = _serve(qtbot, w)
    assert server.slots.prompt_cache is None
    _stop(qtbot, w)
    w.close()
    again = make_window(qtbot, runtime, tmp_path)
    again_requests_view = part(again, RequestsView)
    assert not again_requests_view.cache_ram.isChecked()
    assert again_requests_view.slot_options()["cache_ram_mib"] == 0
