"""The window's model line and what a model load does to it.

``ModelLine`` handles the worker's ``modelProgress``, ``modelLoaded`` and ``modelFailed``: the
progress bar, the model panel's status line (file, weight form, GGUF name), the weights box's
knowledge of each file's own weight type, and the banner's word on a load. It gets the window's
model (``WindowModel``: the loaded model's ``model_info``, the session shown, what the window says) and
the side panel.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QObject, QRect, Qt

from inspector.gui.look.banner_colours import BANNER_ERROR, BANNER_HINT
from inspector.gui.model.window_model import WindowModel

LOADED_HINT = "Model loaded. Pick an example prompt and press <b>Run</b> (Ctrl+R)."


class ModelLine(QObject):
    """What the window shows of the loaded model.

    ``info``: the loaded model's ``describe()`` dict (the model's ``model_info``), or None before one is loaded.
    A ``QObject`` (a child of ``parent``) so the worker's signals reach its methods on the GUI thread."""

    def __init__(self, model: WindowModel, panel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model, self.panel, self.worker = model, panel, model.worker
        self._hint_on_load = False  # show "Model loaded. …" when the load in flight ends (not a run's load)

    @property
    def info(self) -> dict | None:
        """The loaded model's ``describe()`` (``WindowModel.model_info``), or None."""
        return self.model.model_info

    def expect_load(self, hint: bool) -> None:
        """The load in flight (or the next one) ends with the banner's "Model loaded" hint when ``hint``
        (a load the user asked for), without it for a run's own load."""
        self._hint_on_load = hint

    def progress_changed(self, v: float) -> None:
        """The load is ``v`` (0..1) done."""
        self.model.show_progress(int(v * 100))

    def show(self, info: dict | None) -> None:
        """The model panel's status line: the loaded model (file, GGUF name) or "not loaded"; a saved
        session shown keeps its own (``show_saved``)."""
        if self.panel.showing_saved:
            return
        label = self.panel.model_status
        if info is None:
            label.setText("not loaded")
            label.setToolTip("")
            return
        size = info.get("size_bytes")
        name = f" — {info['name']}" if info.get("name") else ""  # GGUF general.name
        shown = Path(info.get("converted_from") or info["path"]).name
        form = f" in {info.get('weights')} form" if info.get("converted_from") else ""
        if info.get("devices"):  # layers on RPC servers: where they went, in two lines at most
            label.setText(f"loaded: {shown}{form} · {info['layers']}")
        else:
            label.setText(f"loaded: {shown}{form}{name} ({info['architecture']}, n_ctx {info['n_ctx']})")
        label.setToolTip(
            f"{info['path']}{name} ({info['architecture']}, weights {info.get('weights', '?')}, "
            f"{info.get('layers', 'all layers on the CPU')}, "
            f"vocab {info['n_vocab']} tokens"
            f"{f', {size / 1e6:.0f} MB' if size else ''}, n_ctx {info['n_ctx']})")
        # room for every wrapped line (the scrolling panel squeezed it)
        width = max(120, label.width())
        lines = label.fontMetrics().boundingRect(QRect(0, 0, width, 10_000), int(Qt.TextFlag.TextWordWrap),
                                                 label.text()).height()
        label.setMinimumHeight(lines + 4)

    def loaded(self, info: dict) -> None:
        """A model was loaded (``info``: its ``describe()``): the panel follows it, the banner says so."""
        self.model.model_info = info
        self.model.show_progress(None)
        self.show(info)
        if info.get("offload_note"):  # e.g. -ngl asked for, no GPU and no RPC server: say so, once
            self.model.say(f"note: {info['offload_note']}")
        self.panel.select_model(str(info.get("converted_from") or info["path"]))  # a converted file: its original
        self.panel.know_stored_weights(self.panel.model_path(), info.get("converted_from_weights", "")
                                       if info.get("converted_from") else info.get("weights", ""))
        self.panel.n_ctx.setValue(int(info["n_ctx"]))  # the context the loaded model has
        self.panel.llama_context.show_loaded(info.get("llama_cpp"))  # and its -b -ub -fa -ctk -ctv
        hint, self._hint_on_load = self._hint_on_load, False
        session = self.model.session
        if hint and session.origin == "live" and not session.tokens:
            self.model.set_banner(f"{LOADED_HINT} &nbsp;<span style='color:#555'>(Step window F10 and Step token "
                            "F11 go one window or one token at a time.)</span>", BANNER_HINT)
        elif session.origin == "live" and session.header is not None:
            self._say_session_ran_elsewhere(info)

    def _say_session_ran_elsewhere(self, info: dict) -> None:
        """The loaded model (or weight form) is not the one the shown live session ran on: the banner
        says whose run is shown, and how to run on the new one."""
        ran = self.model.session.header.model
        then = (str(ran.get("converted_from") or ran.get("path", "")),
                str(ran.get("weights", "")) if ran.get("converted_from") else "",
                str(ran.get("converted_from_weights") or ran.get("weights", "")))
        now = (str(info.get("converted_from") or info["path"]), str(info.get("weights", ""))
               if info.get("converted_from") else "", str(info.get("converted_from_weights") or info.get("weights", "")))
        if then[:2] == now[:2]:
            return

        def name(path_form) -> str:
            path, form, stored = path_form
            shown = f"<b>{html.escape(Path(path).name)}</b>"
            if form:
                return f"{shown} in {form} form"
            return f"{shown} as stored ({stored})" if stored else f"{shown} as stored"

        self.panel.show_draft_max_used(None)  # what auto resolved to belonged to the other model or form
        self.model.set_banner(f"Loaded {name(now)}. The run shown ran on {name(then)} (its receipts are kept: Export "
                        "receipts); <b>Run</b> (Ctrl+R) runs on the new model.", BANNER_HINT)

    def failed(self, message: str, path: str = "") -> None:
        """``path`` could not be loaded: the model loaded before stays loaded, selected and usable;
        the bad file leaves the recent models (the window showed the session from before the run first)."""
        self._hint_on_load = False
        self.model.show_progress(None)
        if path and not self.panel.rpc_servers.text().strip():  # an RPC failure is the server's, not the file's
            self.panel.remove_recent_model(path)
        loaded = self.info if self.worker.runtime is not None else None
        self.show(loaded)
        if loaded is not None:
            self.panel.select_model(str(loaded.get("converted_from") or loaded["path"]))
        keeps = (f"{html.escape(Path(loaded['path']).name)} stays loaded." if loaded is not None
                 else "No model is loaded: pick one in the Model list or Open… a GGUF file.")
        session = self.model.session
        if session.origin == "live" and not session.tokens:
            self.model.set_banner(f"<b>Cannot load {html.escape(Path(path).name) or 'the model'}</b> (see the message). "
                            f"{keeps}", BANNER_ERROR)
        self.model.show_error("Cannot load the model", message)
