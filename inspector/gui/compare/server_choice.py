"""The Compare window's llama-server choice (issue 36): "also through llama-server", which one, and
building it from the window.

``ServerChoice`` holds the box, the binary's path or a running server's URL (empty: the one
``find_llama_server`` finds: ``$SPEC_INSPECTOR_LLAMA_SERVER``, as the command line honours it, else
the one built from our llama.cpp), Choose… (a binary), and under them, while none is found or a
build goes, the build row: what is missing, Build llama-server, then the build's progress bar and
Cancel build. Widgets only: ``inspector.gui.compare.server_build.ServerBuildActions`` runs the build
on a thread of its own and calls ``set_building`` / ``set_build_ended``.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from inspector.bench.server_build import SERVER_BUILD_MINUTES, find_llama_server

ENV = "SPEC_INSPECTOR_LLAMA_SERVER"
"""The variable naming a llama-server binary, for the window as for ``compare --llama-server``."""
BUILD_ROOM = (f"no llama-server yet: build it from our llama.cpp ({SERVER_BUILD_MINUTES} minutes on 2 cores, once; "
              f"the window stays usable), or Choose… a llama-server binary, or type a running server's URL")


def found_text() -> str:
    """What an empty path means now, for the field's placeholder: the binary ``find_llama_server``
    gives and where it comes from, or "" when there is none."""
    found = find_llama_server()
    if found is None:
        return ""
    return f"{ENV}: {found}" if os.environ.get(ENV) else f"built from our llama.cpp: {found}"


class ServerChoice(QWidget):
    """"also through llama-server" and which one. ``with_server`` (the box), ``server_target`` (path or
    URL), ``choose`` (Choose…), and the build row: ``build_note``, ``build`` (Build llama-server),
    ``build_progress``, ``cancel_build``. ``changed()``: the box or the path changed (to remember)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.building = False
        self.with_server = QCheckBox("also through llama-server:")
        self.with_server.setToolTip(
            "after our runs, send the same prompt tokens to llama-server with each row's flags (greedy) and "
            "show its tokens/s, drafted and accepted beside ours, and whether it produced the same output")
        self.server_target = QLineEdit()
        self.server_target.setToolTip(
            "a llama-server binary (started on 127.0.0.1 for each row with our thread count and context, then "
            f"stopped), a running server's URL (http://…: used as it is, its flags cannot be checked), or empty: "
            f"${ENV} if set, else the llama-server built from our llama.cpp (Build llama-server, or the tests, "
            "or `spec-inspector compare --llama-server`)")
        self.server_target.setMinimumWidth(220)
        self.choose = QPushButton("Choose…")
        self.choose.setToolTip("pick a llama-server binary (remembered)")
        self.choose.setAutoDefault(False)
        self.build_note = QLabel("")
        self.build_note.setWordWrap(True)
        self.build = QPushButton("Build llama-server")
        self.build.setToolTip(f"build llama-server from the llama.cpp our runtime uses ({SERVER_BUILD_MINUTES} minutes "
                              "on 2 cores; needs the network, cmake and a C++ compiler), into the cache the command "
                              "line and the tests use")
        self.build_progress = QProgressBar()
        self.build_progress.setMaximumWidth(160)
        self.cancel_build = QPushButton("Cancel build")
        self.cancel_build.setToolTip("stop the build: its compilers are stopped and its files removed (a later build "
                                     "starts over)")
        for b in (self.build, self.cancel_build):
            b.setAutoDefault(False)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.with_server)
        top.addWidget(self.server_target, 1)
        top.addWidget(self.choose)
        self.build_row = QWidget()
        row = QHBoxLayout(self.build_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.build_progress)
        row.addWidget(self.build_note, 1)
        row.addWidget(self.build)
        row.addWidget(self.cancel_build)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(top)
        lay.addWidget(self.build_row)
        self.with_server.toggled.connect(self._changed)
        self.server_target.textChanged.connect(self._changed)
        self.choose.clicked.connect(lambda: self.choose_binary())
        self._ended = ""
        """What the last build said when it ended ("" none, or its error)."""
        self.update_state()

    def target(self) -> str | None:
        """What "also through llama-server" asks for: the typed path or URL, "" for the one
        ``find_llama_server`` finds, None when unticked (``CompareRequest.llama_server``)."""
        return self.server_target.text().strip() if self.with_server.isChecked() else None

    def choose_binary(self, path: str | None = None) -> str:
        """Use the llama-server binary ``path`` (None: pick one in a file dialog); ticks the box.
        Returns the path chosen ("" when the dialog was cancelled)."""
        if path is None:
            start = os.path.dirname(self.server_target.text().strip()) or os.path.expanduser("~")
            path, _ = QFileDialog.getOpenFileName(self, "Choose a llama-server binary", start, "All files (*)")
        if path:
            self.server_target.setText(path)
            self.with_server.setChecked(True)
        return path or ""

    def set_running(self, running: bool) -> None:
        """A comparison runs: which llama-server is locked (the build row is not)."""
        for w in (self.with_server, self.server_target, self.choose):
            w.setEnabled(not running)

    def set_building(self, text: str, percent: int | None = None) -> None:
        """A build goes: ``text`` (its step), the bar at ``percent`` (None: busy), Cancel build."""
        self.building = True
        self._ended = ""
        self.build_progress.setRange(0, 100 if percent is not None else 0)
        if percent is not None:
            self.build_progress.setValue(percent)
        self.build_note.setText(text)
        self.update_state()

    def set_build_ended(self, path: str, error: str, cancelled: bool) -> None:
        """The build ended: built at ``path``, failed with ``error``, or ``cancelled``."""
        self.building = False
        if path:
            self._ended = ""
            self.build_note.setText("")
        else:
            self._ended = "build cancelled" if cancelled else f"build failed: {error}"
        self.update_state()

    def update_state(self) -> None:
        """Show what an empty path means (placeholder), and the build row while none is found or a build
        goes."""
        found = found_text()
        self.server_target.setPlaceholderText(found or "none yet: Build llama-server, or Choose… a binary")
        missing = self.with_server.isChecked() and not self.server_target.text().strip() and not found
        self.build_row.setVisible(self.building or missing)
        self.build_progress.setVisible(self.building)
        self.cancel_build.setVisible(self.building)
        self.build.setVisible(not self.building)
        if not self.building:
            self.build_note.setText(f"{self._ended}; {BUILD_ROOM}" if self._ended else BUILD_ROOM)
            self.build_note.setStyleSheet("color:#c62828" if self._ended else "")
        else:
            self.build_note.setStyleSheet("")

    def _changed(self) -> None:
        self.update_state()
        self.changed.emit()
