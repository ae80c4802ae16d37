"""The control panel's settings as a plain dict (QSettings, tests) and a saved session's
settings shown read only in place of the live ones; stop strings typed on one line.

``PanelValues`` is a mixin of ``ControlPanel`` (it reads and sets the panel's widgets).
"""

from __future__ import annotations

import json

from inspector.engine.settings import PENALTY_DEFAULTS
from inspector.gui.panel.context_controls import DEFAULT_CONTEXT, loaded_context
from inspector.llama.quantize import TARGET_TYPES


def parse_stop_strings(text: str) -> tuple[str, ...]:
    """Stop strings from one line: ``|`` separates them; ``\\n``, ``\\t``, ``\\|`` and ``\\\\``
    stand for a newline, a tab, a ``|`` and a backslash. Empty strings are dropped."""
    out, cur, i = [], [], 0
    escapes = {"n": "\n", "t": "\t", "|": "|", "\\": "\\"}
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in escapes:
            cur.append(escapes[text[i + 1]])
            i += 2
            continue
        if c == "|":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return tuple(x for x in out if x)


def join_stop_strings(stops) -> str:
    """The inverse of ``parse_stop_strings``: one line with ``|`` between the strings."""
    def esc(x: str) -> str:
        return x.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n").replace("\t", "\\t")

    return "|".join(esc(str(x)) for x in stops)


class PanelValues:
    """``values`` / ``apply_values`` and ``show_saved`` / ``show_live`` of ``ControlPanel``."""

    def values(self) -> dict:
        """Every setting as a plain dict (saved in QSettings)."""
        options = {c.key: c.stored() for cs in self.option_controls.values() for c in cs.values()}
        return {
            "source": self.source.currentText(), **options,
            "draft_max": self.draft_max.value(), "max_tokens": self.max_tokens.value(),
            "n_ctx": self.n_ctx.value(), "threads": self.threads.value(), "stop": self.stop_strings.text(),
            "temperature": self.temperature.value(), "top_k": self.top_k.value(), "top_p": self.top_p.value(),
            "min_p": self.min_p.value(), "seed": self.seed.value(), "prompt": self.prompt.toPlainText(),
            **{name: box.value() for name, box in self.penalties.items()},
            "custom_prompt": self.custom_prompt,
            "verification": self.verification.currentText(), "draft_type": self.draft_type.currentText(),
            "raw": self.raw.isChecked(), "system_prompt": self.system_prompt.text(),
            "break_on": sorted(self.break_on()),
            "probabilities": self.probabilities.isChecked(),
            "baseline": self.baseline.isChecked(),
            "model": self.model_path(), "recent_models": self.recent_models(),
            "model_weights": json.dumps(self.weights_by_model, sort_keys=True),
            "gpu_layers": self.gpu_layers.value(), "rpc_servers": self.rpc_servers.text(),
            **self.llama_context.values(),
        }

    def show_saved(self, settings: dict | None, prompt: str, model_name: str, weights: str = "",
                   llama_cpp: dict | None = None) -> None:
        """Show a saved session's settings (a receipts file's or an autosave's ``settings``; ``llama_cpp``:
        its model's block of llama.cpp context settings, None: ours by default) instead of the live
        ones; the window keeps the inputs read only while it is shown. ``show_live`` puts the live
        settings back."""
        if self._live_values is None:
            self._live_values = self.values()
        st = settings or {}
        samp = st.get("sampling") or {}
        src = st.get("source") or {}
        opts = src.get("settings") or {}
        v = {"prompt": prompt, "max_tokens": st.get("max_new_tokens"), "draft_max": st.get("draft_max"),
             "temperature": samp.get("temperature"), "top_k": samp.get("top_k"), "top_p": samp.get("top_p"),
             "min_p": samp.get("min_p"), "seed": samp.get("seed"), "verification": st.get("verification"),
             "raw": bool(st.get("raw", False)), "n_ctx": st.get("n_ctx"),
             # a file without the setting was written before per-row probabilities (schema v1): none
             "probabilities": bool(st.get("probabilities", False)),
             "stop": join_stop_strings(st.get("stop") or ()), "system_prompt": st.get("system_prompt", ""),
             # a file without the penalties was written before them: llama-server's defaults (no penalty)
             **{name: samp.get(name, default) for name, default in PENALTY_DEFAULTS.items()}}
        name = str(src.get("name", ""))
        # The saved source's own options, by its declaration (as its settings() recorded them).
        v.update({c.key: opts.get(n) for n, c in self.option_controls.get(name, {}).items()})
        self.apply_values({k: x for k, x in v.items() if x is not None})
        self.llama_context.apply_values(loaded_context(llama_cpp) or DEFAULT_CONTEXT)
        if not self.set_source(name):
            self.other_note.setText(f"source {name!r} (not installed here)")
        self.show_saved_weights(weights)
        form = f" in {weights} form" if weights else ""
        self.model_status.setText(f"from the file: {model_name or 'model not named'}{form} (read only)")
        self.setup.setToolTip("the settings of the opened file (read only): File > New live session "
                              "(Ctrl+N) brings back your own")

    def show_live(self) -> None:
        """Leave ``show_saved``: the live settings as they were before."""
        if self._live_values is None:
            return
        values, self._live_values = self._live_values, None
        self.apply_values(values)
        self.setup.setToolTip("")

    @property
    def showing_saved(self) -> bool:
        """The panel shows a saved session's settings (``show_saved``)."""
        return self._live_values is not None

    def apply_values(self, v: dict) -> None:
        """Set the panel from ``values()`` output; unknown or bad entries are ignored."""
        def num(key, widget, cast):
            try:
                if key in v and v[key] is not None:
                    widget.setValue(cast(v[key]))
            except (TypeError, ValueError):
                pass

        if isinstance(v.get("source"), str):
            self.set_source(v["source"])  # a source no longer installed keeps the default
        if isinstance(v.get("rpc_servers"), str):
            self.rpc_servers.setText(v["rpc_servers"])
        for key, w in (("draft_max", self.draft_max), ("max_tokens", self.max_tokens), ("top_k", self.top_k),
                       ("gpu_layers", self.gpu_layers),
                       ("seed", self.seed), ("n_ctx", self.n_ctx), ("threads", self.threads)):
            num(key, w, int)
        for key, w in (("temperature", self.temperature), ("top_p", self.top_p), ("min_p", self.min_p)):
            num(key, w, float)
        for key, w in self.penalties.items():
            num(key, w, int if key == "repeat_last_n" else float)
        for key, combo in (("verification", self.verification), ("draft_type", self.draft_type)):
            if isinstance(v.get(key), str) and combo.findText(v[key]) >= 0:
                combo.setCurrentText(v[key])
        if isinstance(v.get("stop"), str):
            self.stop_strings.setText(v["stop"])
        self.llama_context.apply_values(v)
        if isinstance(v.get("system_prompt"), str):
            self.system_prompt.setText(v["system_prompt"])
        for controls in self.option_controls.values():  # every source's declared options (source_options)
            for c in controls.values():
                if v.get(c.key) is not None:
                    c.set_value(v[c.key])
        if isinstance(v.get("custom_prompt"), str):
            self.custom_prompt = v["custom_prompt"]
        if isinstance(v.get("prompt"), str):
            self.prompt.setPlainText(v["prompt"])
        for key, box in (("raw", self.raw), ("baseline", self.baseline), ("probabilities", self.probabilities)):
            if key in v:
                box.setChecked(str(v[key]).lower() in ("true", "1"))
        if isinstance(v.get("break_on"), (list, tuple)):
            for k, cb in self.break_boxes.items():
                cb.setChecked(k in v["break_on"])
        try:
            weights = json.loads(v["model_weights"]) if isinstance(v.get("model_weights"), str) else {}
        except ValueError:
            weights = {}
        if isinstance(weights, dict):
            self.weights_by_model = {str(m): str(t) for m, t in weights.items() if str(t) in TARGET_TYPES}
        recent = v.get("recent_models") or []
        if isinstance(recent, str):
            recent = [recent]
        for p in reversed([p for p in recent if p]):
            self.add_recent_model(p, select=False)
        if v.get("model"):
            self.add_recent_model(v["model"], select=True)
        self._show_model_weights()
