"""``serve -np 2`` with the batched schedule on a freshly loaded model (its KV rollback not probed yet): the first
requests with a proposal source end. The probe decodes on a spare session; asked from a slot whose own session
already waits in the step, it used to wait forever (the window's Serve hit it on its first request)."""

from __future__ import annotations

import threading

import httpx

from inspector.engine import RuntimeScheduler
from inspector.serve.server import InspectorServer
from serve_helpers import serve_options, wait_done


def test_the_first_requests_of_a_fresh_runtime_end_with_two_batched_slots(model_path, tmp_path):
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(model_path, n_ctx=512, n_batch=64, n_seq_max=4)  # as the window loads it: a spare sequence
    server = InspectorServer(RuntimeScheduler(rt), str(model_path),
                             serve_options(tmp_path, n_parallel=2, schedule="batched", receipts=None))
    try:
        server.start()
        assert server.wait_started()
        codes: list = []

        def ask(text: str) -> None:
            r = httpx.post(server.address + "/completion", json={"prompt": text, "n_predict": 8, "temperature": 0},
                           timeout=20)
            codes.append(r.status_code)

        threads = [threading.Thread(target=ask, args=(t,), daemon=True) for t in ("One two three", "Red green")]
        for t in threads:
            t.start()
        rows = wait_done(server, 2, timeout_s=20)
        assert [r.ended_as for r in rows] != ["error", "error"] and all(r.error == "" for r in rows), rows
        for t in threads:
            t.join(5)
        assert codes == [200, 200]
    finally:
        server.stop()
        rt.close()
