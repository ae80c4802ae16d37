"""The Help menu (issue 26): keyboard shortcuts, the README's sections, and About with the versions
that decide what the window shows (the app, llama-cpp-python, the llama.cpp commit it vendors, Qt).

``HelpActions(host)`` adds the menu through ``host`` (a ``MenuHost``) and keeps its dialogs; the
texts come from the window's own actions and the installed package's metadata, so they are never
out of step with the build.
"""

from __future__ import annotations

import platform
from importlib import metadata

import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QMessageBox, QTextBrowser, QVBoxLayout, QWidget

import inspector
from inspector.bench.server_build import LLAMA_CPP_PYTHON_VERSION
from inspector.gui.ports.handles import MenuHost
from inspector.gui.shell.readme_view import ReadmeDialog, checkout_readme
from inspector.llama.server_parity import LLAMA_CPP_COMMIT

DISTRIBUTION = "spec-inspector"


def versions() -> dict[str, str]:
    """name -> version of what the window runs on (the app, llama-cpp-python, llama.cpp's commit,
    Qt and PySide6, Python); "not installed" where a distribution is missing."""
    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "spec-inspector": inspector.__version__,
        "llama-cpp-python": dist("llama-cpp-python"),
        "llama.cpp": f"commit {LLAMA_CPP_COMMIT} (vendored by llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}, "
                     "the version this spec-inspector pins)",
        "Qt": qVersion(),
        "PySide6": PySide6.__version__,
        "Python": platform.python_version(),
    }


def readme_text() -> str:
    """The README of the checkout the package runs from (``readme_view.checkout_readme``), else as the
    installed package carries it (its metadata's long description), or a line saying where to find it."""
    checkout = checkout_readme()
    if checkout is not None:
        return checkout.read_text("utf-8")
    try:
        text = metadata.metadata(DISTRIBUTION).get_payload()
    except metadata.PackageNotFoundError:
        text = ""
    return text or "The README is not in this installation: see README.md in spec-inspector's source."


FIELD_KEYS = (
    ("Send the next turn (in the Next turn message)", "Enter, Ctrl+Enter"),
    ("Step the next turn: hold before its first decode step (in the Next turn message)", "Shift+Enter"),
    ("Copy the selected rows of a table as tab-separated text", "Ctrl+C"),
)
"""Keys of text fields and tables, which no menu action carries (``conversation_bar``, ``table_copy``)."""


def shortcut_rows(window: QWidget) -> list[tuple[str, str]]:
    """(action text, its shortcuts) of every window action with a shortcut, in menu order, then the keys
    of fields and tables (``FIELD_KEYS``)."""
    rows = []
    for a in window.actions():
        keys = ", ".join(k.toString() for k in a.shortcuts())
        if keys:
            rows.append((a.text().replace("&", ""), keys))
    return rows + list(FIELD_KEYS)


class HelpActions:
    """The Help menu (``host``: a ``MenuHost``): Keyboard shortcuts (F1), Read me, About."""

    def __init__(self, host: MenuHost) -> None:
        self.parent = host.parent
        menu = host.add_menu("&Help")
        self.act_shortcuts = host.add_action(menu, "Keyboard shortcuts", self.show_shortcuts, ["F1"],
                                             "every shortcut of the window")
        self.act_readme = host.add_action(menu, "Read me", self.show_readme, [],
                                          "the README and the documentation: what each view shows, the command line, measurements")
        self.act_about = host.add_action(menu, "About spec-inspector", self.show_about)
        self.dialog: QDialog | None = None
        """The last dialog shown (tests read it)."""

    def _text_dialog(self, title: str, markdown: str, size: tuple[int, int] = (900, 640)) -> QDialog:
        d = QDialog(self.parent)
        d.setWindowTitle(title)
        view = QTextBrowser(d)
        view.setOpenExternalLinks(True)
        view.setMarkdown(markdown)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=d)
        buttons.rejected.connect(d.reject)
        layout = QVBoxLayout(d)
        layout.addWidget(view)
        layout.addWidget(buttons)
        d.resize(min(size[0], self.parent.width()), min(size[1], self.parent.height()))
        d.text = view  # tests read it
        self.dialog = d
        d.show()
        return d

    def show_shortcuts(self) -> QDialog:
        found = shortcut_rows(self.parent)
        rows = "\n".join(f"| {text} | `{keys}` |" for text, keys in found)
        # As big as the table (a row of text each), not the README's size.
        height = 110 + 26 * len(found)
        return self._text_dialog("Keyboard shortcuts", "| action | keys |\n|---|---|\n" + rows, (620, height))

    def show_readme(self) -> QDialog:
        """The README and the documentation's pages with their images (``readme_view.ReadmeDialog``)."""
        d = ReadmeDialog(self.parent, readme_text(), (min(900, self.parent.width()), min(640, self.parent.height())))
        self.dialog = d
        d.show()
        return d

    def show_about(self) -> QMessageBox:
        lines = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in versions().items())
        box = QMessageBox(QMessageBox.Icon.Information, "About spec-inspector",
                          "<b>spec-inspector</b>: speculative decoding on llama.cpp, window by window."
                          f"<table>{lines}</table>", QMessageBox.StandardButton.Ok, self.parent)
        self.dialog = box
        box.show()
        return box
