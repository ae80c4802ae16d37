"""The window's llama.cpp context settings, one control per declaration of
``inspector.engine.llama_settings.CONTEXT`` (``-b``, logical batch, our ``n_batch``; ``-ub``, ``-fa``,
``-ctk``, ``-ctv``; llama.cpp's names and llama-server's defaults, as ``run``'s flags in
``inspector.cli.context``, which are made from the same declarations).

A collapsed row under the Limits group (one line: the values); opened, a small grid. They apply at
the next model load, as the context size does: the worker loads the model again when the loaded one
has other settings (``ModelLoad.context``), and the receipts record them from the runtime
(``llama_cpp`` block of the model, as headless runs do). A combination llama.cpp refuses
(``ContextSettings.refusal``) is one red line, and the run or load is refused before anything loads.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGridLayout, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from inspector.engine import llama_settings
from inspector.engine.settings import check_n_batch_for_source
from inspector.gui.panel.widgets import ElidedLabel, setting_control, setting_tip
from inspector.llama.context_settings import ContextSettings, context_from_values, effective_context, loaded_context

NEXT_LOAD = "applied at the next model load (Run or Load reloads the model when they differ)"


def summary(options: dict) -> str:
    """One line of llama.cpp flags, e.g. ``-b 512 -ub 512 -fa auto -ctk f16 -ctv f16``."""
    return " ".join(f"{s.flags[0]} {options[s.name]}" for s in llama_settings.CONTEXT.values())


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
        flags = ", ".join(s.flags[0] for s in llama_settings.CONTEXT.values())
        self.toggle.setToolTip(f"llama.cpp's context settings ({flags}); {NEXT_LOAD}")
        self.line = ElidedLabel("")
        self.line.setStyleSheet("color:#555")
        head.addWidget(self.toggle)
        head.addWidget(self.line, 1)
        outer.addLayout(head)
        self.body = QWidget()
        grid = QGridLayout(self.body)
        grid.setContentsMargins(6, 0, 0, 0)
        grid.setSpacing(4)
        self.controls = {s.name: setting_control(s, setting_tip(s, NEXT_LOAD))
                         for s in llama_settings.CONTEXT.values()}
        """A declared setting's name (``CONTEXT``) -> its control, two to a row in declaration order."""
        self.n_batch, self.n_ubatch = self.controls["n_batch"], self.controls["n_ubatch"]
        self.flash_attn, self.type_k, self.type_v = (self.controls[k] for k in ("flash_attn", "type_k", "type_v"))
        for i, (name, w) in enumerate(self.controls.items()):
            s = llama_settings.CONTEXT[name]
            tag = QLabel(s.label)
            tag.setToolTip(w.toolTip())
            row, col = i // 2, (i % 2) * 2
            grid.addWidget(tag, row, col)
            grid.addWidget(w, row, col + 1)
            (w.currentTextChanged if isinstance(w, QComboBox) else w.valueChanged).connect(self._changed)
        rows = (len(self.controls) + 1) // 2
        self.refused = ElidedLabel("")
        """One red line: why llama.cpp would refuse these settings ("" when it would not)."""
        self.refused.setStyleSheet("color:#c62828")
        grid.addWidget(self.refused, rows, 0, 1, 4)
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
        """The settings by their declared names (``CONTEXT_KEYS``): whole numbers and names."""
        return {name: w.currentText() if isinstance(w, QComboBox) else w.value()
                for name, w in self.controls.items()}

    def apply_values(self, v: dict) -> None:
        """Set the controls from ``values()`` output (or QSettings' strings); unknown or bad entries
        are ignored."""
        for name, w in self.controls.items():
            if isinstance(w, QComboBox):
                if isinstance(v.get(name), str) and w.findText(v[name]) >= 0:
                    w.setCurrentText(v[name])
                continue
            try:
                if v.get(name) is not None:
                    w.setValue(llama_settings.CONTEXT[name].type(v[name]))
            except (TypeError, ValueError):
                pass

    def settings(self) -> ContextSettings:
        """The settings but the logical batch as ``ContextSettings``."""
        return context_from_values(self.values())[1]

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
