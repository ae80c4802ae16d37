"""The model panel's choices: which model file, in which weight type, on which devices.

``ModelChoice`` is the control panel's Model group (a widget the panel owns): the model list
(bundled + recent files), the **weights** choice remembered per model
(``inspector.llama.quantize.open_target``), and llama.cpp's offload settings with its
names (``-ngl``, ``--rpc``; ``inspector.llama.devices.Offload``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout

from inspector.gui.panel.widgets import Note, spin
from inspector.llama import bundled_model_path
from inspector.llama.devices import Offload, parse_endpoints
from inspector.llama.quantize import TARGET_TYPES

BUNDLED = "(bundled SmolLM2-135M-Instruct)"
NGL_DEFAULT = -1
"""The GPU layers spin box's "default" value: llama.cpp's own default (all layers when a device exists)."""


class ModelChoice(QGroupBox):
    """The Model group of the control panel: model list, weights, offload (-ngl, RPC servers), the
    status line, and what they say.

    ``showing_saved()``: the panel shows a saved session's settings (then the weights box keeps the
    saved session's form when the model list changes)."""

    def __init__(self, showing_saved: Callable[[], bool], parent=None) -> None:
        super().__init__("Model", parent)
        self._showing_saved = showing_saved
        gl = QVBoxLayout(self)
        gl.setContentsMargins(6, 4, 6, 4)
        gl.setSpacing(4)
        self.model_combo = QComboBox()
        self.model_combo.setToolTip("recent models; drop a .gguf file on the window to add one")
        self.model_combo.addItem(BUNDLED, "")
        self.open_model = QPushButton("Open…")
        self.open_model.setToolTip("Open a GGUF model file")
        self.model_status = Note("not loaded")
        row = QHBoxLayout()
        row.addWidget(self.model_combo, 1)
        row.addWidget(self.open_model)
        gl.addLayout(row)
        self.weights = QComboBox()
        self.stored_weights: dict[str, str] = {}
        """Model path ("" = bundled) -> its file's own main weight type, once a load told it."""
        self._fill_weights("")
        self.weights.setToolTip(
            "--target-weights: run the model in this weight type, converted once with llama.cpp's quantize "
            "(cached); remembered per model. On a CPU the weight type decides whether extra verification rows "
            "are cheap: Cost model tab > Try weight types measures it")
        self.weights_by_model: dict[str, str] = {}
        """Model path ("" = bundled) -> the weight type chosen for it (absent: as stored)."""
        wrow = QHBoxLayout()
        wrow.addWidget(QLabel("weights"))
        wrow.addWidget(self.weights, 1)
        gl.addLayout(wrow)
        orow = QHBoxLayout()
        self.gpu_layers = spin(NGL_DEFAULT, 999, NGL_DEFAULT,
                               "-ngl / --n-gpu-layers: layers on the GPU or the RPC servers (default: llama.cpp's, "
                               "all of them when there is a device to put them on)")
        self.gpu_layers.setSpecialValueText("default")
        self.rpc_servers = QLineEdit()
        self.rpc_servers.setPlaceholderText("HOST:PORT,… (llama.cpp RPC)")
        self.rpc_servers.setToolTip(
            "--rpc: offload to llama.cpp RPC servers (spec-inspector rpc-server on the other machine). The model "
            "then runs in a child process: a server that goes away ends the run with its receipts kept, never "
            "the window. The protocol has no authentication: private networks only")
        orow.addWidget(QLabel("-ngl"))
        orow.addWidget(self.gpu_layers)
        orow.addWidget(QLabel("RPC"))
        orow.addWidget(self.rpc_servers, 1)
        gl.addLayout(orow)
        gl.addWidget(self.model_status)
        self.model_combo.currentIndexChanged.connect(self.show_model_weights)
        self.weights.currentIndexChanged.connect(self._weights_chosen)

    def offload(self) -> Offload:
        """The offload settings typed in (``Offload``). Raises ``ValueError`` for a bad RPC list."""
        text = self.rpc_servers.text().strip()
        ngl = self.gpu_layers.value()
        return Offload(n_gpu_layers=None if ngl == NGL_DEFAULT else ngl, rpc=parse_endpoints(text) if text else ())

    def model_path(self) -> str:
        """The chosen model file ("" = bundled)."""
        return self.model_combo.currentData() or ""

    def target_weights(self) -> str:
        """The weight type the chosen model runs in ("" = as stored; else a ``TARGET_TYPES`` entry)."""
        return self.weights.currentData() or ""

    def set_target_weights(self, weight_type: str) -> None:
        """Run the chosen model in ``weight_type`` ("" = as stored; its file's own type is too) from now
        on (remembered for it)."""
        if weight_type == self.stored_weights.get(self.model_path()):
            weight_type = ""
        i = self.weights.findData(weight_type or "")
        if i >= 0:
            self.weights.setCurrentIndex(i)
            self._weights_chosen(i)

    def _weights_chosen(self, _index: int) -> None:
        t = self.target_weights()
        if t:
            self.weights_by_model[self.model_path()] = t
        else:
            self.weights_by_model.pop(self.model_path(), None)

    def show_model_weights(self, _index: int = 0) -> None:
        """Show the weights choice remembered for the model now chosen, among the forms it can be
        converted to (never its own type: that is "as stored"). A saved session shown keeps its own."""
        if self._showing_saved():
            return
        path = self.model_path()
        self._fill_weights(self.stored_weights.get(path, ""), self.weights_by_model.get(path, ""))

    def _fill_weights(self, stored: str, chosen: str = "") -> None:
        """The weights box's entries for a file stored in ``stored`` ("" = not known yet), ``chosen`` selected."""
        box = self.weights
        box.blockSignals(True)
        box.clear()
        box.addItem(f"as stored ({stored})" if stored else "as stored", "")
        for t in TARGET_TYPES:
            if t != stored:
                box.addItem(f"{t} form", t)
        box.setCurrentIndex(max(0, box.findData(chosen)))
        box.blockSignals(False)

    def show_saved_weights(self, weight_type: str, stored: str = "") -> None:
        """Show the weight form a saved session ran in ("" = as stored, its file's type ``stored`` when
        known), read only."""
        self._fill_weights(stored, weight_type)

    def know_stored_weights(self, path: str, weight_type: str) -> None:
        """The file of ``path`` ("" = bundled) is stored in ``weight_type`` (a load read it): the box
        offers no conversion to that type; a remembered choice of it is "as stored"."""
        if not weight_type:
            return
        self.stored_weights[path] = weight_type
        if self.weights_by_model.get(path) == weight_type:
            del self.weights_by_model[path]
        if path == self.model_path():
            self.show_model_weights()

    def add_recent_model(self, path: str, select: bool = True) -> None:
        """Put ``path`` (a GGUF file) in the model list, first after the bundled entry; the
        bundled model's own file is its entry, never a second one."""
        i = self._model_index(path)
        if i < 0:
            self.model_combo.insertItem(1, Path(path).name, path)
            self.model_combo.setItemData(1, path, Qt.ItemDataRole.ToolTipRole)
            i = 1
            while self.model_combo.count() > 9:
                self.model_combo.removeItem(self.model_combo.count() - 1)
        if select:
            self.model_combo.setCurrentIndex(i)

    def _model_index(self, path: str) -> int:
        """The model list's entry for ``path``: 0 for the bundled file, -1 when absent."""
        if not path:
            return 0
        try:
            if Path(path).resolve() == bundled_model_path().resolve():
                return 0
        except Exception:  # no bundled model installed: every path is a recent one
            pass
        return self.model_combo.findData(path)

    def select_model(self, path: str) -> None:
        """Select the entry of ``path`` (e.g. the loaded model), adding it if needed."""
        self.add_recent_model(path, select=True)

    def remove_recent_model(self, path: str) -> None:
        """Drop ``path`` from the model list (a file that failed to load); never the bundled entry."""
        i = self._model_index(path)
        if i > 0:
            self.model_combo.removeItem(i)

    def recent_models(self) -> list[str]:
        """The model list's files, most recent first (the bundled entry not included)."""
        return [self.model_combo.itemData(i) for i in range(1, self.model_combo.count())]
