"""The window's llama.cpp context settings: ``-b`` (logical batch, our ``n_batch``), ``-ub``, ``-fa``,
``-ctk``, ``-ctv`` with llama.cpp's names and llama-server's defaults (``inspector.llama.context_settings``,
as ``run``'s flags in ``inspector.cli.context``).

A collapsed row under the Limits group (one line: the values); opened, a small grid. They apply at
the next model load, as the context size does: the worker loads the model again when the loaded one
has other settings (``RunConfig.context``), and the receipts record them from the runtime
(``llama_cpp`` block of the model, as headless runs do). A combination llama.cpp refuses
(``ContextSettings.refusal``) is one red line, and the run or load is refused before anything loads.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from inspector.engine.settings import check_n_batch_for_source
from inspector.gui.panel.widgets import ElidedLabel, spin
from inspector.llama.context_options import CONTEXT_KEYS, effective_context, loaded_context
from inspector.llama.context_settings import (
    FLASH_ATTN,
    KV_CACHE_TYPES,
    OUR_N_BATCH,
    SERVER_N_BATCH,
    SERVER_N_UBATCH,
    ContextSettings,
)

BATCH_MAX = 131072
NEXT_LOAD = "applied at the next model load (Run or Load reloads the model when they differ)"
TIPS = {
    "n_batch": f"llama.cpp -b, --batch-size (run --n-batch): logical batch, most rows per decode; speculation "
               f"needs >= 2 (proposals are capped at -b - 1) [{OUR_N_BATCH}; llama-server's: {SERVER_N_BATCH}]",
    "n_ubatch": f"llama.cpp -ub, --ubatch-size: physical batch, rows per compute pass, at most -b "
                f"[{SERVER_N_UBATCH}, llama-server's default]",
    "flash_attn": "llama.cpp -fa, --flash-attn: on, off, or auto = where the backend has it [auto, llama-server's "
                  "default]",
    "type_k": f"llama.cpp -ctk, --cache-type-k: K cache data type ({', '.join(KV_CACHE_TYPES)}) [f16, "
              "llama-server's default]",
    "type_v": f"llama.cpp -ctv, --cache-type-v: V cache data type ({', '.join(KV_CACHE_TYPES)}); a quantized one "
              "needs -fa on or auto [f16, llama-server's default]",
}
"""Each control's tooltip (``NEXT_LOAD`` is added)."""
FLAGS = {"n_batch": "-b", "n_ubatch": "-ub", "flash_attn": "-fa", "type_k": "-ctk", "type_v": "-ctv"}


def summary(options: dict) -> str:
    """One line of llama.cpp flags, e.g. ``-b 512 -ub 512 -fa auto -ctk f16 -ctv f16``."""
    return " ".join(f"{FLAGS[k]} {options[k]}" for k in CONTEXT_KEYS)


class ContextControls(QWidget):
    """``-b``, ``-ub``, ``-fa``, ``-ctk``, ``-ctv``: a header button that opens the grid, the values
    on one line beside it, and a red line when llama.cpp would refuse the combination."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(2)
        head = QHBoxLayout()
        self.toggle = QToolButton()
        self.toggle.setText("llama.cpp context")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolTip("llama.cpp's context settings (-b, -ub, -fa, -ctk, -ctv); " + NEXT_LOAD)
        self.line = ElidedLabel("")
        self.line.setStyleSheet("color:#555")
        head.addWidget(self.toggle)
        head.addWidget(self.line, 1)
        outer.addLayout(head)
        self.body = QWidget()
        grid = QGridLayout(self.body)
        grid.setContentsMargins(6, 0, 0, 0)
        grid.setSpacing(4)
        self.n_batch = spin(1, BATCH_MAX, OUR_N_BATCH)
        self.n_ubatch = spin(1, BATCH_MAX, SERVER_N_UBATCH)
        self.flash_attn = QComboBox()
        self.flash_attn.addItems(list(FLASH_ATTN))
        self.type_k, self.type_v = QComboBox(), QComboBox()
        for box in (self.type_k, self.type_v):
            box.addItems(list(KV_CACHE_TYPES))
            box.setCurrentText("f16")
        self.controls = {"n_batch": self.n_batch, "n_ubatch": self.n_ubatch, "flash_attn": self.flash_attn,
                         "type_k": self.type_k, "type_v": self.type_v}
        """Key of ``CONTEXT_KEYS`` -> its control."""
        places = {"n_batch": (0, 0), "n_ubatch": (0, 2), "type_k": (1, 0), "type_v": (1, 2), "flash_attn": (2, 0)}
        for key, w in self.controls.items():
            tag = QLabel(FLAGS[key])
            tip = f"{TIPS[key]}; {NEXT_LOAD}"
            tag.setToolTip(tip)
            w.setToolTip(tip)
            row, col = places[key]
            grid.addWidget(tag, row, col)
            grid.addWidget(w, row, col + 1)
            (w.valueChanged if key in ("n_batch", "n_ubatch") else w.currentTextChanged).connect(self._changed)
        self.refused = ElidedLabel("")
        """One red line: why llama.cpp would refuse these settings ("" when it would not)."""
        self.refused.setStyleSheet("color:#c62828")
        grid.addWidget(self.refused, 3, 0, 1, 4)
        outer.addWidget(self.body)
        self.body.hide()
        self.toggle.toggled.connect(self._open)
        self.loaded: dict | None = None
        """The settings of the loaded model (``show_loaded``), None before one is loaded."""
        self._changed()

    def _open(self, on: bool) -> None:
        self.body.setVisible(on)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)

    def _changed(self, *_args) -> None:
        values = self.values()
        refusal = self.refusal()
        self.refused.setText(refusal)
        self.refused.setVisible(bool(refusal))
        pending = self.loaded is not None and effective_context(values, 1 << 30) != effective_context(self.loaded,
                                                                                                     1 << 30)
        self.line.setText(summary(values) + (" · refused by llama.cpp" if refusal else "")
                          + (" · applies at the next model load" if pending and not refusal else ""))
        self.line.setToolTip(refusal or (NEXT_LOAD if pending else "the loaded model's llama.cpp context settings"
                                         if self.loaded is not None else NEXT_LOAD))
        self.changed.emit()

    def values(self) -> dict:
        """The settings as ``LlamaRuntime`` keyword options (``CONTEXT_KEYS``): whole numbers and names."""
        return {"n_batch": self.n_batch.value(), "n_ubatch": self.n_ubatch.value(),
                "flash_attn": self.flash_attn.currentText(), "type_k": self.type_k.currentText(),
                "type_v": self.type_v.currentText()}

    def apply_values(self, v: dict) -> None:
        """Set the controls from ``values()`` output (or QSettings' strings); unknown or bad entries
        are ignored."""
        for key in ("n_batch", "n_ubatch"):
            try:
                if v.get(key) is not None:
                    self.controls[key].setValue(int(v[key]))
            except (TypeError, ValueError):
                pass
        for key in ("flash_attn", "type_k", "type_v"):
            box = self.controls[key]
            if isinstance(v.get(key), str) and box.findText(v[key]) >= 0:
                box.setCurrentText(v[key])

    def settings(self) -> ContextSettings:
        """The physical batch, flash attention and cache types as ``ContextSettings``."""
        v = self.values()
        return ContextSettings(v["n_ubatch"], v["flash_attn"], v["type_k"], v["type_v"])

    def refusal(self) -> str:
        """Why llama.cpp would refuse these settings (``ContextSettings.refusal``), or ""."""
        return self.settings().refusal()

    def problem(self, speculative: bool) -> str:
        """What keeps a run from starting with these settings: llama.cpp's refusal, or a logical batch
        that leaves no room for a proposal (``check_n_batch_for_source``; ``speculative``: the source
        proposes). "" when nothing."""
        if self.refusal():
            return f"llama.cpp refuses this context: {self.refusal()}"
        try:
            check_n_batch_for_source(self.n_batch.value(), speculative=speculative)
        except ValueError as exc:
            return f"-b: {exc}"
        return ""

    def show_loaded(self, llama_cpp: dict | None) -> None:
        """A model was loaded with the settings of ``llama_cpp`` (its ``describe()`` block): the controls
        show them (as the context size shows the loaded model's)."""
        self.loaded = loaded_context(llama_cpp)
        if self.loaded is not None:
            self.apply_values(self.loaded)
        self._changed()
