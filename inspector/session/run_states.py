"""The window's states and which controls each enables, without Qt.

States: the worker's ``IDLE``, ``LOADING``, ``RUNNING``, ``PAUSED`` and ``TOKEN_HOLD``
(``EngineWorker.stateChanged``), and the window's own ``ERROR`` (a run failed; Resume
continues) and ``BUSY`` (the engine thread measures the cost model or compares
configurations) and ``SERVING`` (the window serves llama-server's HTTP API on the loaded model:
``inspector.gui.serve``). ``control_states`` decides what is enabled from the state and what the
window shows; ``RunControl.set_state`` applies it to the widgets and actions. Every state is defined
here, ``step_control``'s ``RUNNING``, ``PAUSED`` and ``TOKEN_HOLD`` too (it announces them), so that every
package of the window (the worker, the views, the shell) reads the states from below them.
"""

from __future__ import annotations

RUNNING = "running"
PAUSED = "paused"
TOKEN_HOLD = "token_hold"
"""``StepControl``'s states (``inspector.session.step_control``): running, paused between decode steps,
holding before a committed token."""
IDLE = "idle"
LOADING = "loading"
ERROR = "error"
BUSY = "busy"
"""Not a worker state: the window while the engine thread measures the cost model or compares configurations."""
SERVING = "serving"
"""Not a worker state: the window serves llama-server's HTTP API on the loaded model (the server's own thread
decodes; no run starts until Serve is off)."""

RUN_STATES = (RUNNING, PAUSED, TOKEN_HOLD, ERROR)
"""A run is going (it may be paused, holding or stopped at an error)."""
ACTIVE_STATES = (*RUN_STATES, LOADING)
"""A run is going or a model is loading: the views follow the live session."""
STEPPING_STATES = (PAUSED, TOKEN_HOLD)
"""Waiting for the user: Continue, Step window and Step token go on."""

LIVE = "live"
"""``SessionRecord.origin`` of a session the window runs; a saved one (``document``, ``autosave``) is read only."""

CONTROLS = ("run", "run_continues", "pause", "step_window", "step_token", "stop", "resume", "faults",
            "setup", "choose_model", "live_options", "make_draft", "open_receipts")


def control_states(state: str, *, origin: str = LIVE, opening: bool = False,
                   making_draft: bool = False) -> dict[str, bool]:
    """Which controls are enabled in ``state`` (keys: ``CONTROLS``).

    ``origin``: the shown session's origin (a saved session is read only: no run starts until
    File > New live session); ``opening``: a receipts file is being read; ``making_draft``: a
    draft model is being made. ``run_continues``: Run reads Continue; ``setup``: the run's
    settings (model, source, prompt, sampling, limits); ``live_options``: the fault token,
    break-on boxes, Compare with plain decoding and background sessions (usable during a run);
    ``faults``: the fault buttons (armed before a run, injected during it, armed on a slot while serving); ``choose_model``: the model
    file and its weight form (also while serving: choosing another model stops serving first)."""
    viewing = origin != LIVE
    idle = state == IDLE
    active = state in RUN_STATES
    stepping = state in STEPPING_STATES
    can_start = idle and not viewing and not opening
    return {
        "run": can_start or stepping,
        "run_continues": stepping,
        "pause": state in (RUNNING, TOKEN_HOLD),
        "step_window": can_start or stepping,
        "step_token": can_start or stepping,
        "stop": active,
        "resume": state == ERROR,
        "faults": (active and state != ERROR) or (idle and not viewing) or state == SERVING,
        "setup": not active and state not in (LOADING, SERVING) and not viewing,
        "choose_model": (not active and state != LOADING and not viewing) or state == SERVING,
        "live_options": not viewing,
        "make_draft": not making_draft,
        "open_receipts": not active and not opening and state != SERVING,
    }


STATE_LABELS = {IDLE: "ready", LOADING: "loading model…", BUSY: "busy", RUNNING: "running", PAUSED: "paused",
                TOKEN_HOLD: "holding before a commit (Step token)", ERROR: "error — Resume continues",
                SERVING: "serving"}


def state_label(state: str, detail: str = "", *, origin: str = LIVE) -> str:
    """The status bar's text for ``state`` (with ``detail`` after a dot)."""
    label = STATE_LABELS[state]
    if origin != LIVE and state == IDLE:
        label = f"viewing {'saved receipts' if origin == 'document' else 'an autosave'}" \
                " (read only) — File > New live session (Ctrl+N) to run"
    return label + (f" · {detail}" if detail else "")
