"""What a ``Generation`` asks of the runtime, each a callable the scheduler runs under its lock
(``RuntimeScheduler.execute``): the prefill that predicts the first token, the plain one-token
step, and the check that speculation can run on the runtime's KV cache.

Pure functions of their arguments: the runtime calls named in ``inspector.engine.window``
(``trim``, ``prefill``, ``prefill_predict``, ``decode_rows``, ``row_probabilities``,
``kv_length``, ``rollback``); no state of the generation is read or written here.
"""

from __future__ import annotations

from typing import Callable, Sequence

from inspector.engine.deferred_figures import FigureBatch
from inspector.engine.errors import SpeculationUnsupported
from inspector.engine.probabilities import TOP
from inspector.engine.settings import SamplingSettings


def prefill_call(sid: int, prefix: Sequence[int], first: bool, sampling: SamplingSettings,
                 want_probabilities: bool, kept: int = 0,
                 progress: Callable[[int, int], None] | None = None, constraints=None, top: int = TOP) -> Callable:
    """The prefill of session ``sid`` with ``prefix`` (tokens), from position ``kept``.

    ``kept``: positions ``0 .. kept - 1`` of the session already hold ``prefix[:kept]`` (a slot's
    prompt cache, llama-server's ``cache_prompt``) and stay; everything from ``kept`` on is removed
    and ``prefix[kept:]`` decoded (``0 <= kept < len(prefix)`` when ``first``).
    ``first``: the request's start: the last row's prediction is returned as the first generated
    token (with its row's probabilities when ``want_probabilities``). ``progress(done, total)``: told
    the positions filled (tokens) after each chunk of the runtime's ``n_batch`` rows but the last, and
    at the end; the chunks are the ones the runtime's own ``prefill`` decodes, so the batches (and the
    first token) are the same with or without it. ``constraints``: ``(Constraints or None, position of the
    first generated token)``: given to the session first (``LlamaRuntime.constrain``), knowing its kept
    positions; None leaves the session as it is. ``top``: the tokens the figures keep per row. The callable returns
    ``(kv_length, token or None, probabilities or None)``."""
    prefix = list(prefix)
    if first and not 0 <= kept < len(prefix):
        raise ValueError(f"kept prompt positions must be 0 <= kept < {len(prefix)}, observed {kept}")

    def prefill(rt):
        if constraints is not None and (constraints[0] is not None or hasattr(rt, "constrain")):
            rt.constrain(sid, constraints[0], constraints[1], prefix[:kept])  # None: drops an earlier one
        rt.trim(sid, kept)
        rest, head = prefix[kept:], 0
        if progress is not None and rest:
            step = max(1, int(getattr(rt, "n_batch", 0) or len(rest)))
            head = (len(rest) - 1) // step * step  # every whole chunk before the last row's chunk
            for start in range(0, head, step):
                rt.prefill(sid, rest[start:start + step], kept + start)
                progress(kept + start + step, len(prefix))
        if first:
            token = rt.prefill_predict(sid, rest[head:], kept + head)
            probs = rt.row_probabilities(1, (), (token,), sampling, top=top) if want_probabilities else None
            result = rt.kv_length(sid), token, probs
        else:
            if rest[head:]:
                rt.prefill(sid, rest[head:], kept + head)
            result = rt.kv_length(sid), None, None
        if progress is not None:
            progress(len(prefix), len(prefix))
        return result

    return prefill


def plain_step_call(sid: int, current: int, base: int, cancel, sampling: SamplingSettings,
                    want_probabilities: bool, figures: FigureBatch | None = None, top: int = TOP) -> Callable:
    """One plain decoding step of session ``sid``: decode ``current`` alone at position ``base``.

    The callable returns ``(predicted token, probabilities or None)``, or None when the session's KV
    length is not ``base`` (the caller makes it canonical and asks again). ``cancel``: the request's
    cancellation event (an abort of the decode in flight raises ``DecodeAborted``). With ``figures``
    the row is copied there and the probabilities are its ``DeferredFigures`` (summarised later, in a
    batch: ``inspector.engine.deferred_figures``); without, they are summarised now, keeping ``top`` tokens."""

    def step(rt):
        if rt.kv_length(sid) != base:
            return None
        predictions = rt.decode_rows(sid, (current,), base, cancel)
        if not want_probabilities:
            return predictions[0], None
        if figures is not None:
            return predictions[0], figures.add(rt.last_logits(1)[0], predictions[0])
        return predictions[0], rt.row_probabilities(1, (), predictions, sampling, top=top)

    return step


def check_speculation_supported(scheduler, model_path: str) -> None:
    """Raise ``SpeculationUnsupported`` when the runtime's KV cache cannot remove a partial suffix exactly
    (its ``rollback`` probe says so; a runtime without one is trusted). ``model_path``: for the message."""
    probe = scheduler.execute("probe", -1, lambda rt: getattr(rt, "rollback", None)).value
    if probe is not None and not probe.ok:
        raise SpeculationUnsupported(
            f"speculative decoding needs a KV cache that can drop rejected rows; model "
            f"{model_path}: {probe.detail}. Plain decoding (source none) works.")
