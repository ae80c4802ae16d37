"""The window's Serve has llama-server's prompt cache switch (``-cram``): on by default, remembered, and what it
says is what the server runs with."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB
from test_gui_support import make_window


def _serve(qtbot, w):
    w.menus.act_serve.trigger()
    qtbot.waitUntil(lambda: w.serve.address != "" or not w.menus.act_serve.isChecked(), timeout=30_000)
    assert w.serve.address, w.requests.status.text()
    return w.serve.server


def _stop(qtbot, w):
    w.menus.act_serve.trigger()
    qtbot.waitUntil(lambda: w.state == "idle", timeout=30_000)


def test_the_prompt_cache_is_on_by_default_and_off_when_unchecked_and_remembered(qtbot, runtime, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("serve/port", 0)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path)
    w.serve.receipts_dir = None
    assert w.requests.cache_ram.isChecked()
    assert w.requests.slot_options()["cache_ram_mib"] == DEFAULT_CACHE_RAM_MIB
    server = _serve(qtbot, w)
    assert server.slots.prompt_cache is not None
    assert not w.requests.cache_ram.isEnabled(), "the switch must not change while serving"
    _stop(qtbot, w)
    w.requests.cache_ram.setChecked(False)
    server = _serve(qtbot, w)
    assert server.slots.prompt_cache is None
    _stop(qtbot, w)
    w.close()
    again = make_window(qtbot, runtime, tmp_path)
    assert not again.requests.cache_ram.isChecked()
    assert again.requests.slot_options()["cache_ram_mib"] == 0
