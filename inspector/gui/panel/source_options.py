"""The window's source pages, generated from the sources' declared options.

Every option a source declares (``inspector.sources.descriptors.Option``) with a
control gets one: a spin box (``int``, ``float``), a combo box (``choice``), a line or
text edit (``text``), a line edit with an Open… button (``path``). Numbers and choices
share rows (three at most, each with its label); texts and paths get a row each.
Third-party sources that declare options get their page this way, without GUI code.
"""

from __future__ import annotations

import logging
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QWidget

from inspector.gui.panel.widgets import dspin, spin
from inspector.sources.descriptors import Option, SourceDescriptor
from inspector.sources.registry import describe_source

log = logging.getLogger(__name__)
COMPACT_KINDS = ("int", "float", "choice")
"""Kinds whose controls share a row."""
PER_ROW = 3
"""Most compact controls in one row."""
ROW_LABEL_CHARS = 24
"""Compact controls share a row while their labels hold at most this many characters in all."""
_INT_SPAN = 1_000_000


def describe(name: str) -> SourceDescriptor:
    """The declaration of source ``name`` (``registry.describe_source``); a source whose
    declaration cannot be read (a broken plugin, a malformed declaration) is logged and
    treated as undeclared (options passed through)."""
    try:
        return describe_source(name)
    except Exception:
        log.exception("cannot read the declared options of proposal source %r", name)
        return SourceDescriptor(name, None)


class OptionControl:
    """The control of one declared option of source ``source``.

    ``widget``: the value widget (``QSpinBox``, ``QDoubleSpinBox``, ``QComboBox``,
    ``QLineEdit`` or ``QPlainTextEdit``); ``open_button``: a ``path`` option's Open…
    button (else None); ``key``: where the window stores the value (``Option.store_key``)."""

    def __init__(self, source: str, option: Option) -> None:
        self.source = source
        self.option = option
        self.key = option.store_key(source)
        self.open_button: QPushButton | None = None
        o = option
        if o.kind == "int":
            lo = int(o.minimum) if o.minimum is not None else -_INT_SPAN
            hi = int(o.maximum if o.maximum is not None else o.control_max if o.control_max is not None else _INT_SPAN)
            default = int(o.default) if isinstance(o.default, int) else max(lo, 0)
            self.widget = spin(lo, hi, default, o.help)
        elif o.kind == "float":
            lo = float(o.minimum) if o.minimum is not None else -1e9
            hi = float(o.maximum if o.maximum is not None else o.control_max if o.control_max is not None else 1e9)
            default = float(o.default) if isinstance(o.default, (int, float)) else max(lo, 0.0)
            self.widget = dspin(lo, hi, default, o.step or 0.1, o.help)
        elif o.kind == "choice":
            self.widget = QComboBox()
            self.widget.addItems(list(o.choices))
            for i, tip in enumerate(o.choice_help):
                if tip:
                    self.widget.setItemData(i, tip, Qt.ItemDataRole.ToolTipRole)
            if o.default in o.choices:
                self.widget.setCurrentText(o.default)
            self.widget.setToolTip(o.help)
        elif o.kind == "text" and o.multiline:
            self.widget = QPlainTextEdit()
            self.widget.setMaximumHeight(48)
            self.widget.setPlaceholderText(o.placeholder)
            self.widget.setToolTip(o.help)
            if o.default:
                self.widget.setPlainText(str(o.default))
        else:
            self.widget = QLineEdit(str(o.default or ""))
            self.widget.setPlaceholderText(o.placeholder)
            self.widget.setToolTip(o.help)
            if o.kind == "path":
                self.widget.textChanged.connect(lambda t: self.widget.setToolTip(t or o.help))
                self.open_button = QPushButton("Open…")
                self.open_button.setToolTip(f"Open the file: {o.help}")

    def row(self):
        """What goes in the page's form: the widget, or the widget with its Open… button."""
        if self.open_button is None:
            return self.widget
        row = QHBoxLayout()
        row.addWidget(self.widget, 1)
        row.addWidget(self.open_button)
        return row

    def text(self) -> str:
        """The value as typed (texts and paths unstripped)."""
        w = self.widget
        if isinstance(w, QPlainTextEdit):
            return w.toPlainText()
        if isinstance(w, QLineEdit):
            return w.text()
        if isinstance(w, QComboBox):
            return w.currentText()
        return str(w.value())

    def value(self):
        """The option's value for the factory: ``int``, ``float``, ``str`` (a path stripped)."""
        w = self.widget
        if isinstance(w, (QPlainTextEdit, QLineEdit, QComboBox)):
            return self.text().strip() if self.option.kind == "path" else self.text()
        return w.value()

    def stored(self):
        """The value as the window's settings keep it (``PanelValues.values``)."""
        return self.text() if isinstance(self.widget, (QPlainTextEdit, QLineEdit, QComboBox)) else self.widget.value()

    def set_value(self, value) -> None:
        """Show ``value`` (a stored or saved value); one of the wrong type or out of the
        choices is ignored."""
        w = self.widget
        if isinstance(w, (QPlainTextEdit, QLineEdit, QComboBox)) and not isinstance(value, (str, int, float)):
            return  # e.g. a list QSettings made of a text with commas
        try:
            if isinstance(w, QPlainTextEdit):
                w.setPlainText(str(value))
            elif isinstance(w, QLineEdit):
                w.setText(str(value))
            elif isinstance(w, QComboBox):
                if w.findText(str(value)) >= 0:
                    w.setCurrentText(str(value))
            elif self.option.kind == "int":
                w.setValue(int(value))
            else:
                w.setValue(float(value))
        except (TypeError, ValueError):
            pass

    def is_empty(self) -> bool:
        """No value typed (a required option refuses the run then)."""
        if self.option.kind == "path":
            return not self.value()
        return self.option.kind == "text" and not self.text()


def build_source_page(descriptor: SourceDescriptor,
                      after: dict[str, Callable[[QFormLayout], None]] | None = None
                      ) -> tuple[QWidget, dict[str, OptionControl]]:
    """A page with a control per option of ``descriptor`` that has one (``Option.control``,
    not ``from_setting``), in the declared order. ``after``: option name -> a function
    that adds rows of the window's own (e.g. the draft page's Make draft row) after that
    option's row (texts and paths). Returns the page and option name -> ``OptionControl``."""
    page = QWidget()
    form = QFormLayout(page)
    form.setContentsMargins(0, 0, 0, 0)
    controls: dict[str, OptionControl] = {}
    row: list[OptionControl] = []

    def flush() -> None:
        if not row:
            return
        box = QHBoxLayout()
        for c in row:
            box.addWidget(QLabel(c.option.label))
            box.addWidget(c.widget)
        box.addStretch(1)
        form.addRow(box)
        row.clear()

    for o in descriptor.options or ():
        if not o.control or o.from_setting:
            continue
        c = OptionControl(descriptor.name, o)
        controls[o.name] = c
        if o.kind in COMPACT_KINDS:
            if row and sum(len(r.option.label) for r in (*row, c)) > ROW_LABEL_CHARS:
                flush()  # long labels (suffix's max_tree_depth, ...) would widen the side panel
            row.append(c)
            if len(row) == PER_ROW:
                flush()
            continue
        flush()
        form.addRow(o.label, c.row())
        if after and o.name in after:
            after[o.name](form)
    flush()
    return page, controls
