"""The control panel: model, proposal source, sampling, limits, prompt, run
controls, break conditions, fault buttons and background sessions.

The run setup (model, source, sampling, prompt) scrolls in its own area; the
run controls, the fault buttons and the background sessions sit below it and
are always visible (1280x800 included). Spin boxes and combo boxes ignore
the mouse wheel unless they have focus, so wheeling over the panel scrolls it.

Widgets only: ``MainWindow`` connects them. The panel is put together from group widgets it
owns, each in its own module of ``inspector.gui.panel``: ``model_choice`` (Model: model list,
weights, offload), ``source_choice`` (Proposal source: picker, option pages, draft max),
``limits_group`` and ``sampling_group`` (``generation_groups``: Limits, with ``llama_context``, llama.cpp's
context settings; Sampling), ``prompt_box`` (Prompt), ``run_group`` and ``fault_group``
(``run_buttons``: Run; Faults and contention). The panel keeps the groups' widgets and methods under
its own public names (``panel.run``, ``panel.model_path()``, ...; the model group's and the Limits and
Sampling groups' methods are bound in ``__init__``), so the window talks to the panel only. ``values`` /
``apply_values`` convert to and from a plain dict (QSettings and tests; ``value_io``:
``inspector.gui.panel.values.PanelValues``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton, QScrollArea, QVBoxLayout, QWidget

from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.engine.settings import GenerationSettings, requested_draft_max
from inspector.gui.engine_thread.worker import ModelLoad
from inspector.gui.panel.generation_groups import LimitsGroup, SamplingGroup
from inspector.gui.panel.model_choice import ModelChoice
from inspector.gui.panel.prompt_box import PromptBox
from inspector.gui.panel.run_buttons import FaultButtons, RunButtons
from inspector.gui.panel.source_choice import SourceChoice
from inspector.gui.panel.values import PanelValues
from inspector.gui.panel.widgets import WheelGuard, guard_wheel
from inspector.prompts import example_n_ctx
from inspector.session.run import RunRequest
from inspector.sources import registry
from inspector.sources.registry import PLAIN

PICKER_ORDER = ("ngram", "draft", "scripted", "replay")
"""Built-in sources first in the source picker, in this order; then entry-point sources, then ``none``."""


def source_names() -> list[str]:
    """The picker's entries: built-in sources, then entry-point sources, then ``none`` (read from
    ``registry.available_sources`` at each call: entry points installed since are listed)."""
    names = list(registry.available_sources())
    builtin = [n for n in PICKER_ORDER if n in names]
    return builtin + [n for n in names if n not in builtin and n != PLAIN] + [PLAIN]


class ControlPanel(QWidget):
    """All inputs of a run and the buttons that drive it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.value_io = PanelValues(self)
        """``values`` / ``apply_values`` / ``show_saved`` / ``show_live`` (the panel's methods delegate)."""
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

        self.model_choice = ModelChoice(showing_saved=lambda: self.showing_saved)
        """The Model group: model list, weights, offload (its widgets are also the panel's attributes)."""
        m = self.model_choice
        self.model_combo, self.open_model, self.model_status = m.model_combo, m.open_model, m.model_status
        self.weights, self.gpu_layers, self.rpc_servers = m.weights, m.gpu_layers, m.rpc_servers
        # Its abilities are the panel's own (each documented in ``ModelChoice``):
        self.offload, self.model_path, self.recent_models = m.offload, m.model_path, m.recent_models
        self.target_weights, self.set_target_weights, self.know_stored_weights = (m.target_weights,
                                                                                 m.set_target_weights,
                                                                                 m.know_stored_weights)
        self.add_recent_model, self.select_model, self.remove_recent_model = (m.add_recent_model, m.select_model,
                                                                              m.remove_recent_model)
        lay.addWidget(m)

        # Proposal source (its page's option controls are also panel attributes named by their keys:
        # ``ngram_max``, ``draft_model``, ``script``, ``replay_file``, ...)
        self.source_choice = SourceChoice(source_names())
        """The Proposal source group: picker, option pages, draft max (its widgets are also the panel's)."""
        sc = self.source_choice
        self.source, self.source_descriptors, self.source_pages = sc.source, sc.source_descriptors, sc.source_pages
        self.option_controls, self.other_note = sc.option_controls, sc.other_note
        self.draft_max, self.draft_max_used = sc.draft_max, sc.draft_max_used
        self.draft_type, self.make_draft, self.draft_busy = sc.draft_type, sc.make_draft, sc.draft_busy
        for c in (c for cs in sc.option_controls.values() for c in cs.values()):
            if c.key.isidentifier() and not hasattr(self, c.key):
                setattr(self, c.key, c.widget)
        lay.addWidget(sc)

        # Limits and Sampling (llama.cpp's names in the tooltips)
        self.limits_group = LimitsGroup()
        """The Limits group (its widgets and ``stop_list`` are also the panel's)."""
        li = self.limits_group
        self.max_tokens, self.n_ctx, self.threads = li.max_tokens, li.n_ctx, li.threads
        self.stop_strings, self.probabilities, self.llama_context = li.stop_strings, li.probabilities, li.llama_context
        self.stop_list = li.stop_list
        lay.addWidget(li)
        self.sampling_group = SamplingGroup()
        """The Sampling group (its widgets, ``follow_temperature`` and ``sampling_settings`` are also the panel's)."""
        sg = self.sampling_group
        self.sampling_controls, self.penalties, self.verification = sg.sampling_controls, sg.penalties, sg.verification
        self.temperature, self.top_k, self.top_p, self.min_p, self.seed = (sg.temperature, sg.top_k, sg.top_p,
                                                                           sg.min_p, sg.seed)
        self.follow_temperature, self.sampling_settings = sg.follow_temperature, sg.sampling_settings
        lay.addWidget(sg)

        # Prompt
        self.prompt_box = PromptBox()
        """The Prompt group (its widgets are also the panel's attributes)."""
        pb = self.prompt_box
        self.examples, self.prompt, self.raw, self.system_prompt = pb.examples, pb.prompt, pb.raw, pb.system_prompt
        # The prompt comes right after the model: visible without scrolling at 1280x800,
        # whichever source page (the draft's is the tallest) is shown below it.
        lay.insertWidget(1, pb)
        lay.addStretch(1)
        self.examples.currentIndexChanged.connect(lambda _i: self.fit_context())
        self.n_ctx.valueChanged.connect(lambda _v: self.fit_context(raise_context=False))

        # Run controls; faults and contention
        self.run_group = RunButtons()
        """The Run group (its widgets are also the panel's attributes)."""
        r = self.run_group
        self.run, self.pause, self.stop, self.resume = r.run, r.pause, r.stop, r.resume
        self.step_window, self.step_token, self.break_boxes, self.baseline = (r.step_window, r.step_token,
                                                                              r.break_boxes, r.baseline)
        fixed.addWidget(r)
        self.fault_group = FaultButtons()
        """The Faults and contention group (its widgets are also the panel's attributes)."""
        fb = self.fault_group
        self.fault_cancel, self.fault_callback, self.fault_token = fb.fault_cancel, fb.fault_callback, fb.fault_token
        self.fault_trim, self.fault_drift, self.fault_buttons = fb.fault_trim, fb.fault_drift, fb.fault_buttons
        self.background, self.pending_faults, self.fault_slot = fb.background, fb.pending_faults, fb.fault_slot
        fixed.addWidget(fb)
        self._wheel_guard = WheelGuard(self)
        guard_wheel(self, self._wheel_guard)
        # As wide as the widest setup row (and the scroll bar): no input is cut on the right.
        self.setMinimumWidth(self.setup.minimumSizeHint().width()
                             + self.setup_scroll.verticalScrollBar().sizeHint().width() + 6)

    def source_options(self) -> dict:
        """Keyword options for the selected source's factory (``SourceChoice.source_options``)."""
        return self.source_choice.source_options()

    def source_problem(self) -> tuple[str, str] | None:
        """``(title, message)`` of why the selected source cannot run with the options typed, None when
        nothing is wrong (``SourceChoice.source_problem``)."""
        return self.source_choice.source_problem()

    def set_source(self, name: str) -> bool:
        """Select source ``name`` if the picker has it; False when it does not."""
        return self.source_choice.set_source(name)

    def option_buttons(self) -> list[tuple[str, str, QPushButton]]:
        """``(source, option name, Open… button)`` of every path option's control."""
        return self.source_choice.option_buttons()

    def set_faults_enabled(self, on: bool) -> None:
        """Enable the fault buttons (a run is running or paused); disabled ones say when they work."""
        self.fault_group.set_faults_enabled(on)

    def set_serving(self, n_slots: int) -> None:
        """The window serves with ``n_slots`` slots (0: it does not): the fault buttons' slot box follows."""
        self.fault_group.set_serving(n_slots)

    def example_name(self) -> str:
        """The example prompt in the editor ("" for a custom prompt)."""
        return self.prompt_box.example_name()

    def choose_example(self, name: str) -> None:
        """Load the example prompt ``name`` (``PromptBox.choose_example``; ``KeyError`` when unknown)."""
        self.prompt_box.choose_example(name)

    def fit_context(self, raise_context: bool = True) -> None:
        """A long example in the editor (``inspector.prompts.LONG_EXAMPLES``) runs in the context
        ``example_n_ctx`` gives (positions): raise the context field to it when lower (never lowered; the
        model reloads at the next Run), unless ``raise_context`` is False, and say so under the prompt."""
        need = example_n_ctx(self.example_name())
        if need <= DEFAULT_N_CTX:
            self.prompt_box.show_context_note("")
            return
        if raise_context and self.n_ctx.value() < need:
            self.n_ctx.setValue(need)
        have = self.n_ctx.value()
        self.prompt_box.show_context_note(
            f"A long prompt: it runs in a context of {have} positions (Limits; a change reloads the model at Run). "
            "The prefill takes a minute or more; the status line counts it." if have >= need else
            f"A long prompt: it needs a context of {need} positions, the context is {have} (Limits).")

    def break_on(self) -> frozenset:
        """The window outcomes to pause after (``RunButtons.break_on``)."""
        return self.run_group.break_on()

    def generation_settings(self) -> GenerationSettings:
        """The limits and sampling typed in the panel (tokens), and whether receipts keep the per-row
        probability figures (the "probabilities" box)."""
        sampling = self.sampling_settings()
        verification = self.verification.currentText() if not sampling.greedy else "sample_match"
        return GenerationSettings(max_new_tokens=self.max_tokens.value(),
                                  draft_max=requested_draft_max(self.draft_max_choice())[0],
                                  stop=self.stop_list(), sampling=sampling, verification=verification,
                                  probabilities=self.probabilities.isChecked())

    def run_request(self, prompt_text: str) -> RunRequest:
        """A run of ``prompt_text`` as the panel's settings ask for it (``RunRequest``): the limits and
        sampling (``generation_settings``), the source and its options, raw, the system prompt (none
        with a raw prompt), the baseline and draft max auto. The caller adds what is not the panel's
        (faults, a conversation's turn)."""
        raw = self.raw.isChecked()
        return RunRequest(prompt_text, self.generation_settings(), self.source.currentText(), self.source_options(),
                          raw, baseline=self.baseline.isChecked(),
                          draft_max_auto=requested_draft_max(self.draft_max_choice())[1],
                          system_prompt="" if raw else self.system_prompt.text())

    def model_load(self, path: str, offload=None) -> ModelLoad:
        """How the model ``path`` is loaded by the panel's settings (``ModelLoad``): the context size, the
        threads, the weight form, llama.cpp's context settings; ``offload``: the panel's ``offload()``,
        checked by the caller."""
        return ModelLoad(path, self.n_ctx.value(), self.threads.value() or None, self.target_weights(), offload,
                         self.llama_context.values())

    def show_draft_max_used(self, settings: dict | None) -> None:
        """Name the draft max a run with ``auto`` used (its settings' ``draft_max_from``), else nothing."""
        self.source_choice.show_draft_max_used(settings)

    def draft_max_in_effect(self) -> int:
        """The draft max a run uses: the box's value, or with ``auto`` the value the last run resolved
        (``show_draft_max_used``), else the default until a run resolves it."""
        return self.source_choice.draft_max_in_effect()

    def draft_max_choice(self) -> int | None:
        """The draft max box's value: proposal tokens, or ``AUTO_DRAFT_MAX`` (``requested_draft_max``)."""
        return self.source_choice.draft_max_choice()

    # -- values (``PanelValues``) -----------------------------------------------------
    def values(self) -> dict:
        """Every setting as a plain dict (saved in QSettings)."""
        return self.value_io.values()

    def live_values(self) -> dict:
        """The live settings, also while a saved session's are shown (``PanelValues.live_values``)."""
        return self.value_io.live_values()

    def apply_values(self, v: dict) -> None:
        """Set the panel from ``values()`` output; unknown or bad entries are ignored."""
        self.value_io.apply_values(v)

    def show_saved(self, settings: dict | None, prompt: str, model_name: str, weights: str = "",
                   llama_cpp: dict | None = None, stored_weights: str = "") -> None:
        """Show a saved session's settings read only instead of the live ones (``PanelValues.show_saved``)."""
        self.value_io.show_saved(settings, prompt, model_name, weights, llama_cpp, stored_weights)

    def show_live(self) -> None:
        """Leave ``show_saved``: the live settings as they were before."""
        self.value_io.show_live()

    @property
    def showing_saved(self) -> bool:
        """The panel shows a saved session's settings (``show_saved``)."""
        return self.value_io.showing_saved
