"""Help > Read me (issue 36, 8; issue 55): the README and the documentation's pages as a user of the window
wants them.

- A page picker holds the README and every page of the documentation site the package ships
  (``docs_pages``); a link of the README to a page (``inspector/docs/pages/serve.md``), of a page to another
  (``run.md#same-as-llama-server``) or to a heading of its own shows that page at that heading.
- Its images (``assets/...`` relative to the README, ``../../../assets/...`` to a page) come from the installed package
  (``inspector.asset_path``: the ``assets/`` folder in a checkout, ``inspector/assets`` in a wheel, whose
  package data holds every ``*.png``), each at most the view's width (it scales when the dialog does); an
  image whose file is missing is left out with nothing in its place (never a broken-image icon).
- Every heading is an anchor named as GitHub names it (``heading_anchor``), so the README's own
  ``[...](#section)`` links work, and a section picker above the text jumps to any heading.
- It opens at the README's top: what the program is and its screenshot; Quick start below.

The text is the README of the checkout the package runs from (an editable install's metadata keeps the
README of the day it was installed), else the installed package's metadata (``help_menu.readme_text``).
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QPoint, QTimer, QUrl
from PySide6.QtGui import QImage, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QTextBrowser, QVBoxLayout

import inspector
from inspector.gui.shell.docs_pages import README, link_target, page_markdown, site_pages

ASSETS_FOLDER = "assets"
"""Where the README and the pages find their images: the repository's ``assets/`` folder."""


def checkout_readme() -> Path | None:
    """README.md of the checkout the package runs from (``pip install -e``), None in an installed wheel."""
    root = Path(inspector.__file__).resolve().parent.parent
    readme, project = root / "README.md", root / "pyproject.toml"
    if readme.is_file() and project.is_file() and 'name = "spec-inspector"' in project.read_text("utf-8"):
        return readme
    return None


def image_file(name: str) -> Path | None:
    """The file of the README's or a page's image ``name`` (``assets/screenshot.png``,
    ``../../../assets/tree.png``) in the installed package, or None (another folder, a URL, or no such file)."""
    parts = name.split("/")
    while parts and parts[0] == "..":
        parts.pop(0)
    if len(parts) < 2 or parts[0] != ASSETS_FOLDER or ".." in parts:
        return None
    path = inspector.asset_path("/".join(parts[1:]))
    return path if path.is_file() else None


def heading_anchor(text: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens
    ("Several machines: llama.cpp RPC" -> "several-machines-llamacpp-rpc")."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def headings(doc: QTextDocument) -> list[tuple[int, str]]:
    """(level, text) of every heading of ``doc``, in order."""
    out, block = [], doc.begin()
    while block.isValid():
        level = block.blockFormat().headingLevel()
        if level:
            out.append((level, block.text()))
        block = block.next()
    return out


def name_headings(doc: QTextDocument) -> None:
    """Make every heading of ``doc`` an anchor (``heading_anchor``)."""
    block = doc.begin()
    while block.isValid():
        if block.blockFormat().headingLevel() and block.text():
            cursor = QTextCursor(block)
            cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock)
            cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            fmt = cursor.charFormat()
            fmt.setAnchor(True)
            fmt.setAnchorNames([heading_anchor(block.text())])
            cursor.mergeCharFormat(fmt)
        block = block.next()


def image_positions(doc: QTextDocument) -> list[tuple[int, str]]:
    """(position, name) of every image of ``doc``, in order."""
    found = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().isImageFormat():
                for i in range(fragment.length()):  # one object character per image
                    found.append((fragment.position() + i, fragment.charFormat().toImageFormat().name()))
            it += 1
        block = block.next()
    return found


def place_images(doc: QTextDocument) -> tuple[list[str], list[str]]:
    """Give every image of ``doc`` its file (``image_file``) as a document resource; remove the images
    with no file. Returns (names shown, names left out)."""
    shown, missing = [], []
    for position, name in reversed(image_positions(doc)):  # from the end: a removal keeps earlier positions
        path = image_file(name)
        image = QImage(str(path)) if path is not None else QImage()
        if image.isNull():
            cursor = QTextCursor(doc)
            cursor.setPosition(position)
            cursor.setPosition(position + 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            missing.append(name)
        else:
            doc.addResource(QTextDocument.ResourceType.ImageResource, QUrl(name), image)
            shown.append(name)
    return shown[::-1], missing[::-1]


def fit_images(doc: QTextDocument, width: float) -> None:
    """Draw every image of ``doc`` at most ``width`` pixels wide, less its block's indent (an image in a
    list item sits further right), keeping its proportions."""
    for position, name in image_positions(doc):
        image = doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(name))
        if not isinstance(image, QImage) or image.isNull():
            continue
        block = doc.findBlock(position)
        listed = block.textList()
        indent = (block.blockFormat().leftMargin() + doc.indentWidth() * (
            block.blockFormat().indent() + (listed.format().indent() if listed is not None else 0)))
        w = max(16.0, min(float(image.width()), width - indent))
        cursor = QTextCursor(doc)
        cursor.setPosition(position)
        cursor.setPosition(position + 1, QTextCursor.MoveMode.KeepAnchor)
        fmt = cursor.charFormat().toImageFormat()
        fmt.setWidth(w)
        fmt.setHeight(w * image.height() / image.width())
        cursor.setCharFormat(fmt)
    # Lay the whole text out again: after these format changes Qt re-lays only the part in view, and the
    # headings below it would keep a height of 0 (anchors and the section picker would land wrong).
    doc.markContentsDirty(0, doc.characterCount())


CODE_POINTS_LESS = 1.5
"""Code blocks are this many points smaller than the text: the README's result tables (134 columns) fit a
900 px dialog whole."""


def wrap_code(doc: QTextDocument) -> None:
    """Let code blocks wrap at the view's width (a long command line needs no sideways scrolling), a little
    smaller than the text (``CODE_POINTS_LESS``)."""
    size = max(6.0, doc.defaultFont().pointSizeF() - CODE_POINTS_LESS)
    block = doc.begin()
    while block.isValid():
        if block.blockFormat().nonBreakableLines():
            cursor = QTextCursor(block)
            fmt = block.blockFormat()
            fmt.setNonBreakableLines(False)
            cursor.setBlockFormat(fmt)
            cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
            smaller = QTextCharFormat()
            smaller.setFontPointSize(size)
            cursor.mergeCharFormat(smaller)
        block = block.next()


def section_at(view: QTextBrowser) -> str:
    """The text of the last heading at or above the top of ``view``'s visible part (the document's margin
    above the first one counts): the section it shows, "" when no heading is."""
    doc, top = view.document(), view.verticalScrollBar().value() + view.document().documentMargin() + 1
    layout, block, found = doc.documentLayout(), doc.begin(), ""
    while block.isValid():
        if block.blockFormat().headingLevel():
            if layout.blockBoundingRect(block).top() > top:
                break
            found = block.text()
        block = block.next()
    return found


def first_visible_heading(view: QTextBrowser) -> str:
    """The text of the first heading whose top is in ``view``'s visible part ("" when none is)."""
    doc, top = view.document(), view.verticalScrollBar().value()
    layout = doc.documentLayout()
    block = doc.begin()
    while block.isValid():
        if block.blockFormat().headingLevel():
            y = layout.blockBoundingRect(block).top()
            if y >= top - 1:
                return block.text() if y < top + view.viewport().height() else ""
        block = block.next()
    return ""


class ReadmeBrowser(QTextBrowser):
    """A ``QTextBrowser`` whose images fit its width (``fit_images``), again after it resizes (once the
    resize is over: a document changed while the view lays it out is left half laid out), keeping the
    text that was at its top there."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.fitted_width = -1.0
        self.fitting = False
        self.kept: tuple | None = None
        """(block, pixels of it above the view) at the top when a resize began; ``fit`` scrolls back to it."""
        self.fit_timer = QTimer(self)
        self.fit_timer.setSingleShot(True)
        self.fit_timer.setInterval(0)
        self.fit_timer.timeout.connect(self.fit)

    def top_place(self) -> tuple:
        """(block, pixels of it above the view) of the text at the top of the view."""
        block = self.cursorForPosition(QPoint(0, 0)).block()
        return block, self.verticalScrollBar().value() - self.document().documentLayout().blockBoundingRect(block).top()

    def keep_place(self, place: tuple | None) -> None:
        """Scroll so ``place`` (``top_place``) is at the top again (no-op at the very top)."""
        bar = self.verticalScrollBar()
        if place is not None and (bar.value() > 0 or place[1] > 0):
            block, below = place
            bar.setValue(round(self.document().documentLayout().blockBoundingRect(block).top() + below))

    def fit(self) -> None:
        """``fit_images`` at the view's width (when it changed); the text at the top of the view stays there."""
        kept, self.kept = self.kept, None
        width = self.viewport().width() - 2 * self.document().documentMargin() - 4
        if width == self.fitted_width:
            return
        self.fitted_width = width
        kept = kept or self.top_place()
        self.fitting = True  # the scroll bars may resize the view meanwhile: not a resize to keep a place for
        try:
            fit_images(self.document(), width)
        finally:
            self.fitting = False
        self.keep_place(kept)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self.kept is None and self.isVisible() and not self.fitting:
            self.kept = self.top_place()
        super().resizeEvent(event)
        if not self.fitting:
            self.fit_timer.start()


class ReadmeDialog(QDialog):
    """The README (``markdown``) and the documentation's pages (a page picker), each with its images and a
    section picker; links between them work (``follow_link``). Opens at the README's top."""

    def __init__(self, parent, markdown: str, size: tuple[int, int]) -> None:
        super().__init__(parent)
        self.setWindowTitle("spec-inspector: read me")
        self.readme = markdown
        self.page = README
        """The page shown: ``README`` or a site page's file name."""
        self.text = ReadmeBrowser(self)  # tests read it
        self.text.setOpenExternalLinks(True)  # a URL opens in the browser; a page link is ours
        self.text.setOpenLinks(False)
        self.text.anchorClicked.connect(self.follow_link)
        self.pages = QComboBox(self)
        self.pages.setToolTip("the README and every page of the documentation")
        self.pages.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.pages.setMinimumContentsLength(16)  # nor does a long page title
        self.pages.addItem("README", README)
        for title, name in site_pages():
            self.pages.addItem(title, name)
        self.pages.activated.connect(lambda i: self.show_page(self.pages.itemData(i)))
        self.sections = QComboBox(self)
        self.sections.setToolTip("jump to a section of the page")
        self.sections.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.sections.setMinimumContentsLength(24)  # a long heading does not widen the dialog
        self.sections.activated.connect(lambda i: self.go_to(self.sections.itemData(i)))
        self.text.verticalScrollBar().valueChanged.connect(self.follow_scroll)
        # The page is laid out after it is shown (and again when the dialog's width changes): the picker
        # follows then too, not only on a scroll (before, it named the last section over the page's top).
        self.text.document().documentLayout().documentSizeChanged.connect(lambda _size: self.follow_scroll())
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Page:"))
        pick.addWidget(self.pages)
        pick.addWidget(QLabel("Section:"))
        pick.addWidget(self.sections, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(pick)
        layout.addWidget(self.text)
        layout.addWidget(buttons)
        self.resize(*size)
        self.show_page(README)

    def show_page(self, name: str, anchor: str = "") -> None:
        """Show page ``name`` (``README`` or a site page's file name) with its images fitted, at heading
        ``anchor`` (its top when ""); the pickers follow."""
        self.page = name
        self.pages.setCurrentIndex(max(0, self.pages.findData(name)))
        self.text.setMarkdown(self.readme if name == README else page_markdown(name))
        doc = self.text.document()
        self.images_shown, self.images_left_out = place_images(doc)
        name_headings(doc)
        wrap_code(doc)
        self.sections.clear()
        for level, text in headings(doc):
            self.sections.addItem("    " * max(0, level - 2) + text, heading_anchor(text))
        self.text.fitted_width = -1.0  # a new document: its images fit the view's width again
        self.text.fit()
        if anchor:
            self.go_to(anchor)
        else:
            self.text.verticalScrollBar().setValue(0)
        self.follow_scroll()

    def follow_link(self, url: QUrl) -> None:
        """Show what a clicked relative link points at: a heading of this page, or another page (at its
        heading); a link to no page does nothing (URLs open in the browser before they get here)."""
        target = link_target(url.toString())
        if target is None:
            return
        page, anchor = target
        if page and page != self.page:
            self.show_page(page, anchor)
        elif anchor:
            self.go_to(anchor)

    def follow_scroll(self) -> None:
        """The section picker names the section the text shows."""
        i = self.sections.findData(heading_anchor(section_at(self.text)))
        if i >= 0:
            self.sections.setCurrentIndex(i)

    def go_to(self, anchor: str) -> None:
        """Scroll the text to the heading ``anchor`` (a ``heading_anchor``), its top at the view's top."""
        self.text.kept = None  # a jump wins over the place a resize keeps
        self.text.scrollToAnchor(anchor)
