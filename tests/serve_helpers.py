"""What the serve tests share: a server's options on the shared runtime, and waiting for its requests."""

from __future__ import annotations

import time

from inspector.engine import GenerationSettings
from inspector.engine.settings import SamplingSettings
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir
from inspector.serve.server import ServeOptions


def serve_options(tmp_path, **kw) -> ServeOptions:
    """A test server's options: ngram-simple (3, 16), draft max 16, llama-server's sampling defaults, receipts
    in ``tmp_path/served``, ``/metrics`` on, any free port; ``kw`` overrides."""
    kw.setdefault("source", "ngram-simple")
    kw.setdefault("source_options", {"size_n": 3, "size_m": 16})
    kw.setdefault("template", GenerationSettings(draft_max=16))
    kw.setdefault("defaults", ServeDefaults(SamplingSettings(temperature=0.8)))
    kw.setdefault("receipts", ReceiptsDir(tmp_path / "served"))
    kw.setdefault("metrics_endpoint", True)
    return ServeOptions(port=0, **kw)


def wait_done(server, n: int, timeout_s: float = 60) -> list:
    """The server's traffic rows once its first ``n`` requests are done; ``AssertionError`` after ``timeout_s``."""
    t = time.monotonic() + timeout_s
    while time.monotonic() < t:
        rows = server.slot.snapshot_rows()
        if len(rows) >= n and all(r.state == "done" for r in rows[:n]):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"requests not done after {timeout_s} s: {[(r.id, r.state) for r in server.slot.snapshot_rows()]}")
