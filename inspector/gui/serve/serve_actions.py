"""The window's Serve switch (GUI thread): the loaded model served as a llama-server-compatible endpoint, and
which request every view shows.

On: the engine worker's runtime and ``RuntimeScheduler`` serve (``InspectorServer``, with the tab's slots box:
``-np``, the schedule, ``-kvu``), with the side panel's source, its options and sampling taken as Run takes
them; the window is ``SERVING`` (Run and Step are off, the banner says where it serves). The server's
``on_change`` (its threads) reaches this thread as the queued ``changed`` signal; each request's records are
drained into the ``RequestLog`` on the redraw tick, and the request shown goes to every view with
``set_session`` as a conversation turn does. Starting (binding, uvicorn) and stopping (joining the server's
threads) run on threads of their own: the GUI thread never waits. Off: the running request is cancelled, then
Run works again. Another model or closing the window stops serving first.

While serving, the side panel's fault buttons arm their fault on the slot chosen in its slot box
(``ServeSlots.arm``: it fires in that slot's next request), and the views told of the slots
(``slot_views``: the Lock timing plots) draw each slot's session apart while a served request is shown.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from inspector.engine.settings import requested_draft_max
from inspector.gui.files.receipts_loading import read_session
from inspector.gui.files.session_store import BackgroundJob
from inspector.gui.look.banner_colours import BANNER_DONE, BANNER_ERROR, BANNER_HINT
from inspector.gui.look.wording import count_noun
from inspector.gui.model.window_model import WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.gui.serve.concurrency_lanes import LanesFeed
from inspector.gui.serve.requests_view import RequestsView
from inspector.gui.serve.session_export import SessionExport
from inspector.gui.serve.slot_faults import SlotFaults
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir
from inspector.serve.server import DEFAULT_PORT, InspectorServer, ServeError, ServeOptions, slots_text
from inspector.serve.slots import SCHEDULES
from inspector.session.run_states import IDLE, SERVING

PORT_KEY = "serve/port"
"""Settings key of the port Serve listens on (0: any free port)."""
SLOTS_KEY, SCHEDULE_KEY, KVU_KEY, CACHE_RAM_KEY = ("serve/slots", "serve/schedule", "serve/kv_unified",
                                                   "serve/cache_ram")
"""Settings keys of the slots box: slots (``-np``), the schedule, ``-kvu``, the prompt cache (``-cram``)."""
SERVE_SHORTCUT = "Ctrl+Shift+S"


class ServeActions(QObject):
    """Serve on / off: the switch ``act_serve`` (the Run menu's, the toolbar's and the tab's), the Requests tab
    ``view`` and the ``log`` it shows (the model's ``requests``). It reads the side ``panel`` (source, options,
    sampling, threads); it gets the window's model (``WindowModel``: the engine worker's runtime, the session
    shown, where a picked request goes to every view, the banner, the settings that keep the port and the
    slots box), ``run`` (``RunControl``: ``set_state``, ``chosen_model``; the model's
    ``stateChanged``), ``host`` (``MenuHost``: the redraw tick) and ``turns`` (``ConversationActions``: serving
    leaves the conversation). ``slot_views``: views with ``show_slots(session_slots, n_slots)`` (which slot each
    KV session is, or None when what is shown is no served request). Its ``faults`` (``SlotFaults``) are
    ``run.served_faults``: the fault buttons arm on slots.

    The server (``InspectorServer``, starting and stopping included), where it serves and where each request's
    receipts document goes are the model's (``server``, ``serve_address``, ``serve_receipts_dir``); ``follow``:
    every view follows the newest request."""

    changed = Signal(object)
    """(``ServedRequest``): a request arrived, started or ended (emitted on the server's threads)."""
    started = Signal(str, str)
    """(address, error): the server started ("" error) or could not."""
    stopped = Signal()
    """The server stopped (its threads joined)."""

    def __init__(self, model: WindowModel, view: RequestsView, act_serve, panel, run, host: MenuHost, turns,
                 slot_views=()) -> None:
        super().__init__(host.parent)
        self.model, self.view, self.log, self.act_serve = model, view, model.requests, act_serve
        self.panel, self.engine, self.run = panel, model.worker, run
        self.turns = turns
        self.slot_views = tuple(slot_views)
        settings = model.settings
        self.follow = True
        self.transition = ""
        """``starting`` or ``stopping`` while a thread does it, else ""."""
        self._then: list[Callable[[], object]] = []
        self._thread: threading.Thread | None = None
        self._shown_record = None
        self._loading = None  # a BackgroundJob reading an older request's receipts
        self.last_receipts: ReceiptsDir | None = None
        """The receipts folder of the last server run (what Export session… gathers)."""
        self.export = SessionExport(view, lambda: self.last_receipts, self)
        self._banner = ""
        self._model = ""
        self._options: ServeOptions | None = None
        self._status = ""  # the tab's line while serving (a failed pick says why instead, until the next show)
        self._slot_map = None  # (session_slots, slots) of the last server: which slot ran each served session
        self.faults = SlotFaults(lambda: self.model.server, panel.fault_slot, self.log)
        run.served_faults = self.faults
        try:
            view.port.setValue(int(settings.value(PORT_KEY, DEFAULT_PORT)))
        except (TypeError, ValueError):
            view.port.setValue(DEFAULT_PORT)
        view.port.valueChanged.connect(lambda v: settings.setValue(PORT_KEY, v))
        self._restore_slots(settings)
        act = act_serve
        act.setCheckable(True)
        act.setIconText("Serve")
        view.use_serve_action(act)
        view.requestPicked.connect(self.pick)
        view.exportRequested.connect(self.export.ask)
        view.replayRequested.connect(self.export.replay)
        view.followChanged.connect(self.set_follow)
        self.changed.connect(self.log.note)
        self.started.connect(self._started)
        self.stopped.connect(self._stopped)
        self.model.stateChanged.connect(lambda _s: self._enable())
        host.every_tick(self._tick)
        self._enable()

    def _restore_slots(self, settings) -> None:
        """The slots box as last left (``SLOTS_KEY`` …), remembered as it changes."""
        view = self.view
        try:
            view.slots.setValue(int(settings.value(SLOTS_KEY, 1)))
        except (TypeError, ValueError):
            view.slots.setValue(1)
        schedule = str(settings.value(SCHEDULE_KEY, SCHEDULES[0]))
        if schedule in SCHEDULES:
            view.schedule.setCurrentText(schedule)
        view.kv_unified.setChecked(str(settings.value(KVU_KEY, "false")).lower() in ("true", "1"))
        view.slots.valueChanged.connect(lambda v: settings.setValue(SLOTS_KEY, v))
        view.schedule.currentTextChanged.connect(lambda t: settings.setValue(SCHEDULE_KEY, t))
        view.kv_unified.toggled.connect(lambda on: settings.setValue(KVU_KEY, on))
        view.cache_ram.setChecked(str(settings.value(CACHE_RAM_KEY, "true")).lower() in ("true", "1"))
        view.cache_ram.toggled.connect(lambda on: settings.setValue(CACHE_RAM_KEY, on))

    @property
    def serving(self) -> bool:
        """A server is starting, serving or stopping (the model's ``serving``)."""
        return self.model.serving

    def toggle(self, on: bool) -> None:
        """The Serve switch was pressed (``on``: checked)."""
        if on:
            self.start()
        else:
            self.stop()

    # -- on ------------------------------------------------------------------------------------
    def why_not(self) -> str:
        """Why Serve cannot start now ("" when it can)."""
        if self.model.session.origin != "live":
            return "a receipts file is shown: File > New live session (Ctrl+N) first"
        if self.model.state != IDLE:
            return "wait until the model has loaded" if self.model.state == "loading" else "stop the run first"
        if self.engine.runtime is None or self.engine.scheduler is None:
            return "no model is loaded: pick one in the Model box (it loads), then Serve"
        room = getattr(self.engine.runtime, "n_seq_max", None)
        if room is not None and self.view.slots.value() > room:
            return (f"-np {self.view.slots.value()}: the loaded model's context holds {room} sessions (KV "
                    f"sequences); lower Slots to {room} or less")
        problem = self.panel.source_problem()
        return f"{problem[0]}: {problem[1]}" if problem else ""

    def start(self) -> bool:
        """Serve the loaded model on 127.0.0.1 at the Requests tab's port with the panel's source, options and
        sampling; returns whether it is starting (else the reason is on the tab's line, the switch off)."""
        if self.model.server is not None:
            return True
        why = self.why_not()
        if why:
            self._refused(why)
            return False
        p = self.panel
        settings = p.generation_settings()
        options = ServeOptions(
            port=self.view.port.value(), source=p.source.currentText(), source_options=p.source_options(),
            template=settings, draft_max_auto=requested_draft_max(p.draft_max_choice())[1],
            defaults=ServeDefaults(settings.sampling, p.max_tokens.value(), random_seed=False),
            receipts=ReceiptsDir(receipts_dir) if (receipts_dir := self.model.serve_receipts_dir) is not None else None,
            metrics_endpoint=True,  # the window's server is for looking: /metrics on (llama-server: --metrics)
            **self.view.slot_options())
        runtime = self.engine.runtime
        converted = getattr(runtime, "converted_from", None)
        self._model = Path(str(converted or runtime.model_path)).name + (
            f" in {runtime.info.main_weight_type} form" if converted else "")  # as the model line says it
        try:
            self.model.server = InspectorServer(self.engine.scheduler, str(runtime.model_path), options,
                                                on_change=self.changed.emit, feed=True)
        except (ServeError, ValueError) as exc:
            self._refused(str(exc))
            return False
        self.log.attach(self.model.server.slots.snapshot_rows)
        slots, log = self.model.server.slots, self.log
        self._slot_map = (slots.session_slots, slots.n_parallel)
        self.faults.clear()
        self.view.lanes.attach(lambda: LanesFeed(log.rows, slots.steps, slots.session_slots(), slots.n_parallel,
                                                   slots.n_ctx_slot))
        self._options = options
        if options.n_parallel > 1:
            self.view.show_lanes()  # what several slots do
        self.last_receipts = options.receipts
        self.turns.forget()  # the views show requests from now on
        threads = p.threads.value() or os.cpu_count() or 1
        self._go("starting", lambda s=self.model.server: self._start_server(s, runtime, threads))
        self.run.set_state(SERVING, "starting…")
        self.view.say(f"starting on port {options.port or 'any'} …")
        return True

    def _start_server(self, server: InspectorServer, runtime, threads: int) -> None:
        """(Its own thread.) Set the runtime's threads as Run does, bind, start, wait until uvicorn accepts."""
        try:
            if getattr(runtime, "n_threads", threads) != threads:
                server.slots.scheduler.execute("stats", -1, lambda r: r.set_threads(threads))
            address = server.start()
            server.wait_started()
        except Exception as exc:  # ServeError: one line; anything else: its message
            server.stop()
            self.started.emit("", str(exc) or type(exc).__name__)
            return
        self.started.emit(address, "")

    def _started(self, address: str, error: str) -> None:
        self.transition = ""
        if error:
            self.model.server = None
            self.run.set_state(IDLE, "serve did not start")
            self._refused(error)
            self._run_then()
            return
        self.model.serve_address = address
        self.view.show_address(address)
        o = self._options
        how = ("one slot: requests run one at a time in arrival order" if o.n_parallel == 1 else
               f"{slots_text(o)}: up to {o.n_parallel} requests at once, more wait in arrival order")
        self._status = (f"source {self.panel.source.currentText()} · {how} · receipts: "
                        f"{self.model.serve_receipts_dir or 'none'}")
        self.view.say(self._status)
        self.run.set_state(SERVING, address)  # and the switch (``_enable``)
        self._banner = ""
        if self._then:  # Serve was turned off (or a model chosen) while it started
            self.stop()

    def _refused(self, why: str) -> None:
        self.act_serve.setChecked(False)
        self.view.show_address("")
        self.view.say(f"Serve did not start: {why}", error=True)
        self.model.set_banner(f"<b>Serve did not start:</b> {html.escape(why)}", BANNER_ERROR)
        self._enable()

    # -- off -------------------------------------------------------------------------------------
    def stop(self, then: Callable[[], object] | None = None) -> bool:
        """Stop serving on a thread of its own (the running request is cancelled, the slot's session
        dropped), then call ``then()`` on this thread; with no server, ``then()`` now. Returns True."""
        if then is not None:
            self._then.append(then)
        if self.model.server is None:
            self._run_then()
            return True
        if self.transition == "starting":
            self._then.append(lambda: None)  # ``_started`` stops it
            return True
        if self.transition == "stopping":
            return True
        self._go("stopping", lambda s=self.model.server: (s.stop(), self.stopped.emit()))
        self.run.set_state(SERVING, "stopping…")
        self.view.say("stopping: the running request is cancelled …")
        return True

    def _stopped(self) -> None:
        self.transition = ""
        self.model.server = None
        self.model.serve_address = ""
        self.act_serve.setChecked(False)
        self.view.show_address("")
        n = len(self.log.rows)
        self._status = f"served {count_noun(n, 'request')}; pick one to show it"
        self.view.say(self._status)
        self.run.set_state(IDLE, "serving stopped")
        self.model.set_banner(f"Serving stopped after {count_noun(n, 'request')}. Pick one in the Requests tab to "
                            "show it; <b>Run</b> (Ctrl+R) runs the prompt again.", BANNER_DONE)
        self._run_then()

    def _run_then(self) -> None:
        then, self._then = self._then, []
        for f in then:
            f()

    def _go(self, what: str, work: Callable[[], object]) -> None:
        self.transition = what
        self._thread = threading.Thread(target=work, name=f"spec-inspector serve {what}", daemon=True)
        self._thread.start()
        self._enable()

    def then_load(self, load: Callable[[], bool]) -> bool:
        """Load a model with ``load()``: at once when not serving; while serving, serving stops first (unless
        the panel's choice is the model being served)."""
        if self.model.server is None:
            return load()
        p = self.panel
        try:
            chosen = str(self.run.chosen_model())
            same = self.engine.is_loaded(chosen, p.n_ctx.value(), p.target_weights(), p.offload(),
                                      p.llama_context.values())
        except Exception:  # an unreadable choice: the load says why
            same = False
        if same:
            return False
        return self.stop(then=load)

    def shutdown(self) -> None:
        """The window closes: stop serving and wait for it (blocks; the window waits for its worker too)."""
        server, self.model.server = self.model.server, None
        if self._thread is not None:
            self._thread.join(30)
        if server is not None:
            server.stop()

    # -- which request the views show ------------------------------------------------------------
    def set_follow(self, on: bool) -> None:
        """Follow the newest request (``on``), or hold the one shown."""
        self.follow = on
        self.view.set_follow(on)
        if on:
            self._follow()

    def pick(self, rid: int) -> None:
        """The user picked request ``rid``: show it in every view; picking the newest follows again, an older
        one holds until the next pick. Only while serving or idle (a run shows its own session)."""
        if self.model.state not in (IDLE, SERVING):
            self.view.select_request(self.log.shown)
            return
        newest = self.log.newest_started()
        self.follow = newest is not None and newest.id == rid
        self.view.set_follow(self.follow)
        self.show_request(rid)

    def show_request(self, rid: int) -> None:
        """Show request ``rid`` in every view: the window's record of it, or (an older one) its receipts document
        read on a background thread."""
        row = self.log.row(rid)
        if row is None:
            return
        self.log.shown = rid
        self.view.select_request(rid)
        record = self.log.records.get(rid)
        if record is not None:
            self._show(record)
        elif row.receipts_path:
            job = self._loading = BackgroundJob(lambda: read_session(row.receipts_path), self)
            job.done.connect(lambda result, error, j=job: self._read(j, rid, result, error))
            job.start()
        else:
            self.view.say(f"request {rid} is no longer kept in memory and no receipts were written for it",
                          error=True)

    def _read(self, job, rid: int, result, error: str) -> None:
        if job is not self._loading or self.log.shown != rid or self.model.state not in (IDLE, SERVING):
            return
        session = result[0] if result is not None else None
        if session is None:
            self.view.say(f"request {rid}: {result[1] if result else error}", error=True)
            return
        self._show(session)

    def _show(self, record) -> None:
        self._shown_record = record
        session_slots, n_slots = self._slot_map or (None, 0)
        for v in self.slot_views:
            v.show_slots(session_slots, n_slots)
        self.view.say(self._status)
        self.model.show_session(record)
        self.model.redraw_all()
        self._banner = ""
        self._say_banner()

    def _follow(self) -> None:
        target = self.log.newest_started()
        if target is not None and target.id != self.log.shown and self.model.state in (IDLE, SERVING):
            self.show_request(target.id)

    def _tick(self) -> None:
        """The redraw tick: drain the requests' records, follow the newest, keep the banner current."""
        if self.log.drain() and self.follow and self.model.server is not None:
            self._follow()
        if self.log.shown is not None and self._shown_record is not None \
                and self.model.session is not self._shown_record:  # a run or a file is shown now
            self.log.shown, self._shown_record = None, None
            self.view.select_request(None)
            for v in self.slot_views:
                v.show_slots(None, 0)
        if self.model.server is not None and not self.transition:
            self._say_banner()

    def _say_banner(self) -> None:
        if self.model.server is None or self.transition:
            return
        row = self.log.row(self.log.shown) if self.log.shown is not None else None
        if row is None:
            showing = "No request yet: the <b>Requests</b> tab lists them as they come."
        else:
            state = {"running": "running", "waiting": "waiting"}.get(row.state, row.ended_as or "done")
            showing = f"Showing request <b>{row.id}</b> ({state}){'' if self.follow else ', held'}."
        a = html.escape(self.model.serve_address)
        text = (f"<b>Serving</b> {html.escape(self._model)} at <b>{a}</b>; Run and Step wait until Serve is off "
                f"({SERVE_SHORTCUT}). {showing}")
        if text != self._banner:
            self._banner = text
            self.model.set_banner(text, BANNER_HINT)

    def _enable(self) -> None:
        """The switch works while idle on a live session, and while serving (not mid-start or mid-stop)."""
        act = self.act_serve
        serving = self.model.server is not None
        act.setEnabled((serving and not self.transition) or (not serving and self.model.state == IDLE))
        self.view.port.setEnabled(not serving)
        self.panel.set_serving(self.model.server.slots.n_parallel if serving and self.transition != "stopping" else 0)
        self.view.enable_slots(not serving)
        self.view.export.setEnabled(self.last_receipts is not None)
        self.view.replay.setEnabled(self.last_receipts is not None)
        act.setChecked(serving)
        act.setIconText("● Serving" if serving else "Serve")  # the toolbar and the tab's switch
        address = self.model.serve_address
        act.setToolTip(f"serving at {address}: click to stop ({SERVE_SHORTCUT})" if address else
                       f"serve the loaded model as a llama-server-compatible endpoint ({SERVE_SHORTCUT})")

