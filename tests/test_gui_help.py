"""The Help menu and the live tokens/s figure (issue 26: what a llama.cpp or LM Studio user looked for)."""

from __future__ import annotations

from importlib import metadata

import llama_cpp
from PySide6.QtCore import qVersion

from PySide6.QtWidgets import QLabel
from inspector.engine.stats import decode_tokens_per_s
from test_gui_support import make_window, part, run_to_end


def test_the_help_menu_lists_every_shortcut_the_readme_and_the_versions_it_runs_on(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    menus = [a.text().replace("&", "") for a in w.menuBar().actions()]
    assert menus[-1] == "Help"
    d = model.commands.show_shortcuts()
    shortcuts = d.text.toMarkdown()  # table rows: "|action|keys|"
    for action, keys in (("Run / continue", "Ctrl+R"), ("Step window", "F10"), ("Step token", "F11"),
                         ("Compare configurations…", "Ctrl+K"), ("Keyboard shortcuts", "F1"),
                         ("Send the next turn", "Ctrl+Enter"), ("Step the next turn", "Shift+Enter")):
        line = next(l for l in shortcuts.splitlines() if l.strip("| ").startswith(action))
        assert keys in line, line
    assert d.width() <= 620, "the shortcuts dialog is sized to its table, not the README's 900 px"
    readme = model.commands.show_readme().text.toPlainText()
    assert "Quick start" in readme and "When things go wrong" in readme
    about = model.commands.show_about().text()
    for version in (llama_cpp.__version__, metadata.version("llama-cpp-python"), "0c1e570", qVersion()):
        assert version in about


def test_the_status_bar_shows_the_runs_decode_tokens_per_second(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    status_speed = part(w, QLabel, "status-speed")
    assert status_speed.text() == ""  # nothing decoded yet
    run_to_end(qtbot, w)
    s = model.session
    assert s.decode_elapsed_us > 0
    assert status_speed.text() == f"{decode_tokens_per_s(len(s.tokens), s.decode_elapsed_us):.1f} tokens/s"
    assert status_speed.text() == f"{s.summary().decode_tokens_per_s:.1f} tokens/s"  # the summary's figure


def test_read_me_shows_the_readmes_images_and_opens_at_its_top(qtbot, tmp_path, monkeypatch):
    """Issue 36, 8 (2): Help > Read me showed a broken image (``assets/screenshot.png`` looked up beside the
    working folder). Every image of the README and of a page (``../../../assets/...``) resolves from the
    installed package's assets, no wider than the view; it opens at the README's top (issue 55: the README is
    short, the rest is in the pages), every section a pick away."""
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QImage, QTextDocument

    import inspector
    from inspector.gui.shell.readme_view import first_visible_heading, image_positions, section_at

    monkeypatch.chdir(tmp_path)  # a user starts the app anywhere, not in a clone
    w = make_window(qtbot, None, tmp_path)
    model = w.model
    w.resize(1280, 800)
    d = model.commands.show_readme()
    qtbot.waitExposed(d)
    view = d.text
    qtbot.waitUntil(lambda: not view.fit_timer.isActive() and view.fitted_width > 600)  # images fit the shown width
    # Opened at the top, the section picker names the top's section (it named the last one before the page was
    # laid out: "When things go wrong").
    assert view.verticalScrollBar().value() == 0 and d.sections.currentText() == "spec-inspector"
    assets = inspector.asset_path("").resolve()
    for page, image in (("README.md", "assets/screenshot.png"), ("window.md", "../../../assets/tune.png")):
        if page != d.page:
            d.show_page(page)
        doc = view.document()
        names = [name for _p, name in image_positions(doc)]
        assert image in names and not d.images_left_out, (page, names, d.images_left_out)
        for name in names:
            image = doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(name))  # what the view draws
            assert isinstance(image, QImage) and not image.isNull(), f"unresolved image {name} on {page}"
            assert inspector.asset_path(name.rsplit("assets/", 1)[1]).resolve().is_relative_to(assets)
        assert view.horizontalScrollBar().maximum() == 0  # images and code lines fit the width
    d.show_page("README.md")
    assert view.verticalScrollBar().value() == 0 and d.sections.currentText() == "spec-inspector"
    d.sections.setCurrentIndex(d.sections.findText("Quick start"))
    d.go_to(d.sections.currentData())
    qtbot.waitUntil(lambda: first_visible_heading(view) == "Quick start")
    d.show_page("run.md", "same-as-llama-server")  # a page at a heading
    qtbot.waitUntil(lambda: first_visible_heading(view) == "Same as llama-server")
    assert d.sections.currentText().strip() == "Same as llama-server"
    d.resize(640, 480)  # a narrower dialog: the images shrink, the text at the top stays
    qtbot.waitUntil(lambda: view.fitted_width < 640)
    qtbot.waitUntil(lambda: "Same as llama-server" in section_at(view))


def click_link(qtbot, view, text: str) -> None:
    """Click the link whose text is ``text`` in the QTextBrowser ``view`` (scrolled into view first)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QTextDocument

    cursor = view.document().find(text, 0, QTextDocument.FindFlag.FindCaseSensitively)
    assert not cursor.isNull() and cursor.charFormat().isAnchor(), f"no link {text!r}"
    cursor.setPosition(cursor.selectionStart() + 1)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.cursorRect(cursor).center())


def test_read_me_follows_the_links_of_the_readme_and_the_pages_and_lists_every_page(qtbot):
    """Issue 55: the README links each documentation page; in Read me a click shows that page, a page's link
    to another page's heading shows it there, and the page list holds the README and every page."""
    from pathlib import Path

    import inspector
    from inspector.gui.shell.readme_view import ReadmeDialog, first_visible_heading
    from inspector.gui.shell.help_menu import readme_text

    d = ReadmeDialog(None, readme_text(), (900, 640))
    qtbot.addWidget(d)
    d.show()
    qtbot.waitExposed(d)
    pages = sorted(p.name for p in (Path(inspector.__file__).parent / "docs" / "pages").glob("*.md"))
    listed = [d.pages.itemData(i) for i in range(d.pages.count())]
    assert listed[0] == "README.md" and sorted(listed[1:]) == pages
    click_link(qtbot, d.text, "Serve")  # README: [Serve](inspector/docs/pages/serve.md)
    qtbot.waitUntil(lambda: d.page == "serve.md")
    assert d.pages.currentData() == "serve.md" and "API endpoints" in d.text.toPlainText()
    d.show_page("install.md")
    click_link(qtbot, d.text, "Several machines")  # install.md: [Several machines](rpc.md)
    qtbot.waitUntil(lambda: d.page == "rpc.md")
    d.show_page("window.md")
    click_link(qtbot, d.text, "Same as llama-server")  # window.md: [...](run.md#same-as-llama-server)
    qtbot.waitUntil(lambda: d.page == "run.md")
    qtbot.waitUntil(lambda: first_visible_heading(d.text) == "Same as llama-server")
    d.show_page("receipts.md")  # generated from the schema, as the site's build does
    assert "Request document" in d.text.toPlainText() and "model.sha256" in d.text.toPlainText()


def test_read_me_leaves_out_an_image_it_cannot_find(qtbot):
    from inspector.gui.shell.readme_view import ReadmeDialog, image_positions

    d = ReadmeDialog(None, "# t\n\n![gone](assets/no-such-image.png)\n\n## The window\n\ntext\n\n"
                           "![web](https://example.org/x.png)\n", (600, 400))
    qtbot.addWidget(d)
    assert d.images_left_out == ["assets/no-such-image.png", "https://example.org/x.png"]
    assert image_positions(d.text.document()) == [] and "text" in d.text.toPlainText()
