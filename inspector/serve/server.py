"""One running ``spec-inspector serve``: the slot, the metrics, the routes and uvicorn on a thread.

``InspectorServer.start`` binds the socket first (so "address in use" is a one-line error before
anything runs), then serves it with uvicorn on a thread of its own; ``stop`` ends uvicorn, cancels the
running request and drops the slot's KV session. The command line and the window's Serve switch both
use it; the engine is the slot's thread, never the event loop nor the GUI thread.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from dataclasses import dataclass, field

import uvicorn

from inspector.engine import GenerationSettings
from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB
from inspector.serve.app import MAX_BODY_BYTES, ServeState, build_app
from inspector.serve.http_policy import CorsPolicy
from inspector.serve.http_guard import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, guarded_protocol, limit_requests
from inspector.serve.metrics import ServeMetrics
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir, ReceiptsDirError
from inspector.serve.slots import BATCHED, DEFAULT_MAX_QUEUE, RequestTemplate, ServeSlots, SlotOptions

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8080
"""llama-server's default port."""
SHUTDOWN_GRACE_S = 5.0
"""Seconds ``stop`` lets open responses end (the running request is cancelled first, so its stream ends
within one window) before uvicorn cancels what is left."""


class ServeError(RuntimeError):
    """The server cannot start (one line: the address in use, a host that is not this machine's)."""


@dataclass
class ServeOptions:
    """How to serve: the address (``host`` other than loopback needs ``expose``), the proposal source and
    its options, the server's ``GenerationSettings`` template, request defaults, the queue, the key,
    the receipts folder (None: keep none), the seconds a request's headers and body may take to arrive
    (``inspector.serve.http_guard``), CORS, and whether ``/metrics`` and ``/slots`` answer
    (llama-server's ``--metrics``, off by default, and ``--slots``, on)."""

    host: str = LOOPBACK
    port: int = DEFAULT_PORT
    expose: bool = False
    source: str = "ngram"
    source_options: dict = field(default_factory=dict)
    template: GenerationSettings = field(default_factory=GenerationSettings)
    draft_max_auto: bool = False
    defaults: ServeDefaults = field(default_factory=ServeDefaults)
    max_queue: int = DEFAULT_MAX_QUEUE
    api_key: str | None = None
    aliases: tuple = ()
    receipts: ReceiptsDir | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    cors: CorsPolicy = field(default_factory=CorsPolicy)
    metrics_endpoint: bool = False
    slots_endpoint: bool = True
    n_parallel: int = 1
    """Slots (llama-server's ``-np``)."""
    schedule: str = BATCHED
    """How several slots share the runtime: ``batched`` or ``locked`` (``inspector.serve.slots``)."""
    kv_unified: bool = False
    """Every slot may use the whole context (llama-server's ``-kvu``); else ``n_ctx / n_parallel`` each."""
    spec_max_active: int | None = None
    """Drafts off while more than this many slots generate (``inspector.serve.spec_gate``); None: always on."""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    """llama-server's prompt cache in host memory (``--cache-ram`` MiB; -1: no limit; 0: none)."""
    cache_idle_slots: bool = True
    """Save idle slots to the prompt cache when a request starts (``--cache-idle-slots``)."""

    def request_template(self) -> RequestTemplate:
        """What every request runs with: the source, its options, the template, draft max auto."""
        return RequestTemplate(self.source, self.source_options, self.template, self.draft_max_auto)

    def slot_options(self) -> SlotOptions:
        """How the slots and the queue run (``SlotOptions``: ``-np``, ``--schedule``, ``-kvu``, ...)."""
        return SlotOptions(n_parallel=self.n_parallel, schedule=self.schedule, kv_unified=self.kv_unified,
                           spec_max_active=self.spec_max_active, cache_ram_mib=self.cache_ram_mib,
                           cache_idle_slots=self.cache_idle_slots, max_queue=self.max_queue)


def slots_text(options: ServeOptions) -> str:
    """How the slots run, in a few words (the start line): "one slot", "4 slots, batched, 512 positions each"."""
    if options.n_parallel == 1:
        return "one slot"
    gate = f", drafts off above {options.spec_max_active} generating" if options.spec_max_active is not None else ""
    return (f"{options.n_parallel} slots, {options.schedule}" + ("" if options.kv_unified else ", n_ctx split per slot")
            + gate)


def check_host(host: str, expose: bool) -> str:
    """``host`` when it may be served on: loopback always, another address only with ``expose`` (the
    endpoint is then open to that network). Raises ``ServeError``."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ServeError(f"--host {host!r} is not an IP address (give 127.0.0.1, 0.0.0.0 or an address of this "
                         "machine)") from None
    if not addr.is_loopback and not expose:
        raise ServeError(f"--host {host} would open the endpoint to that network: add --expose to mean it "
                         "(and --api-key KEY to ask clients for a key)")
    return host


class InspectorServer:
    """A llama-server-compatible endpoint on ``scheduler``'s runtime. ``model_name``: what ``/v1/models``
    and replies name (llama-server: the model path or ``--alias``). ``on_change(row)``: each request's
    arrival, start and end (``ServeSlot``); ``feed``: give each request a record stream (the window)."""

    def __init__(self, scheduler, model_name: str, options: ServeOptions, *, on_change=None,
                 feed: bool = False) -> None:
        self.options = options
        self.slots = ServeSlots(scheduler, options.request_template(), options.slot_options(),
                                receipts=options.receipts, on_change=on_change, feed=feed)
        self.metrics = ServeMetrics(options.template.draft_max, self._queue_counts, self.slots.steps)
        self.slots.metrics = self.metrics
        self.state = ServeState(self.slots, self.metrics, model_name, tuple(options.aliases), options.defaults,
                                options.api_key, options.max_body_bytes, cors=options.cors,
                                metrics_endpoint=options.metrics_endpoint, slots_endpoint=options.slots_endpoint)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.address = ""
        """``http://HOST:PORT`` once started."""

    def _queue_counts(self) -> tuple[int, int]:
        return self.slots.processing, self.slots.waiting

    def start(self) -> str:
        """Bind, start the slot and uvicorn; returns the address clients use (``http://HOST:PORT``).
        Raises ``ServeError`` for a refused host, a receipts folder that cannot be written or a port that
        cannot be bound."""
        o = self.options
        host = check_host(o.host, o.expose)
        if o.receipts is not None:
            try:
                o.receipts.check()
            except ReceiptsDirError as exc:
                raise ServeError(str(exc)) from None
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, o.port))
        except OSError as exc:
            sock.close()
            raise ServeError(f"cannot listen on {host}:{o.port}: {exc.strerror or exc}") from None
        sock.listen(128)
        sock.set_inheritable(True)
        self._socket = sock
        port = sock.getsockname()[1]
        shown = host if ":" not in host else f"[{host}]"
        self.address = f"http://{shown}:{port}"
        # uvicorn's limit_concurrency counts open connections (slow or idle ones too): off; requests are
        # limited instead, and each request's headers and body have a deadline (http_guard)
        app = build_app(self.state, inner=lambda routes: limit_requests(routes, o.max_queue + 64))  # CORS outside
        config = uvicorn.Config(app, log_level="warning", access_log=False, limit_concurrency=None,
                                timeout_keep_alive=30, timeout_graceful_shutdown=SHUTDOWN_GRACE_S, lifespan="off",
                                http=guarded_protocol(o.header_timeout_s, o.body_timeout_s))
        self._server = uvicorn.Server(config)
        self.slots.start()
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="spec-inspector serve http", daemon=True)
        self._thread.start()
        return self.address

    @property
    def running(self) -> bool:
        """uvicorn is serving."""
        return self._thread is not None and self._thread.is_alive()

    def wait_started(self, timeout_s: float = 10.0) -> bool:
        """Wait until uvicorn accepts connections (True) or ``timeout_s`` passed."""
        ev = threading.Event()
        for _ in range(int(timeout_s / 0.02)):
            if self._server is not None and self._server.started:
                return True
            ev.wait(0.02)
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving: the waiting and running requests are cancelled as stopped (their clients are told
        "the server is stopping", llama-server's 503 ``unavailable_error``; their records say "the server
        stopped"), uvicorn ends (open streams close), the slot's session is dropped. Idempotent."""
        self.slots.begin_stop()
        if self._server is not None:
            self._server.should_exit = True
        self.slots.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
