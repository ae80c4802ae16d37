"""Small widgets of the control panel: spin boxes that ignore the wheel unless focused, a declared
llama.cpp setting's control, a fixed-height grey note, and a widget that is enabled exactly when another one is."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLabel, QScrollArea, QSpinBox, QWidget

from inspector.engine.llama_settings import Setting


class WheelGuard(QObject):
    """Event filter: a wheel event over an unfocused spin box or combo box is not
    theirs (it goes to the parent, so the scroll area scrolls)."""

    def eventFilter(self, obj, ev) -> bool:
        if ev.type() == QEvent.Type.Wheel and isinstance(obj, (QSpinBox, QDoubleSpinBox, QComboBox)) \
                and not obj.hasFocus():
            ev.ignore()
            parent = obj.parentWidget()
            while parent is not None and not isinstance(parent, QScrollArea):
                parent = parent.parentWidget()
            if parent is not None:
                QCoreApplication.sendEvent(parent.verticalScrollBar(), ev)
            return True
        return False


def guard_wheel(root: QWidget, guard: QObject) -> None:
    """Install ``guard`` on every spin box and combo box under ``root``; they take focus
    by click or Tab only (never by wheel)."""
    for cls in (QSpinBox, QDoubleSpinBox, QComboBox):
        for w in root.findChildren(cls):
            w.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            w.installEventFilter(guard)


class Note(QLabel):
    """A grey word-wrapped note of exactly two lines (the full text is its tooltip).
    Without height-for-width, the scrolled setup is sized by its minimum size, so
    it needs no scroll bar when it fits."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.setWordWrap(True)
        self.setStyleSheet("color:#555")
        self.setFixedHeight(2 * self.fontMetrics().lineSpacing() + 2)
        self.setMinimumWidth(0)

    def hasHeightForWidth(self) -> bool:
        return False

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)


class ElidedLabel(QLabel):
    """One line (the status bar's) that never cuts its text off mid-word: what does not fit its
    width ends with "…", and the tooltip holds all of it. ``text()`` is the whole text."""

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)

    def shown_text(self) -> str:
        """The text as drawn at the label's width."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("0000…"), super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setPen(self.palette().color(self.foregroundRole()))
        p.drawText(self.contentsRect(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter),
                   self.shown_text())


def spin(lo: int, hi: int, value: int, tip: str = "") -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setToolTip(tip)
    s.setMaximumWidth(110)
    return s


def dspin(lo: float, hi: float, value: float, step: float, tip: str = "") -> QDoubleSpinBox:
    s = QDoubleSpinBox()
    s.setRange(lo, hi)
    s.setDecimals(2)
    s.setSingleStep(step)
    s.setValue(value)
    s.setToolTip(tip)
    s.setMaximumWidth(80)
    return s


def rule_limits(rule, lo: float, hi: float, step: float = 1) -> tuple[float, float]:
    """A spin box's limits for a setting's ``rule`` (``SettingRule``): the rule's bounds where they are
    narrower than ``lo`` / ``hi`` (an excluded minimum moves up by ``step``, the box's smallest change),
    else ``lo`` / ``hi`` (a box needs finite limits)."""
    low = lo if rule.minimum is None else max(lo, rule.minimum + (step if rule.minimum_open else 0))
    high = hi if rule.maximum is None else min(hi, rule.maximum)
    return low, high


def setting_tip(s: Setting, more: str = "") -> str:
    """A declared setting's tooltip: llama.cpp's flags, its help and default (``Setting.help_text``),
    then ``more``."""
    return f"llama.cpp {', '.join(s.flags)}: {s.help_text()}" + (f"; {more}" if more else "")


def setting_control(s: Setting, tip: str = "") -> QWidget:
    """The control of a declared llama.cpp setting (``inspector.engine.llama_settings.Setting``) at its
    default: a combo box of its choices, else a spin box over its ``control`` limits (narrowed to its
    rule's, ``rule_limits``), decimal for a ``float``; ``tip`` its tooltip."""
    if s.kind == "choice":
        box = QComboBox()
        box.addItems(list(s.choices))
        box.setCurrentText(s.default)
        box.setToolTip(tip)
        return box
    lo, hi, step = s.control
    if s.rule is not None:
        lo, hi = rule_limits(s.rule, lo, hi, 0.01 if s.kind == "float" else 1)
    if s.kind == "float":
        return dspin(lo, hi, s.default, step, tip)
    return spin(int(lo), int(hi), s.default, tip)
