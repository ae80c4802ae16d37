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


def test_read_me_shows_the_readmes_images_and_opens_at_the_window(qtbot, tmp_path, monkeypatch):
    """Issue 36, 8 (2): Help > Read me showed a broken image (``assets/screenshot.png`` looked up beside the
    working folder) and opened at the install commands. Every image resolves from the installed package's
    assets, no wider than the view, and the view opens at "The window"; Quick start is a pick away."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QImage, QTextDocument

    import inspector
    from inspector.gui.shell.readme_view import first_visible_heading, image_positions, section_at

    monkeypatch.chdir(tmp_path)  # a user starts the app anywhere, not in a clone
    w = make_window(qtbot, None, tmp_path)
    w.resize(1280, 800)
    d = w.help.show_readme()
    qtbot.waitExposed(d)
    view, doc = d.text, d.text.document()
    qtbot.waitUntil(lambda: not view.fit_timer.isActive() and view.fitted_width > 600)  # images fit the shown width
    names = [name for _p, name in image_positions(doc)]
    assert "assets/screenshot.png" in names and not d.images_left_out
    assets = inspector.asset_path("").resolve()
    for name in names:
        image = doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(name))  # what the view draws
        assert isinstance(image, QImage) and not image.isNull(), f"unresolved image {name}"
        assert inspector.asset_path(name.removeprefix("assets/")).resolve().is_relative_to(assets)
    qtbot.waitUntil(lambda: first_visible_heading(view) == "The window")
    assert view.verticalScrollBar().value() > 0 and d.sections.currentText() == "The window"  # Quick start is above
    assert view.horizontalScrollBar().maximum() == 0  # images and code lines fit the width
    d.sections.setCurrentIndex(d.sections.findText("Quick start"))
    d.go_to(d.sections.currentData())
    qtbot.waitUntil(lambda: first_visible_heading(view) == "Quick start")
    view.verticalScrollBar().setValue(0)  # the picker follows the text: the top is the README's title
    assert d.sections.currentText() == "spec-inspector"
    view.setSource(QUrl("#several-machines-llamacpp-rpc"))  # the README's own links land on their heading
    qtbot.waitUntil(lambda: first_visible_heading(view) == "Several machines: llama.cpp RPC")
    d.resize(640, 480)  # a narrower dialog: the images shrink, the text at the top stays
    qtbot.waitUntil(lambda: view.fitted_width < 640)
    qtbot.waitUntil(lambda: "Several machines" in section_at(view))
    assert "Quick start" in view.toPlainText() and "When things go wrong" in view.toPlainText()


def test_read_me_leaves_out_an_image_it_cannot_find(qtbot):
    from inspector.gui.shell.readme_view import ReadmeDialog, image_positions

    d = ReadmeDialog(None, "# t\n\n![gone](assets/no-such-image.png)\n\n## The window\n\ntext\n\n"
                           "![web](https://example.org/x.png)\n", (600, 400))
    qtbot.addWidget(d)
    assert d.images_left_out == ["assets/no-such-image.png", "https://example.org/x.png"]
    assert image_positions(d.text.document()) == [] and "text" in d.text.toPlainText()
