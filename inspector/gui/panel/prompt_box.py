"""The control panel's Prompt group: the example picker, the prompt editor, the raw box and the
system prompt (a widget the panel owns).

Picking an example replaces the editor's text; a prompt typed by hand is kept (``custom_prompt``)
and “custom prompt” in the picker brings it back. The picker follows the editor: it names the
example whose text is there, else “custom prompt”.
"""

from __future__ import annotations

from PySide6.QtWidgets import (QCheckBox, QComboBox, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
                               QVBoxLayout)

from inspector.gui.look.wording import RAW_BOX
from inspector.prompts import example_prompts

CUSTOM_PROMPT = "custom prompt"
"""The example picker's entry when the editor holds no example prompt's text."""


class PromptBox(QGroupBox):
    """The Prompt group: ``examples`` (picker), ``prompt`` (editor), ``raw``, ``system_prompt``."""

    def __init__(self, parent=None) -> None:
        super().__init__("Prompt", parent)
        gl = QVBoxLayout(self)
        gl.setContentsMargins(6, 4, 6, 4)
        gl.setSpacing(4)
        self.examples = QComboBox()
        self.examples.setToolTip("example prompts (assets/prompts); “custom prompt” when the editor holds "
                                 "another text")
        self.examples.addItem(CUSTOM_PROMPT, "")
        for name, text in example_prompts().items():
            self.examples.addItem(name, text)
        self.examples.activated.connect(self._example_chosen)
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
        self.context_note = QLabel("")
        """Under the editor while a long example is in it: the context it runs in (``show_context_note``)."""
        self.context_note.setWordWrap(True)
        self.context_note.setStyleSheet("color:#5d4037")
        self.context_note.hide()
        gl.addWidget(self.context_note)
        gl.addWidget(self.system_prompt)
        self.prompt.textChanged.connect(self._sync_example)

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

    def show_context_note(self, text: str) -> None:
        """Show ``text`` under the editor ("" hides the note)."""
        if self.context_note.text() != text:
            self.context_note.setText(text)
        self.context_note.setVisible(bool(text))

    def example_name(self) -> str:
        """The example prompt in the editor ("" for a custom prompt)."""
        return self.examples.currentText() if self.examples.currentIndex() > 0 else ""

    def choose_example(self, name: str) -> None:
        """Load the example prompt ``name`` (file stem of ``assets/prompts``). Raises ``KeyError``
        for a name the picker does not have."""
        i = self.examples.findText(name)
        if i < 0:
            raise KeyError(f"no example prompt {name!r}")
        self.examples.setCurrentIndex(i)
        self._example_chosen(i)
