"""What each of the side panel's buttons and boxes does (``wire_panel``): Run / Pause / Step / Stop /
Resume go to the ``RunControl``, the model choice to a load, Open… of a path option and Make draft to
the ``SourceActions``, the fault buttons to injected faults, the background sessions and the break-on
boxes straight to the engine worker (a direct call: it may be busy)."""

from __future__ import annotations

from inspector.engine.faults import Fault


def wire_panel(panel, run, *, files, sources, worker, load_model) -> None:
    """Connect ``panel``'s (``ControlPanel``) controls: to ``run`` (``RunControl``), ``files``
    (``FileActions``: Open GGUF), ``sources`` (``SourceActions``), ``worker`` (``EngineWorker``) and
    ``load_model()`` (load the chosen model; while serving, serving stops first)."""
    p = panel
    p.run.clicked.connect(run.run_clicked)
    p.pause.clicked.connect(run.pause_clicked)
    p.step_window.clicked.connect(run.step_window_clicked)
    p.step_token.clicked.connect(run.step_token_clicked)
    p.stop.clicked.connect(run.stop_clicked)
    p.resume.clicked.connect(run.resume_clicked)
    p.open_model.clicked.connect(files.open_model_dialog)
    p.model_combo.activated.connect(lambda _i: load_model())
    p.weights.activated.connect(lambda _i: load_model())  # converts (once) and loads now
    for source, name, button in p.option_buttons():  # Open… of every path option (draft model, receipts, ...)
        button.clicked.connect(lambda _=False, s=source, n=name: sources.open_option_file(s, n))
    p.make_draft.clicked.connect(sources.make_draft_clicked)
    inject = run.inject
    p.fault_cancel.clicked.connect(lambda: inject(Fault("cancel")))
    p.fault_callback.clicked.connect(lambda: inject(Fault("callback_error", token=p.fault_token.value())))
    p.fault_trim.clicked.connect(lambda: inject(Fault("trim_failure")))
    p.fault_drift.clicked.connect(lambda: inject(Fault("position_drift")))
    p.background.valueChanged.connect(lambda n: worker.set_background(n))  # direct: the worker may be busy
    for cb in p.break_boxes.values():
        cb.toggled.connect(lambda _=None: worker.set_break_on(p.break_on()))
