"""The Help menu and the live tokens/s figure (issue 26: what a llama.cpp or LM Studio user looked for)."""

from __future__ import annotations

from importlib import metadata

import llama_cpp
from PySide6.QtCore import qVersion

from inspector.engine.stats import decode_tokens_per_s
from test_gui_support import make_window, run_to_end


def test_the_help_menu_lists_every_shortcut_the_readme_and_the_versions_it_runs_on(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    menus = [a.text().replace("&", "") for a in w.menuBar().actions()]
    assert menus[-1] == "Help"
    shortcuts = w.help.show_shortcuts().text.toMarkdown()  # table rows: "|action|keys|"
    for action, keys in (("Run / continue", "Ctrl+R"), ("Step window", "F10"), ("Step token", "F11"),
                         ("Compare configurations…", "Ctrl+K"), ("Keyboard shortcuts", "F1"),
                         ("Send the next turn", "Ctrl+Enter"), ("Step the next turn", "Shift+Enter")):
        line = next(l for l in shortcuts.splitlines() if l.strip("| ").startswith(action))
        assert keys in line, line
    d = w.help.dialog
    assert d.width() <= 620, "the shortcuts dialog is sized to its table, not the README's 900 px"
    readme = w.help.show_readme().text.toPlainText()
    assert "Quick start" in readme and "When things go wrong" in readme
    about = w.help.show_about().text()
    for version in (llama_cpp.__version__, metadata.version("llama-cpp-python"), "0c1e570", qVersion()):
        assert version in about


def test_the_status_bar_shows_the_runs_decode_tokens_per_second(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    assert w.status_speed.text() == ""  # nothing decoded yet
    run_to_end(qtbot, w)
    s = w.session
    assert s.decode_elapsed_us > 0
    assert w.status_speed.text() == f"{decode_tokens_per_s(len(s.tokens), s.decode_elapsed_us):.1f} tokens/s"
    assert w.status_speed.text() == f"{s.summary().decode_tokens_per_s:.1f} tokens/s"  # the summary's figure
