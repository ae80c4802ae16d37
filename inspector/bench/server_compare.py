"""Compare with llama-server: each configuration's prompt through a real llama-server (issue 23).

Our users tune ``llama-server``; the inspector's figures transfer to their server only if the two
programs do the same work. For every row of a comparison (``inspector.bench.compare``) this sends
the same prompt token ids, greedy, to a llama-server started with that configuration's flags
(``inspector.sources.server_flags.server_arguments``), and sets beside our figures its
``timings.predicted_per_second``, ``draft_n`` / ``draft_n_accepted`` and ``/metrics``' accepted
tokens per draft position, with "same output as ours" or the first generated token where the two
differ and our target's top-2 logit margin there.

Target: a llama-server binary (started on 127.0.0.1 on a free port per configuration with the
same thread count and context size as ours, stopped afterwards; a fresh process per row, so state
such as ngram-mod's pool starts empty on both sides), or the URL of a running server, used as it
is: its flags cannot be checked, so one request is sent and every row is compared with it.

Request fields, response fields and metric names: llama.cpp 0c1e570 ``tools/server``
(``server-task.cpp`` params and timings, ``server-context.cpp`` metrics).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from inspector.bench.compare import TurnsRun
from inspector.sources.registry import PLAIN
from inspector.bench.compare_result import CompareResult, CompareRow
from inspector.bench.server_build import NotALlamaServer, server_version
from inspector.llama.server_parity import LLAMA_CPP_COMMIT
from inspector.bench.server_process import LlamaServerProcess, ServerDeadlines, penalty_fields
from inspector.bench.server_http import REQUEST_DEADLINE_S, ServerError, ServerRequestError
from inspector.bench.server_client import LlamaServerClient, ServerCompletion, ServerMetrics
from inspector.engine.baseline import first_difference, top2_after
from inspector.engine.errors import RequestCancelled
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.stats import server_tokens_per_s
from inspector.sources.server_flags import NoServerEquivalent, server_arguments, server_notes
from inspector.llama.server_parity import ours_accepted_per_position, server_counted_accepted


@dataclass(frozen=True)
class ServerRow:
    """llama-server's figures for one configuration, beside ours.

    ``label``: the configuration's label. ``flags``: the llama-server arguments it ran with (empty
    for a URL: not checked). ``tokens_per_s``: llama-server's ``predicted_per_second`` (generated
    tokens but the first / time after the first token; ours the same: ``server_tokens_per_s``). ``drafted`` /
    ``accepted``: its ``draft_n`` / ``draft_n_accepted`` (tokens). ``accepted_per_position``:
    accepted draft tokens per draft position 0.. from ``/metrics``. ``ours_*``: the same figures of
    our run. ``same_output``: the generated token ids are equal; else ``first_difference`` (0-based
    generated index) and ``margin``: our target's top-2 logit margin there (a near-tie is < 1).
    ``note``: what differs unavoidably, in one line ("" when nothing). ``error``: one line when the
    server could not run this configuration (the other figures are then None).
    """

    label: str
    flags: tuple[str, ...] = ()
    tokens_per_s: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    accepted_per_position: tuple[int, ...] | None = ()
    generated_tokens: tuple[int, ...] = ()
    ours_tokens_per_s: float | None = None
    ours_drafted: int = 0
    ours_accepted: int = 0
    ours_accepted_per_position: tuple[int, ...] = ()
    same_output: bool | None = None
    first_difference: int | None = None
    margin: float | None = None
    note: str = ""
    error: str | None = None

    @property
    def same_windows(self) -> bool | None:
        """Drafted, accepted and accepted-per-position all equal ours (None when the server did not run;
        per position only where the server's ``/metrics`` answered: ``accepted_per_position`` not None)."""
        if self.drafted is None:
            return None
        if (self.drafted, self.accepted) != (self.ours_drafted, self.ours_accepted):
            return False
        return (self.accepted_per_position is None
                or _trim(self.accepted_per_position) == _trim(self.ours_accepted_per_position))

    def describe_output(self) -> str:
        """"same" or where the outputs part, in words."""
        if self.same_output is None:
            return "n/a"
        if self.same_output:
            return "same"
        where = f"differs at token {self.first_difference}"
        return where + (f" (margin {self.margin:.3f})" if self.margin is not None else "")

    def to_json(self) -> dict:
        return {
            "label": self.label, "flags": list(self.flags), "tokens_per_s": self.tokens_per_s,
            "drafted": self.drafted, "accepted": self.accepted,
            "accepted_per_position": None if self.accepted_per_position is None else list(self.accepted_per_position),
            "generated_token_ids": list(self.generated_tokens),
            "ours": {"tokens_per_s": self.ours_tokens_per_s, "drafted": self.ours_drafted,
                     "accepted": self.ours_accepted, "accepted_per_position": list(self.ours_accepted_per_position)},
            "same_output": self.same_output, "same_windows": self.same_windows,
            "first_difference": self.first_difference, "margin": self.margin, "note": self.note,
            "error": self.error,
        }


def _trim(counts: Sequence[int]) -> tuple[int, ...]:
    """Counts without trailing zeros (a position nobody reached is the same as one not listed)."""
    out = list(counts)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def is_url(target: str) -> bool:
    """Whether ``--llama-server`` names a running server rather than a binary: ``SCHEME://...``, or
    ``[USER@]HOST:PORT`` that is not a file here (http is meant; a user is refused by the client)."""
    if "://" in target:
        return True
    return re.fullmatch(r"(?:[^@/\s]+@)?[\w.\-\[\]:]+:\d+", target) is not None and not Path(target).exists()


def version_note(binary: str | Path) -> str:
    """"" when ``binary`` reports llama.cpp ``LLAMA_CPP_COMMIT``, else one line saying which commit
    it was built from. Raises ``NotALlamaServer`` for a file that is not a llama-server."""
    v = server_version(binary)
    if v.commit.startswith(LLAMA_CPP_COMMIT) or LLAMA_CPP_COMMIT.startswith(v.commit or "-"):
        return ""
    return (f"this llama-server was built from llama.cpp {v.commit or 'an unknown commit'}, ours runs "
            f"{LLAMA_CPP_COMMIT}: outputs may part where the kernels differ")


def check_llama_server(target: str, timeout_s: float = REQUEST_DEADLINE_S) -> None:
    """Raise, with one line, when ``target`` cannot serve a comparison: ``NotALlamaServer`` for a path
    that is not a llama-server binary, ``ServerError`` for a URL that is malformed, does not answer or
    is not a llama-server. Nothing is started (``--llama-server``'s check before our runs).
    ``timeout_s``: the requests' deadline (``LlamaServerClient``)."""
    if is_url(target):
        LlamaServerClient(target, timeout_s=timeout_s).check_reachable()
    else:
        server_version(target)


def _row_flags(row: CompareRow) -> tuple[list[str], str]:
    """(llama-server arguments, unavoidable differences in one line) of our row's configuration.
    Raises ``NoServerEquivalent`` for a source llama-server does not have."""
    c = row.config
    if c.source == PLAIN:
        return [], ""
    args = server_arguments(c.source, c.options, draft_max=c.draft_max)
    return args, "; ".join(server_notes(c.source, c.options, draft_max=c.draft_max))


def _ours(row: CompareRow, run, is_eog: Callable[[int], bool]) -> dict:
    """Our row's figures in llama-server's units (its accepted count: ``server_counted_accepted``)."""
    receipts = list(getattr(run, "receipts", ()) or ())
    return {
        "ours_tokens_per_s": server_tokens_per_s(row.summary.generated_tokens, row.summary.decode_elapsed_us),
        "ours_drafted": sum(r.proposal_token_count for r in receipts),
        "ours_accepted": sum(server_counted_accepted(r, is_eog) for r in receipts),
        "ours_accepted_per_position": ours_accepted_per_position(receipts, is_eog),
    }


def _server_figures(done: ServerCompletion, metrics: ServerMetrics | None, before: ServerMetrics | None) -> dict:
    """llama-server's figures of one completion; ``metrics`` None (a server started without ``--metrics``):
    no per-position counts (``accepted_per_position`` None)."""
    per_position: tuple[int, ...] | None = None
    if metrics is not None:
        last = max(metrics.accepted_per_position, default=-1)
        per_position = tuple(
            metrics.accepted_per_position.get(i, 0) - (before.accepted_per_position.get(i, 0) if before else 0)
            for i in range(last + 1))
    return {"tokens_per_s": done.predicted_per_second, "drafted": done.draft_n,
            "accepted": done.draft_n_accepted, "accepted_per_position": per_position,
            "generated_tokens": tuple(done.tokens)}


def _compared(scheduler: RuntimeScheduler | None, prompt: Sequence[int], ours: Sequence[int],
              theirs: Sequence[int], sampling=None) -> dict:
    i = first_difference(list(ours), list(theirs))
    if i is None:
        return {"same_output": True}
    margin = None
    if scheduler is not None:
        _top, _second, margin = top2_after(scheduler, list(prompt) + list(ours[:i]), len(prompt), sampling)
    return {"same_output": False, "first_difference": i, "margin": margin}


def compare_with_llama_server(
    target: str,
    result: CompareResult,
    *,
    model: str | Path,
    prompt_tokens: Sequence[int],
    n_predict: int,
    threads: int,
    n_ctx: int,
    scheduler: RuntimeScheduler | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    context=None,
    request_timeout_s: float = REQUEST_DEADLINE_S,
) -> tuple[ServerRow, ...]:
    """llama-server's row for each row of ``result`` (same order).

    ``target``: a llama-server binary (one process per configuration, ``threads`` threads, context
    ``n_ctx`` positions, model ``model``) or a running server's URL (one request for all rows).
    ``prompt_tokens``: the prompt's token ids, as our rows ran it; ``n_predict``: tokens at most.
    ``scheduler``: our runtime, for the top-2 margin where outputs part and the end-of-generation
    test of llama-server's accepted count (None: no margin, and no token counts as end-of-generation).
    ``progress(done, total, label)`` before each configuration. ``cancel``: when set, raises
    ``RequestCancelled`` between configurations. ``context``: our runtime's context settings
    (``inspector.llama.server_parity.server_context``), given to each llama-server started; None: its defaults.
    ``request_timeout_s``: each request's deadline, from connecting to the reply's last byte.

    Never raises for a bad target: a file that is not a llama-server, a server that does not start
    or does not answer gives each affected row ``error`` (one line), and the other rows still run.
    Rows of a conversation comparison, rows whose own run failed and sources llama-server lacks get
    a ``note`` instead of a run.
    """
    rows = result.rows
    is_eog = scheduler.runtime.is_eog if scheduler is not None else (lambda _t: False)
    runs = result.runs or (None,) * len(rows)  # run_compare(keep_runs=True) keeps them: receipts per row
    skipped = {i: _not_compared(row, run, is_eog) for i, (row, run) in enumerate(zip(rows, runs))}
    url = is_url(target)
    fields = penalty_fields(result.settings.sampling)
    head_note, shared, failed = "", None, None
    try:
        if url:
            client = LlamaServerClient(target, timeout_s=request_timeout_s)
            client.check_reachable()
            before = _metrics_or_none(client)
            done = client.complete(prompt_tokens, n_predict, fields)
            shared = _server_figures(done, None if before is None else client.metrics(), before)
            head_note = f"a running server at {target}: its flags cannot be checked" + (
                "" if before is not None else "; it has no /metrics (start it with --metrics): per-position "
                                              "counts not compared")
        else:
            head_note = version_note(target)
    except (ServerError, NotALlamaServer) as exc:
        failed = str(exc)
    out = []
    for i, (row, run) in enumerate(zip(rows, runs)):
        if cancel is not None and cancel.is_set():
            raise RequestCancelled()
        label = row.config.label
        if skipped[i] is not None or failed is not None:
            out.append(skipped[i] or ServerRow(label, error=failed, **_ours(row, run, is_eog)))
            continue
        if progress is not None:
            progress(i, len(rows), label)
        flags, note = _row_flags(row)
        ours = _ours(row, run, is_eog)
        recounted = ours["ours_accepted"] != row.summary.accepted_tokens
        note = "; ".join(n for n in (head_note, note, RECOUNTED if recounted else "") if n)
        try:
            if url:
                figures = dict(shared)
                flags = []
            else:
                with LlamaServerProcess(target, Path(model), args=flags, threads=threads, n_ctx=n_ctx, context=context,
                                        deadlines=ServerDeadlines(request_s=request_timeout_s)) as server:
                    done = server.client.complete(prompt_tokens, n_predict, fields)
                    figures = _server_figures(done, server.client.metrics(), None)
        except ServerError as exc:
            out.append(ServerRow(label, tuple(flags), note=note, error=str(exc), **ours))
            continue
        compared = _compared(scheduler, prompt_tokens, row.generated_tokens, figures["generated_tokens"],
                             result.settings.sampling)
        out.append(ServerRow(label, tuple(flags), note=note, **figures, **ours, **compared))
    return tuple(out)


RECOUNTED = ("accepted counted as llama-server counts them: a matched end-of-generation token inside a draft "
             "is the target's own there (our receipts count it accepted)")
"""The note of a row whose accepted count ``server_counted_accepted`` changed."""


def _metrics_or_none(client: LlamaServerClient) -> ServerMetrics | None:
    """The server's ``/metrics``, or None when it was started without ``--metrics`` (HTTP 501)."""
    try:
        return client.metrics()
    except ServerRequestError:
        return None


def _not_compared(row: CompareRow, run, is_eog) -> ServerRow | None:
    """The row llama-server is not asked for, with the reason as its note (a conversation, a run of ours
    that failed, a source llama-server lacks), else None."""
    label = row.config.label
    if isinstance(run, TurnsRun):
        return ServerRow(label, note="not compared: llama-server is compared on a prompt, not a conversation",
                         **_ours(row, run, is_eog))
    if row.error is not None and not row.generated_tokens:
        return ServerRow(label, note="not compared: our run of this configuration failed")
    try:
        _row_flags(row)
    except NoServerEquivalent:
        return ServerRow(label, note=f"llama-server has no {row.config.source} source", **_ours(row, run, is_eog))
    return None


def format_server_rows(rows: Sequence[ServerRow]) -> str:
    """The llama-server comparison as a text table: per configuration our tokens/s and the server's,
    drafted and accepted on both sides, and whether the outputs are the same; notes and errors on
    their own lines."""
    w = max([13, *(len(r.label) for r in rows)])
    head = (f"{'configuration':{w}s} {'ours tok/s':>10s} {'server':>7s} {'drafted':>13s} {'accepted':>13s} "
            f"{'windows':>7s}  output")
    lines = ["llama-server (same prompt tokens, greedy):", head]
    for r in rows:
        if r.drafted is None:
            lines.append(f"{r.label:{w}s} " + (f"error: {r.error}" if r.error else r.note))
            if r.error and r.note:
                lines.append(f"{'':{w}s} note: {r.note}")
            continue
        ours = f"{r.ours_tokens_per_s:.1f}" if r.ours_tokens_per_s else "n/a"
        theirs = f"{r.tokens_per_s:.1f}" if r.tokens_per_s else "n/a"
        drafted = f"{r.ours_drafted}/{r.drafted}"
        accepted = f"{r.ours_accepted}/{r.accepted}"
        same = "same" if r.same_windows else "differ"
        lines.append(f"{r.label:{w}s} {ours:>10s} {theirs:>7s} {drafted:>13s} {accepted:>13s} {same:>7s}  "
                     f"{r.describe_output()}")
        if r.note:
            lines.append(f"{'':{w}s} note: {r.note}")
    lines.append("drafted, accepted: ours/llama-server's (tokens); windows: the two agree on drafted, accepted "
                 "and accepted per draft position")
    return "\n".join(lines)
