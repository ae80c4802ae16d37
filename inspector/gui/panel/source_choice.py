"""The control panel's Proposal source group (a widget the panel owns): the source picker, one
page of option controls per source that declares its options (built from its declaration by
``inspector.gui.panel.source_options``), the draft page's "Make draft from target" row, and the
draft max with its ``auto`` value.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QStackedWidget,
    QWidget,
)

from inspector.engine.settings import AUTO_DRAFT_MAX, DEFAULT_DRAFT_MAX
from inspector.gui.panel.source_options import OptionControl, build_source_page, describe
from inspector.gui.panel.widgets import Note, spin
from inspector.llama.quantize import DRAFT_TYPES
from inspector.sources.registry import PLAIN

DRAFT_MAX_AUTO = -1
"""The draft max spin box's stand-in for ``AUTO_DRAFT_MAX`` (shown as "auto"; ``draft_max_choice`` turns it
back into None)."""
OTHER_TIP = "third-party source (entry point spec_inspector.sources)"


class SourceChoice(QGroupBox):
    """The Proposal source group for the sources ``names`` (in picker order).

    ``source``: the picker; ``pages``: source name -> its page (``other``: the page of sources
    without options, and of ``none``); ``option_controls``: source name -> option name -> its
    ``OptionControl`` (sources with a page only); ``draft_max``, with ``draft_max_used`` beside it;
    ``draft_type``, ``make_draft``, ``draft_busy``: the draft page's Make draft row."""

    def __init__(self, names: list[str], parent=None) -> None:
        super().__init__("Proposal source", parent)
        f = QFormLayout(self)
        f.setContentsMargins(6, 4, 6, 4)
        f.setVerticalSpacing(4)
        self.source = QComboBox()
        self.source_descriptors = {name: describe(name) for name in names}
        """Source name -> its declaration (``inspector.sources.descriptors``): the pages are built from it."""
        for name, d in self.source_descriptors.items():
            self.source.addItem(name)
            tip = d.help or OTHER_TIP
            if not d.declared:
                tip += ": options not declared (made with none)"
            self.source.setItemData(self.source.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.source.setToolTip("where proposals come from; hover an entry for what it does")
        f.addRow("source", self.source)
        self.source_pages = QStackedWidget()
        self.pages: dict[str, QWidget] = {}
        self._build_source_pages()
        f.addRow(self.source_pages)
        self.draft_max = spin(DRAFT_MAX_AUTO, 64, DRAFT_MAX_AUTO,
                              "--draft-max: most proposal tokens per window (a draft model drafts at most this "
                              "many). auto: the best window of the cost model stored for this model and thread "
                              "count (Cost model tab > Measure), else 8")
        self.draft_max.setSpecialValueText("auto")
        self.draft_max_used = Note("")
        """What ``auto`` became in the last run ("auto → 15: ..."), empty otherwise."""
        self.auto_draft_max: int | None = None
        """The draft max the last run with ``auto`` resolved (``show_draft_max_used``), else None."""
        self.draft_max.valueChanged.connect(lambda _v: self.draft_max_used.setText(""))
        dm = QHBoxLayout()
        dm.addWidget(self.draft_max)
        dm.addWidget(self.draft_max_used, 1)
        f.addRow("draft max", dm)
        self.source.currentTextChanged.connect(self._source_changed)
        self._source_changed(self.source.currentText())

    def _build_source_pages(self) -> None:
        """A page per source with declared options (``source_options.build_source_page``);
        one "other" page for sources without (and ``none``)."""
        self.option_controls: dict[str, dict[str, OptionControl]] = {}
        for name, d in self.source_descriptors.items():
            page, controls = build_source_page(d, {"draft_model": self._add_make_draft_row} if name == "draft" else None)
            if not controls:
                continue
            self.pages[name] = page
            self.source_pages.addWidget(page)
            self.option_controls[name] = controls
        w = QWidget()
        form = QFormLayout(w)
        form.setContentsMargins(0, 0, 0, 0)
        self.pages["other"] = w
        self.source_pages.addWidget(w)
        self.other_note = Note("")
        form.addRow(self.other_note)

    def _add_make_draft_row(self, form: QFormLayout) -> None:
        """The draft page's own row: re-quantize the target into a draft (not a source option)."""
        self.draft_type = QComboBox()
        self.draft_type.addItems(list(DRAFT_TYPES))
        self.draft_type.setCurrentText("Q4_0")
        self.draft_type.setToolTip("llama.cpp quantization of the made draft (Q4_0: about 30-45% accepted "
                                   "on the bundled model)")
        self.make_draft = QPushButton("Make draft from target")
        self.make_draft.setToolTip("re-quantize the chosen target model with llama.cpp's quantize "
                                   "(a few seconds; cached) and use it as the draft")
        self.draft_busy = QProgressBar()
        self.draft_busy.setRange(0, 0)
        self.draft_busy.setMaximumWidth(60)
        self.draft_busy.setTextVisible(False)
        self.draft_busy.hide()
        row = QHBoxLayout()
        row.addWidget(self.draft_type)
        row.addWidget(self.make_draft, 1)
        row.addWidget(self.draft_busy)
        form.addRow("make", row)

    def option_buttons(self) -> list[tuple[str, str, QPushButton]]:
        """``(source, option name, Open… button)`` of every path option's control."""
        return [(s, n, c.open_button) for s, cs in self.option_controls.items() for n, c in cs.items()
                if c.open_button is not None]

    def _source_changed(self, name: str) -> None:
        shown = self.pages.get(name, self.pages["other"])
        for w in self.pages.values():  # the stack takes the height of the page shown, not of the tallest
            pol = QSizePolicy.Policy.Preferred if w is shown else QSizePolicy.Policy.Ignored
            w.setSizePolicy(QSizePolicy.Policy.Preferred, pol)
        self.source_pages.setCurrentWidget(shown)
        if name not in self.pages:
            d = self.source_descriptors.get(name)
            self.other_note.setText("plain one-token decoding: nothing is proposed" if name == PLAIN else
                                    f"third-party source {name!r}: "
                                    + ("takes no options" if d is not None and d.declared else "made with no options"))
        self.draft_max.setEnabled(name != PLAIN)

    def source_options(self) -> dict:
        """Keyword options for the selected source's factory: one per control of its page, and
        the options taken from a generation setting (``Option.from_setting``: the draft's
        ``draft_max`` is the panel's draft max, at least the option's minimum). Sources
        without declared options get none."""
        name = self.source.currentText()
        controls = self.option_controls.get(name, {})
        out = {n: c.value() for n, c in controls.items()}
        d = self.source_descriptors.get(name)
        choice = self.draft_max_choice()
        settings = {"draft_max": choice} if choice is not AUTO_DRAFT_MAX else {}
        for o in (d.options or ()) if d is not None else ():  # auto: the registry takes the run's value
            if o.from_setting in settings:
                value = settings[o.from_setting]
                out[o.name] = max(int(o.minimum), value) if o.minimum is not None else value
        return out

    def source_problem(self) -> tuple[str, str] | None:
        """``(title, message)`` of why the selected source cannot run with the options typed, by
        its declaration: a required option left empty (``Option.required``: e.g. "No draft
        model"), or a broken rule (``SourceDescriptor.check_options``: e.g. ``n_min`` <=
        ``n_max``). None when nothing is wrong (or the source declares nothing)."""
        name = self.source.currentText()
        for c in self.option_controls.get(name, {}).values():
            if c.option.required and c.is_empty():
                return f"No {c.option.label}", c.option.missing or f"The {name} source needs its {c.option.label}."
        d = self.source_descriptors.get(name)
        try:
            if d is not None:
                d.check_options(self.source_options())
        except ValueError as exc:
            return f"{name} options", str(exc)
        return None

    def set_source(self, name: str) -> bool:
        """Select source ``name`` if the picker has it; False when it does not."""
        i = self.source.findText(name)
        if i >= 0:
            self.source.setCurrentIndex(i)
        return i >= 0

    def show_draft_max_used(self, settings: dict | None) -> None:
        """Name the draft max a run with ``auto`` used (its settings' ``draft_max_from``), else nothing."""
        st = settings or {}
        why = str(st.get("draft_max_from") or "")
        self.auto_draft_max = st.get("draft_max") if why else None
        self.draft_max_used.setText(f"  → {st.get('draft_max')}" if why and self.draft_max_choice() is AUTO_DRAFT_MAX
                                    else "")
        self.draft_max_used.setToolTip(why)

    def draft_max_in_effect(self) -> int:
        """The draft max a run uses: the box's value, or with ``auto`` the value the last run resolved
        (``show_draft_max_used``), else the default until a run resolves it."""
        choice = self.draft_max_choice()
        if choice is not AUTO_DRAFT_MAX:
            return choice
        resolved = self.auto_draft_max
        return int(resolved) if isinstance(resolved, int) else DEFAULT_DRAFT_MAX

    def draft_max_choice(self) -> int | None:
        """The draft max box's value: proposal tokens, or ``AUTO_DRAFT_MAX`` at the box's "auto" end (its
        ``DRAFT_MAX_AUTO``, a spin box's stand-in for it): the run takes it from the stored cost model
        (``inspector.engine.settings.requested_draft_max``)."""
        value = self.draft_max.value()
        return AUTO_DRAFT_MAX if value == DRAFT_MAX_AUTO else value
