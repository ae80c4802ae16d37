"""What the window can be told to do: its commands, in one table the menus, the toolbar and the tests use.

The commands are the window's helpers' own methods (``RunControl``, ``FileActions``, ``ServeActions``,
``AnalysisActions``); the window fills the table once they exist (``WindowModel.commands``) and the File and
Run menus connect their items to it (``RunMenus.connect``). A test says ``model.commands.step_window()`` and
does not need to know which helper steps a window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowCommands:
    """The window's commands. The menus' items take no argument (``serve(on)`` is the Serve switch); the rest
    are what a script, a drop on the window or a test asks with an argument."""

    new_live_session: Callable[[], None]
    """Leave a viewed receipts file: an empty live session, the run controls enabled again."""
    open_model: Callable[[], None]
    """File > Open GGUF model… (a file dialog)."""
    open_receipts: Callable[[], None]
    """File > Open receipts… (a file dialog)."""
    compare_receipts: Callable[[], None]
    """File > Compare with receipts… (a file dialog): the shown run beside another document of its prompt."""
    export_receipts: Callable[[], None]
    """File > Export receipts… (a file dialog)."""
    export_plots: Callable[[], None]
    """File > Export plots as PNG… (a folder dialog)."""
    export_trace: Callable[[], None]
    """File > Export Perfetto trace… (a file dialog)."""
    open_last_autosave: Callable[[], None]
    """File > Open last autosave."""
    quit: Callable[[], None]
    """File > Quit: close now, or ask first while something works."""
    run: Callable[[], None]
    """Run / continue (Ctrl+R): start a run from the side panel's values, or continue a paused one."""
    pause: Callable[[], None]
    """Pause at the next step boundary."""
    step_window: Callable[[], None]
    """Run one proposal window (or one plain step), then pause."""
    step_token: Callable[[], None]
    """Commit one more token, then pause."""
    stop: Callable[[], None]
    """Stop the run (its receipts so far are kept)."""
    resume: Callable[[], None]
    """Resume after an error (the repair ran)."""
    serve: Callable[[bool], None]
    """Serve (llama-server API) on (True) or off (False)."""
    start_run: Callable[..., bool]
    """Start a run from the side panel's values with keyword overrides (``RunControl.start_run``); False when
    it cannot start (the reason is shown)."""
    open_receipts_file: Callable[[str], bool]
    """Read a receipts document (path) on a background thread; the model's ``fileOpened`` tells the end."""
    compare_receipts_file: Callable[[str], object]
    """Compare the shown run with the receipts document at a path on a background thread (``DiffDialog``); the
    model's ``receiptsCompared`` tells the end. None when nothing shown makes a document."""
    export_receipts_file: Callable[[str], object]
    """Write the shown session's receipts (path) on a background thread; the model's ``exported`` tells the
    end. None when nothing can be exported."""
    export_trace_file: Callable[[str], object]
    """Write the shown session as a Perfetto trace (path), like ``export_receipts_file``."""
    export_plots_to: Callable[[str], list]
    """Write the plots as PNG files into a folder (path); the files written."""
    compare: Callable[[], object]
    """Analysis > Compare sources…: show the Compare dialog (its ``CompareView``)."""
    run_compare: Callable[..., bool]
    """Run a comparison (configurations, optional conversation) on the worker; the model's ``compareReady``
    tells the end."""
    measure_cost: Callable[[], bool]
    """Analysis > Measure cost model: measure c(k) on the worker; the model's ``costReady`` tells the end."""
    show_readme: Callable[[], object]
    """Help > Read me: the manual's pages from the installed package, in a dialog (returned)."""
    show_shortcuts: Callable[[], object]
    """Help > Keyboard shortcuts: every shortcut of the window, in a dialog (returned)."""
    show_about: Callable[[], object]
    """Help > About: the versions of spec-inspector, llama.cpp and Qt, in a box (returned)."""
    copy_server_flags: Callable[[], str | None]
    """Analysis > Copy llama-server flags: the shown run's settings as llama-server flags, also on the
    clipboard (None when there is no run)."""
