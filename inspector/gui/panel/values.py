"""The control panel's settings as a plain dict (QSettings, tests) and a saved session's
settings shown read only in place of the live ones; stop strings typed on one line.

``PanelValues`` is an object the ``ControlPanel`` owns: it reads and sets the panel's widgets
through their public names, and keeps the live settings while a saved session's are shown.
"""

from __future__ import annotations

import json

from inspector.engine.llama_settings import SAMPLING
from inspector.llama.context_settings import DEFAULT_CONTEXT, loaded_context
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
    """``values`` / ``apply_values`` and ``show_saved`` / ``show_live`` of the ``ControlPanel`` ``panel``."""

    def __init__(self, panel) -> None:
        self.panel = panel
        self._live_values: dict | None = None  # the live settings while a saved session's are shown

    def values(self) -> dict:
        """Every setting as a plain dict (saved in QSettings)."""
        p, m = self.panel, self.panel.model_choice
        options = {c.key: c.stored() for cs in p.option_controls.values() for c in cs.values()}
        return {
            "source": p.source.currentText(), **options,
            "draft_max": p.draft_max.value(), "max_tokens": p.max_tokens.value(),
            "n_ctx": p.n_ctx.value(), "threads": p.threads.value(), "stop": p.stop_strings.text(),
            "prompt": p.prompt.toPlainText(),
            **{name: box.value() for name, box in p.sampling_controls.items()},  # by their declared names
            "custom_prompt": p.prompt_box.custom_prompt,
            "verification": p.verification.currentText(), "draft_type": p.draft_type.currentText(),
            "raw": p.raw.isChecked(), "system_prompt": p.system_prompt.text(),
            "break_on": sorted(p.break_on()),
            "probabilities": p.probabilities.isChecked(),
            "baseline": p.baseline.isChecked(),
            "model": m.model_path(), "recent_models": m.recent_models(),
            "model_weights": json.dumps(m.weights_by_model, sort_keys=True),
            "gpu_layers": m.gpu_layers.value(), "rpc_servers": m.rpc_servers.text(),
            **p.llama_context.values(),
        }

    def show_saved(self, settings: dict | None, prompt: str, model_name: str, weights: str = "",
                   llama_cpp: dict | None = None, stored_weights: str = "") -> None:
        """Show a saved session's settings (a receipts file's or an autosave's ``settings``; ``llama_cpp``:
        its model's block of llama.cpp context settings, None: ours by default) instead of the live
        ones; the window keeps the inputs read only while it is shown. ``show_live`` puts the live
        settings back."""
        p = self.panel
        if self._live_values is None:
            self._live_values = self.values()
        st = settings or {}
        samp = st.get("sampling") or {}
        src = st.get("source") or {}
        opts = src.get("settings") or {}
        v = {"prompt": prompt, "max_tokens": st.get("max_new_tokens"), "draft_max": st.get("draft_max"),
             "verification": st.get("verification"),
             "raw": bool(st.get("raw", False)), "n_ctx": st.get("n_ctx"),
             # a file without the setting was written before per-row probabilities (schema v1): none
             "probabilities": bool(st.get("probabilities", False)),
             "stop": join_stop_strings(st.get("stop") or ()), "system_prompt": st.get("system_prompt", ""),
             # each sampling setting by its receipts field; a file written before one was recorded (the
             # penalties): its declared default (no penalty)
             **{name: samp.get(name, s.default) for name, s in SAMPLING.items()}}
        name = str(src.get("name", ""))
        # The saved source's own options, by its declaration (as its settings() recorded them); one the file
        # does not record (written before the option existed): its declared default, not the live value.
        v.update({c.key: opts.get(n, c.option.default) for n, c in p.option_controls.get(name, {}).items()})
        self.apply_values({k: x for k, x in v.items() if x is not None})
        p.llama_context.apply_values(loaded_context(llama_cpp) or DEFAULT_CONTEXT)
        if not p.set_source(name):
            p.other_note.setText(f"source {name!r} (not installed here)")
        p.model_choice.show_saved_weights(weights, stored_weights)
        form = f" in {weights} form" if weights else f" as stored ({stored_weights})" if stored_weights else ""
        p.model_choice.model_status.setText(f"from the file: {model_name or 'model not named'}{form} (read only)")
        p.setup.setToolTip("the settings of the opened file (read only): File > New live session "
                           "(Ctrl+N) brings back your own")

    def show_live(self) -> None:
        """Leave ``show_saved``: the live settings as they were before."""
        p = self.panel
        if self._live_values is None:
            return
        values, self._live_values = self._live_values, None
        self.apply_values(values)
        p.setup.setToolTip("")

    def live_values(self) -> dict:
        """The live settings (``values``), also while a saved session's are shown: what the window remembers."""
        return dict(self._live_values) if self._live_values is not None else self.values()

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

        p, m = self.panel, self.panel.model_choice
        if isinstance(v.get("source"), str):
            p.set_source(v["source"])  # a source no longer installed keeps the default
        if isinstance(v.get("rpc_servers"), str):
            m.rpc_servers.setText(v["rpc_servers"])
        for key, w in (("draft_max", p.draft_max), ("max_tokens", p.max_tokens), ("gpu_layers", m.gpu_layers),
                       ("n_ctx", p.n_ctx), ("threads", p.threads)):
            num(key, w, int)
        for key, w in p.sampling_controls.items():
            num(key, w, SAMPLING[key].type)
        for key, combo in (("verification", p.verification), ("draft_type", p.draft_type)):
            if isinstance(v.get(key), str) and combo.findText(v[key]) >= 0:
                combo.setCurrentText(v[key])
        if isinstance(v.get("stop"), str):
            p.stop_strings.setText(v["stop"])
        p.llama_context.apply_values(v)
        if isinstance(v.get("system_prompt"), str):
            p.system_prompt.setText(v["system_prompt"])
        for controls in p.option_controls.values():  # every source's declared options (source_options)
            for c in controls.values():
                if v.get(c.key) is not None:
                    c.set_value(v[c.key])
        if isinstance(v.get("custom_prompt"), str):
            p.prompt_box.custom_prompt = v["custom_prompt"]
        if isinstance(v.get("prompt"), str):
            p.prompt.setPlainText(v["prompt"])
        for key, box in (("raw", p.raw), ("baseline", p.baseline), ("probabilities", p.probabilities)):
            if key in v:
                box.setChecked(str(v[key]).lower() in ("true", "1"))
        if isinstance(v.get("break_on"), (list, tuple)):
            for k, cb in p.break_boxes.items():
                cb.setChecked(k in v["break_on"])
        try:
            weights = json.loads(v["model_weights"]) if isinstance(v.get("model_weights"), str) else {}
        except ValueError:
            weights = {}
        if isinstance(weights, dict):
            m.weights_by_model = {str(m): str(t) for m, t in weights.items() if str(t) in TARGET_TYPES}
        recent = v.get("recent_models") or []
        if isinstance(recent, str):
            recent = [recent]
        for path in reversed([x for x in recent if x]):
            m.add_recent_model(path, select=False)
        if v.get("model"):
            m.add_recent_model(v["model"], select=True)
        m.show_model_weights()
