"""The control panel's Limits and Sampling groups (widgets the panel owns): what a run generates and
how it samples.

``LimitsGroup``: max tokens, the context size, threads, the probabilities box, the stop strings and
llama.cpp's context settings (``ContextControls``) beside the context size. ``SamplingGroup``: one
control per declared sampling setting (``inspector.engine.llama_settings.SAMPLING``) and the
verification choice, offered only when sampling (temperature > 0). llama.cpp's names are in the tooltips.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QGroupBox, QLabel, QLineEdit

from inspector.engine import llama_settings
from inspector.engine.llama_settings import N_CTX, N_THREADS
from inspector.engine.probabilities import COST_NOTE
from inspector.engine.settings import DEFAULT_MAX_NEW_TOKENS, PENALTY_FIELDS, SamplingSettings
from inspector.gui.panel.context_controls import ContextControls
from inspector.gui.panel.values import parse_stop_strings
from inspector.gui.panel.widgets import setting_control, setting_tip, spin

PROBABILITIES_TIP = (
    "Keep the target's figures for every verification row in the receipts (the proposed token's probability "
    "and rank, the top 5 tokens, entropy, logit margin; the draft's q for a draft model): the Statistics tab's "
    f"acceptance-vs-probability charts and the Windows tab's p columns read them. Costs {COST_NOTE} "
    "(read from the verify batch's logits, no extra decode). Off (--no-probabilities): "
    "receipts without probability blocks, the smallest files.")


def compact_grid(box: QGroupBox) -> QGridLayout:
    """The grid of ``box`` with the panel's groups' small margins and spacing."""
    grid = QGridLayout(box)
    grid.setContentsMargins(6, 4, 6, 4)
    grid.setSpacing(4)
    return grid


class LimitsGroup(QGroupBox):
    """The Limits group: ``max_tokens``, ``n_ctx``, ``threads``, ``probabilities``,
    ``stop_strings`` and ``llama_context`` (-b -ub -fa -ctk -ctv)."""

    def __init__(self, parent=None) -> None:
        super().__init__("Limits", parent)
        grid = compact_grid(self)
        self.max_tokens = spin(1, 32768, DEFAULT_MAX_NEW_TOKENS, "--max-tokens (llama.cpp -n, n_predict): most "
                               f"tokens to generate [{DEFAULT_MAX_NEW_TOKENS}]")
        low, high, _step = N_CTX.control
        self.n_ctx = spin(int(low), int(high), N_CTX.default, f"--n-ctx (llama.cpp -c): context size in positions, "
                          f"prompt + output [{N_CTX.default}]; a change reloads the model")
        low, high, _step = N_THREADS.control
        self.threads = spin(int(low), int(high), N_THREADS.default, f"--threads: {N_THREADS.help_text()}")
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

    def stop_list(self) -> tuple[str, ...]:
        """The stop strings typed in the panel: separated by ``|``; ``\\n``, ``\\t``, ``\\|`` and
        ``\\\\`` are a newline, a tab, a ``|`` and a backslash. Empty entries are dropped."""
        return parse_stop_strings(self.stop_strings.text())


class SamplingGroup(QGroupBox):
    """The Sampling group: ``sampling_controls`` (``temperature``, ``top_k``, ... ``penalties``)
    and ``verification``."""

    def __init__(self, parent=None) -> None:
        super().__init__("Sampling (temperature 0 = greedy)", parent)
        grid = compact_grid(self)
        self.sampling_controls = {s.name: setting_control(s, setting_tip(s))
                                  for s in llama_settings.SAMPLING.values()}
        """A declared sampling setting's name (``SAMPLING``) -> its control, two to a row in declaration order
        (the verification choice takes the sixth place)."""
        c = self.sampling_controls
        self.temperature, self.top_k, self.top_p, self.min_p, self.seed = (
            c[k] for k in ("temperature", "top_k", "top_p", "min_p", "seed"))
        self.penalties = {name: c[name] for name in PENALTY_FIELDS}
        """``PENALTY_FIELDS`` name -> its box (llama.cpp's --repeat-penalty, ...)."""
        self.verification = QComboBox()
        self.verification.addItems(["sample_match", "rejection"])
        self.verification.setToolTip(
            "how a sampled run verifies proposals (temperature > 0 only)\n"
            "sample_match: accept while the proposal equals the target's sample (any source)\n"
            "rejection: speculative sampling with the draft's probabilities (draft source; "
            "other sources fall back to sample_match)")
        cells = [*c, "verification"]
        cells.insert(5, cells.pop())  # beside the seed, before the penalties
        for i, name in enumerate(cells):
            w = self.verification if name == "verification" else c[name]
            tag = QLabel("verify" if name == "verification" else llama_settings.SAMPLING[name].label)
            tag.setToolTip(w.toolTip())  # "freq.": the panel keeps its width; the tooltip says it all
            grid.addWidget(tag, i // 2, (i % 2) * 2)
            grid.addWidget(w, i // 2, (i % 2) * 2 + 1)
        self.temperature.valueChanged.connect(self.follow_temperature)
        self.follow_temperature(self.temperature.value())

    def follow_temperature(self, t: float) -> None:
        """Offer the verification choice only when sampling (temperature ``t`` > 0; greedy has one)."""
        self.verification.setEnabled(t > 0.0)

    def sampling_settings(self) -> SamplingSettings:
        """The sampling typed in the panel: each declared setting's control (``sampling_controls``)."""
        return SamplingSettings(**{name: w.value() for name, w in self.sampling_controls.items()})
