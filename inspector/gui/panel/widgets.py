"""Small widgets of the control panel: spin boxes that ignore the wheel unless focused,
a fixed-height grey note, and a widget that is enabled exactly when another one is."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLabel, QScrollArea, QSpinBox, QWidget

from inspector.engine.settings import PENALTY_DEFAULTS, SETTING_RULES


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


def rule_limits(name: str, lo: float, hi: float, step: float = 1) -> tuple[float, float]:
    """A spin box's limits for the setting ``name`` (a key of ``SETTING_RULES``): the rule's bounds
    where they are narrower than ``lo`` / ``hi`` (an excluded minimum moves up by ``step``, the box's
    smallest change), else ``lo`` / ``hi`` (a box needs finite limits). Raises ``KeyError`` for an unknown ``name``."""
    rule = SETTING_RULES[name]
    low = lo if rule.minimum is None else max(lo, rule.minimum + (step if rule.minimum_open else 0))
    high = hi if rule.maximum is None else min(hi, rule.maximum)
    return low, high


PENALTY_TIPS = {
    "repeat_penalty": "--repeat-penalty (llama.cpp): divides a positive logit (multiplies a negative one) of each "
                      "token seen in the last N tokens [1.0 = disabled, llama-server's default]",
    "repeat_last_n": "--repeat-last-n (llama.cpp): N, how many of the sequence's last tokens the penalties look "
                     "at, prompt included [64, llama-server's default; 0 = disabled]",
    "presence_penalty": "--presence-penalty (llama.cpp): subtracted from the logit of each token seen in the last "
                        "N tokens [0.0 = disabled, llama-server's default]",
    "frequency_penalty": "--frequency-penalty (llama.cpp): subtracted once per occurrence in the last N tokens "
                         "[0.0 = disabled, llama-server's default]",
}
"""Tooltips of the penalty boxes: llama.cpp's flag, what it does, llama-server's default."""
PENALTY_SPANS = {"repeat_penalty": (0.01, 5.0, 0.05), "repeat_last_n": (0, 131072, 1),
                 "presence_penalty": (-5.0, 5.0, 0.1), "frequency_penalty": (-5.0, 5.0, 0.1)}
"""Limits of a penalty box (its rule's, ``SETTING_RULES``, where narrower), and its step."""


def penalty_boxes() -> dict:
    """One spin box per ``PENALTY_FIELDS`` name, at llama-server's default, its limits from the
    setting's rule (``rule_limits``), its tooltip naming llama.cpp's flag (``PENALTY_TIPS``)."""
    out = {}
    for name, (lo, hi, step) in PENALTY_SPANS.items():
        low, high = rule_limits(name, lo, hi, 0.01 if isinstance(step, float) else 1)
        tip = PENALTY_TIPS[name] + ". The penalties come first in the sampler chain, greedy included."
        out[name] = (dspin(low, high, PENALTY_DEFAULTS[name], step, tip) if isinstance(step, float)
                     else spin(int(low), int(high), PENALTY_DEFAULTS[name], tip))
    return out
