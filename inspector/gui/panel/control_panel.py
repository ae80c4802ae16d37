"""The control panel: model, proposal source, sampling, limits, prompt, run
controls, break conditions, fault buttons and background sessions.

The run setup (model, source, sampling, prompt) scrolls in its own area; the
run controls, the fault buttons and the background sessions sit below it and
are always visible (1280x800 included). Spin boxes and combo boxes ignore
the mouse wheel unless they have focus, so wheeling over the panel scrolls it.

Widgets only: ``MainWindow`` connects them. ``settings_values`` /
``apply_values`` convert to and from a plain dict (QSettings and tests).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from inspector.engine.settings import (DEFAULT_MAX_NEW_TOKENS, DEFAULT_N_CTX, PENALTY_FIELDS, GenerationSettings,
                                       SamplingSettings)
from inspector.engine.probabilities import COST_NOTE
from inspector.gui.engine_thread.contention import MAX_BACKGROUND
from inspector.gui.panel.context_controls import ContextControls
from inspector.prompts import example_prompts
from inspector.gui.panel.model_choice import ModelChoice
from inspector.gui.panel.values import PanelValues, parse_stop_strings
from inspector.gui.panel.widgets import Note, WheelGuard, dspin, guard_wheel, penalty_boxes, spin
from inspector.gui.panel.source_options import OptionControl, build_source_page, describe
from inspector.gui.look.wording import RAW_BOX
from inspector.llama.cost_model import DEFAULT_DRAFT_MAX
from inspector.sources.registry import PLAIN

DRAFT_MAX_AUTO = -1
"""The draft max spin box's ``auto`` value (shown as "auto")."""

CUSTOM_PROMPT = "custom prompt"
"""The example picker's entry when the editor holds no example prompt's text."""
FAULT_DISABLED_TIP = "Available in a live session: before a run (armed for it) or while it runs or is paused."
PICKER_ORDER = ("ngram", "draft", "scripted", "replay")
"""Built-in sources first in the source picker, in this order; then entry-point sources, then ``none``."""
OTHER_TIP = "third-party source (entry point spec_inspector.sources)"
PROBABILITIES_TIP = (
    "Keep the target's figures for every verification row in the receipts (the proposed token's probability "
    "and rank, the top 5 tokens, entropy, logit margin; the draft's q for a draft model): the Statistics tab's "
    f"acceptance-vs-probability charts and the Windows tab's p columns read them. Costs {COST_NOTE} "
    "(read from the verify batch's logits, no extra decode). Off (--no-probabilities): "
    "receipts without probability blocks, the smallest files.")


def source_names() -> list[str]:
    """The picker's entries: built-in sources, then entry-point sources, then ``none``."""
    from inspector.sources.registry import PLAIN, available_sources

    names = list(available_sources())
    builtin = [n for n in PICKER_ORDER if n in names]
    return builtin + [n for n in names if n not in builtin and n != PLAIN] + [PLAIN]


class ControlPanel(ModelChoice, PanelValues, QWidget):
    """All inputs of a run and the buttons that drive it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        # The run setup scrolls; the run, fault and contention controls below it do not.
        self.setup = QWidget()
        lay = QVBoxLayout(self.setup)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.setSpacing(6)
        self.setup_scroll = QScrollArea()
        self.setup_scroll.setWidget(self.setup)
        self.setup_scroll.setWidgetResizable(True)
        self.setup_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setup_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(self.setup_scroll, 1)
        fixed = QVBoxLayout()
        fixed.setContentsMargins(4, 0, 4, 4)
        fixed.setSpacing(4)
        outer.addLayout(fixed)

        lay.addWidget(self.build_model_group())

        # Proposal source + limits
        g = QGroupBox("Proposal source")
        f = QFormLayout(g)
        f.setContentsMargins(6, 4, 6, 4)
        f.setVerticalSpacing(4)
        self.source = QComboBox()
        self.source_descriptors = {name: describe(name) for name in source_names()}
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
        self._pages: dict[str, QWidget] = {}
        self._build_source_pages()
        f.addRow(self.source_pages)
        self.draft_max = spin(DRAFT_MAX_AUTO, 64, DRAFT_MAX_AUTO,
                              "--draft-max: most proposal tokens per window (a draft model drafts at most this "
                              "many). auto: the best window of the cost model stored for this model and thread "
                              "count (Cost model tab > Measure), else 8")
        self.draft_max.setSpecialValueText("auto")
        self.draft_max_used = Note("")
        """What ``auto`` became in the last run ("auto → 15: ..."), empty otherwise."""
        self.draft_max.valueChanged.connect(lambda _v: self.draft_max_used.setText(""))
        dm = QHBoxLayout()
        dm.addWidget(self.draft_max)
        dm.addWidget(self.draft_max_used, 1)
        f.addRow("draft max", dm)
        lay.addWidget(g)
        self.source.currentTextChanged.connect(self._source_changed)

        # Limits (llama.cpp's names in the tooltips)
        g = QGroupBox("Limits")
        grid = QGridLayout(g)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setSpacing(4)
        self.max_tokens = spin(1, 32768, DEFAULT_MAX_NEW_TOKENS, "--max-tokens (llama.cpp -n, n_predict): most "
                               f"tokens to generate [{DEFAULT_MAX_NEW_TOKENS}]")
        self.n_ctx = spin(64, 131072, DEFAULT_N_CTX, f"--n-ctx (llama.cpp -c): context size in positions, prompt "
                          f"+ output [{DEFAULT_N_CTX}]; a change reloads the model")
        self.threads = spin(0, 256, 0, "--threads (llama.cpp -t): CPU threads for decoding; 0 = all cores")
        self.threads.setSpecialValueText("all cores")
        self.stop_strings = QLineEdit()
        self.stop_strings.setPlaceholderText("stop strings, separated by |  (\\n = newline)")
        self.stop_strings.setToolTip("--stop: generation ends when the committed text contains one of these "
                                     "(the stop string is not output). Separate several with |; write a newline "
                                     "as \\n, a tab as \\t, a | as \\|.")
        for i, (name, w) in enumerate((("max tokens", self.max_tokens), ("context", self.n_ctx),
                                       ("threads", self.threads))):
            grid.addWidget(QLabel(name), i // 2, (i % 2) * 2)
            grid.addWidget(w, i // 2, (i % 2) * 2 + 1)
        self.probabilities = QCheckBox("probabilities")
        self.probabilities.setChecked(True)
        self.probabilities.setToolTip(PROBABILITIES_TIP)
        grid.addWidget(self.probabilities, 1, 2, 1, 2)
        grid.addWidget(QLabel("stop"), 2, 0)
        grid.addWidget(self.stop_strings, 2, 1, 1, 3)
        self.llama_context = ContextControls()  # -b -ub -fa -ctk -ctv, beside the context size
        grid.addWidget(self.llama_context, 3, 0, 1, 4)
        lay.addWidget(g)

        # Sampling
        g = QGroupBox("Sampling (temperature 0 = greedy)")
        grid = QGridLayout(g)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setSpacing(4)
        self.temperature = dspin(0.0, 5.0, 0.0, 0.1, "0 = greedy (argmax)")
        self.top_k = spin(0, 1000, 40, "0 = off")
        self.top_p = dspin(0.0, 1.0, 0.95, 0.05, "1 = off")
        self.min_p = dspin(0.0, 1.0, 0.05, 0.01, "0 = off")
        self.seed = spin(0, 2**31 - 1, 0)
        for i, (name, w) in enumerate((("temperature", self.temperature), ("top-k", self.top_k),
                                       ("top-p", self.top_p), ("min-p", self.min_p), ("seed", self.seed))):
            grid.addWidget(QLabel(name), i // 2, (i % 2) * 2)
            grid.addWidget(w, i // 2, (i % 2) * 2 + 1)
        self.verification = QComboBox()
        self.verification.addItems(["sample_match", "rejection"])
        self.verification.setToolTip(
            "how a sampled run verifies proposals (temperature > 0 only)\n"
            "sample_match: accept while the proposal equals the target's sample (any source)\n"
            "rejection: speculative sampling with the draft's probabilities (draft source; "
            "other sources fall back to sample_match)")
        grid.addWidget(QLabel("verify"), 2, 2)
        grid.addWidget(self.verification, 2, 3)
        self.penalties = penalty_boxes()
        """``PENALTY_FIELDS`` name -> its box (llama.cpp's --repeat-penalty, ...): two rows under the others."""
        for i, (name, label) in enumerate(zip(PENALTY_FIELDS, ("repeat", "last n", "presence", "freq."))):
            tag = QLabel(label)  # "freq.": the panel keeps its width; the tooltip says it all
            tag.setToolTip(self.penalties[name].toolTip())
            grid.addWidget(tag, 3 + i // 2, (i % 2) * 2)
            grid.addWidget(self.penalties[name], 3 + i // 2, (i % 2) * 2 + 1)
        self.temperature.valueChanged.connect(self.follow_temperature)
        self.follow_temperature(self.temperature.value())
        lay.addWidget(g)

        # Prompt
        g = QGroupBox("Prompt")
        gl = QVBoxLayout(g)
        gl.setContentsMargins(6, 4, 6, 4)
        gl.setSpacing(4)
        self.examples = QComboBox()
        self.examples.setToolTip("example prompts (assets/prompts); “custom prompt” when the editor holds "
                                 "another text")
        self.examples.addItem(CUSTOM_PROMPT, "")
        for name, text in example_prompts().items():
            self.examples.addItem(name, text)
        self.examples.activated.connect(self._example_chosen)
        self._live_values: dict | None = None  # the live settings while a saved session's are shown
        self.custom_prompt = ""
        """The last prompt typed in the editor (not an example's text): “custom prompt” restores it."""
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt (sent as a user message through the chat template)")
        self.prompt.setMinimumHeight(70)
        self.prompt.setMaximumHeight(150)
        self.raw = QCheckBox(RAW_BOX)
        self.system_prompt = QLineEdit()
        self.system_prompt.setPlaceholderText("system prompt (optional)")
        self.system_prompt.setToolTip("the chat template's system message before the prompt (llama.cpp's -sys, "
                                      "--system-prompt); kept in the receipts; a conversation keeps it first. "
                                      "Empty: the template's own default")
        self.raw.toggled.connect(lambda raw: self.system_prompt.setEnabled(not raw))  # raw: no template
        row = QHBoxLayout()
        row.addWidget(self.examples, 1)
        row.addWidget(self.raw)
        gl.addLayout(row)
        gl.addWidget(self.prompt, 1)
        gl.addWidget(self.system_prompt)
        # The prompt comes right after the model: visible without scrolling at 1280x800,
        # whichever source page (the draft's is the tallest) is shown below it.
        lay.insertWidget(1, g)
        lay.addStretch(1)
        self.prompt.textChanged.connect(self._sync_example)

        # Run controls
        g = QGroupBox("Run")
        grid = QGridLayout(g)
        self.run = QPushButton("▶ Run")
        self.pause = QPushButton("Pause")
        self.step_window = QPushButton("Step window")
        self.step_token = QPushButton("Step token")
        self.stop = QPushButton("■ Stop")
        self.resume = QPushButton("Resume")
        self.run.setToolTip("Run (Ctrl+R); continues a paused run")
        self.pause.setToolTip("Pause between windows (Space or Ctrl+P)")
        self.step_window.setToolTip("Run one decode step, then pause (F10)")
        self.step_token.setToolTip("Commit one token, then hold before the next (F11)")
        self.stop.setToolTip("End the run (Esc)")
        self.resume.setToolTip("After an error: resume from the canonical position and continue (Ctrl+Shift+R)")
        for i, b in enumerate((self.run, self.pause, self.stop, self.step_window, self.step_token, self.resume)):
            grid.addWidget(b, i // 3, i % 3)
        brk = QHBoxLayout()
        brk.addWidget(QLabel("break on"))
        self.break_boxes: dict[str, QCheckBox] = {}
        for kind, label in (("first_mismatch", "mismatch"), ("stopped", "stopped"), ("discard", "discard"),
                            ("error", "error")):
            cb = QCheckBox(label)
            cb.setToolTip(f"pause after a window that ends with {kind}")
            cb.setChecked(kind == "error")
            self.break_boxes[kind] = cb
            brk.addWidget(cb)
        grid.addLayout(brk, 2, 0, 1, 3)
        self.baseline = QCheckBox("Compare with plain decoding")
        self.baseline.setToolTip("after the run (or Stop), decode the same prompt one token per step with the same "
                                 "sampling, mark the first token where the outputs differ and measure the speedup")
        grid.addWidget(self.baseline, 3, 0, 1, 3)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setVerticalSpacing(2)
        fixed.addWidget(g)
        self.run_group = g

        # Faults and contention
        g = QGroupBox("Faults (fire once) and contention")
        grid = QGridLayout(g)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setVerticalSpacing(2)
        self.fault_cancel = QPushButton("Cancel at next commit")
        self.fault_cancel.setToolTip("Fault('cancel'): the request is cancelled before the next commit token")
        self.fault_callback = QPushButton("Fail callback at token")
        self.fault_callback.setToolTip("Fault('callback_error', token=j): the token callback raises at commit token j of the next window that reaches it")
        self.fault_token = spin(1, 64, 1, "j: 1-based commit token inside the window")
        self.fault_trim = QPushButton("Fail next repair")
        self.fault_trim.setToolTip("Fault('trim_failure'): the next trim fails; the session is retired")
        self.fault_drift = QPushButton("Shift session position")
        self.fault_drift.setToolTip("Fault('position_drift'): one extra token is decoded into the session before the next verification")
        grid.addWidget(self.fault_cancel, 0, 0, 1, 2)
        grid.addWidget(self.fault_trim, 0, 2)
        grid.addWidget(self.fault_callback, 1, 0)
        grid.addWidget(self.fault_token, 1, 1)
        grid.addWidget(self.fault_drift, 1, 2)
        self.fault_buttons = (self.fault_cancel, self.fault_callback, self.fault_trim, self.fault_drift)
        self._fault_tips = {b: b.toolTip() for b in self.fault_buttons}
        self.set_faults_enabled(False)
        row = QHBoxLayout()
        row.addWidget(QLabel("Background sessions"))
        self.background = spin(0, MAX_BACKGROUND, 0,
                                "other sessions generating through the same runtime lock (plain and n-gram)")
        row.addWidget(self.background)
        self.pending_faults = QLabel("")
        self.pending_faults.setStyleSheet("color:#c62828")
        row.addWidget(self.pending_faults, 1)
        grid.addLayout(row, 2, 0, 1, 3)
        fixed.addWidget(g)
        self.fault_group = g
        self._source_changed(self.source.currentText())
        self._wheel_guard = WheelGuard(self)
        guard_wheel(self, self._wheel_guard)
        # As wide as the widest setup row (and the scroll bar): no input is cut on the right.
        self.setMinimumWidth(self.setup.minimumSizeHint().width()
                             + self.setup_scroll.verticalScrollBar().sizeHint().width() + 6)

    def _build_source_pages(self) -> None:
        """A page per source with declared options (``source_options.build_source_page``);
        one "other" page for sources without (and ``none``). Built-in options are also
        panel attributes named by their keys (``ngram_max``, ``draft_model``, ``script``,
        ``replay_file``, ...)."""
        self.option_controls: dict[str, dict[str, OptionControl]] = {}
        """Source name -> option name -> its control (sources with a page only)."""
        for name, d in self.source_descriptors.items():
            page, controls = build_source_page(d, {"draft_model": self._add_make_draft_row} if name == "draft" else None)
            if not controls:
                continue
            self._pages[name] = page
            self.source_pages.addWidget(page)
            self.option_controls[name] = controls
            for c in controls.values():
                if c.key.isidentifier() and not hasattr(self, c.key):
                    setattr(self, c.key, c.widget)
        w = QWidget()
        form = QFormLayout(w)
        form.setContentsMargins(0, 0, 0, 0)
        self._pages["other"] = w
        self.source_pages.addWidget(w)
        self.other_note = Note("")
        form.addRow(self.other_note)

    def _add_make_draft_row(self, form: QFormLayout) -> None:
        """The draft page's own row: re-quantize the target into a draft (not a source option)."""
        from inspector.llama.quantize import DRAFT_TYPES

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

    # -- behaviour -------------------------------------------------------------
    def _source_changed(self, name: str) -> None:
        shown = self._pages.get(name, self._pages["other"])
        for w in self._pages.values():  # the stack takes the height of the page shown, not of the tallest
            pol = QSizePolicy.Policy.Preferred if w is shown else QSizePolicy.Policy.Ignored
            w.setSizePolicy(QSizePolicy.Policy.Preferred, pol)
        self.source_pages.setCurrentWidget(shown)
        if name not in self._pages:
            d = self.source_descriptors.get(name)
            self.other_note.setText("plain one-token decoding: nothing is proposed" if name == PLAIN else
                                    f"third-party source {name!r}: "
                                    + ("takes no options" if d is not None and d.declared else "made with no options"))
        self.draft_max.setEnabled(name != PLAIN)

    def follow_temperature(self, t: float) -> None:
        """Offer the verification choice only when sampling (temperature ``t`` > 0; greedy has one)."""
        self.verification.setEnabled(t > 0.0)

    def source_options(self) -> dict:
        """Keyword options for the selected source's factory: one per control of its page, and
        the options taken from a generation setting (``Option.from_setting``: the draft's
        ``draft_max`` is the panel's draft max, at least the option's minimum). Sources
        without declared options get none."""
        name = self.source.currentText()
        controls = self.option_controls.get(name, {})
        out = {n: c.value() for n, c in controls.items()}
        d = self.source_descriptors.get(name)
        settings = {"draft_max": self.draft_max.value()} if not self.draft_max_auto() else {}
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
        """Select source ``name`` if the picker has it."""
        i = self.source.findText(name)
        if i >= 0:
            self.source.setCurrentIndex(i)
        return i >= 0

    def set_faults_enabled(self, on: bool) -> None:
        """Enable the fault buttons (a run is running or paused); disabled ones say when they work."""
        for b in self.fault_buttons:
            b.setEnabled(on)
            b.setToolTip(self._fault_tips[b] if on else f"{self._fault_tips[b]}\n{FAULT_DISABLED_TIP}")

    def _example_chosen(self, index: int) -> None:
        """An example replaces the editor's text; a typed (custom) prompt is kept first, and
        choosing “custom prompt” brings it back (an empty editor when none was typed)."""
        text = self.examples.itemData(index)
        current = self.prompt.toPlainText()
        if current and self.examples.findData(current) < 0:
            self.custom_prompt = current
        self.prompt.setPlainText(text if text else self.custom_prompt)
        if not text:
            self.examples.setCurrentIndex(0)

    def _sync_example(self) -> None:
        """Show the example whose text is in the editor, else “custom prompt”."""
        i = self.examples.findData(self.prompt.toPlainText()) if self.prompt.toPlainText() else -1
        self.examples.setCurrentIndex(max(i, 0))

    def example_name(self) -> str:
        """The example prompt in the editor ("" for a custom prompt)."""
        return self.examples.currentText() if self.examples.currentIndex() > 0 else ""

    def choose_example(self, name: str) -> None:
        """Load the example prompt ``name`` (file stem of ``assets/prompts``)."""
        i = self.examples.findText(name)
        if i < 0:
            raise KeyError(f"no example prompt {name!r}")
        self.examples.setCurrentIndex(i)
        self._example_chosen(i)

    def break_on(self) -> frozenset:
        return frozenset(k for k, cb in self.break_boxes.items() if cb.isChecked())

    def generation_settings(self) -> GenerationSettings:
        """The limits and sampling typed in the panel (tokens), and whether receipts keep the per-row
        probability figures (the "probabilities" box)."""
        sampling = SamplingSettings(self.temperature.value(), self.top_k.value(), self.top_p.value(),
                                    self.min_p.value(), self.seed.value(),
                                    **{name: box.value() for name, box in self.penalties.items()})
        verification = self.verification.currentText() if not sampling.greedy else "sample_match"
        draft_max = DEFAULT_DRAFT_MAX if self.draft_max_auto() else self.draft_max.value()
        return GenerationSettings(max_new_tokens=self.max_tokens.value(), draft_max=draft_max,
                                  stop=self.stop_list(), sampling=sampling, verification=verification,
                                  probabilities=self.probabilities.isChecked())

    def show_draft_max_used(self, settings: dict | None) -> None:
        """Name the draft max a run with ``auto`` used (its settings' ``draft_max_from``), else nothing."""
        st = settings or {}
        why = str(st.get("draft_max_from") or "")
        self.auto_draft_max = st.get("draft_max") if why else None
        self.draft_max_used.setText(f"  → {st.get('draft_max')}" if why and self.draft_max_auto() else "")
        self.draft_max_used.setToolTip(why)

    def draft_max_in_effect(self) -> int:
        """The draft max a run uses: the box's value, or with ``auto`` the value the last run resolved
        (``show_draft_max_used``), else the default until a run resolves it."""
        if not self.draft_max_auto():
            return self.draft_max.value()
        resolved = getattr(self, "auto_draft_max", None)
        return int(resolved) if isinstance(resolved, int) else DEFAULT_DRAFT_MAX

    def draft_max_auto(self) -> bool:
        """Draft max is ``auto``: the run takes it from the stored cost model
        (``inspector.llama.cost_model.auto_draft_max``; ``RunRequest.draft_max_auto``)."""
        return self.draft_max.value() == DRAFT_MAX_AUTO

    def stop_list(self) -> tuple[str, ...]:
        """The stop strings typed in the panel: separated by ``|``; ``\\n``, ``\\t``, ``\\|`` and
        ``\\\\`` are a newline, a tab, a ``|`` and a backslash. Empty entries are dropped."""
        return parse_stop_strings(self.stop_strings.text())
