"""Can the KV cache remove a partial suffix exactly? (issue 6 "Unusual caches")."""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp
import numpy as np

from inspector.engine.errors import EngineError


@dataclass(frozen=True)
class RollbackProbe:
    """Whether the KV cache can remove a partial suffix exactly (``ok``) and why (``detail``)."""

    ok: bool
    detail: str


def probe_rollback(rt) -> RollbackProbe:
    """Probe partial-suffix removal on a spare session (issue 6 "Unusual caches").

    Recurrent and hybrid models: not possible (their state has no per-position
    cells). Sliding-window models without a full-size window cache
    (``swa_full=False``): ``seq_rm`` reports success even where the window
    cache already reused cells (LLAMA_CPP_NOTES "Gemma 3"), so not exact.
    Otherwise decode two tokens, one row per decode (so the probe runs with
    any ``n_batch``, 1 included: the cache's ability does not depend on the
    batch size), remove the second, check llama.cpp's answer and the KV
    length (1), decode the second again and check that its logits equal the
    first decode's; then drop the session.
    Returns a ``RollbackProbe``; never raises for a capable model.
    """
    arch = rt.architecture
    if llama_cpp.llama_model_is_recurrent(rt.model) or llama_cpp.llama_model_is_hybrid(rt.model):
        return RollbackProbe(False, f"{arch} keeps a recurrent state, not per-position KV cells: "
                                    "rejected proposal rows cannot be removed")
    n_swa = int(llama_cpp.llama_model_n_swa(rt.model))
    if n_swa > 0 and not rt.swa_full:
        return RollbackProbe(False, f"{arch} uses sliding-window attention (window {n_swa}) and the context "
                                    "was made without a full-size window cache (swa_full): removing rows "
                                    "is not exact; reload with swa_full")
    if rt.sessions.free_id() is None:
        return RollbackProbe(True, "not probed: every sequence is in use")
    bos = int(llama_cpp.llama_vocab_bos(rt.vocab))
    first = bos if 0 <= bos < rt.n_vocab else 0
    second = 1 if first != 1 else 2
    sid = rt.open_session(None)  # greedy, no penalties: the logits are llama.cpp's own
    try:
        rt.decode_rows(sid, (first,), 0)
        rt.decode_rows(sid, (second,), 1)
        before = np.array(rt.row_logits(0))
        removed = rt.trim(sid, 1)
        length = rt.kv_length(sid)
        if not removed or length != 1:
            return RollbackProbe(False, f"removing position 1 of 2 failed (llama.cpp answered {removed}, "
                                        f"KV length {length}, expected 1)")
        rt.decode_rows(sid, (second,), 1)
        again = rt.row_logits(0)
        if not np.allclose(before, again, rtol=1e-3, atol=1e-3):
            diff = float(np.max(np.abs(before - again)))
            return RollbackProbe(False, f"after removing a row, decoding it again gave other logits "
                                        f"(max difference {diff:.4f})")
        return RollbackProbe(True, "partial suffix removal is exact")
    except EngineError as exc:
        return RollbackProbe(False, f"the probe failed: {exc}")
    finally:
        rt.drop_session(sid)
