"""What the window knows of one server's traffic (GUI thread, no Qt): the requests' rows and, for the newest
ones, a ``SessionRecord`` per request that the window fills from the request's record stream.

The server's threads update each ``ServedRequest`` in place and fill its own ``record`` on the engine thread;
the window never reads that record while the request runs. It drains the request's ``RecordStream``
(``ServedRequest.feed``) into a record of its own on the redraw tick instead (``RequestLog.drain``), the way
``RecordFeed`` drains a run's records: so a running request is shown live in every view, and once it is
done its record is whole. The newest ``KEEP_RECORDS`` requests keep theirs (as the server does); an older
one is read back from its receipts document when shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inspector.engine.stats import decode_tokens_per_s
from inspector.serve.job import ServedRequest
from inspector.serve.slot import KEEP_RECORDS
from inspector.session.session_record import SessionRecord


@dataclass(frozen=True)
class RequestFigures:
    """What a request's row shows now: final figures once it is done, else counted from the window's
    record of it as it runs. Tokens in tokens, ``tokens_per_s`` decode tokens/s (None: not yet)."""

    output_tokens: int
    windows: int
    proposed: int
    accepted: int
    tokens_per_s: float | None
    context_at_windows: tuple
    """(base position, accepted, proposed) of each window."""

    @property
    def acceptance(self) -> float | None:
        """Accepted / proposed tokens, None when nothing was proposed."""
        return self.accepted / self.proposed if self.proposed else None


def figures_of_record(record: SessionRecord) -> RequestFigures:
    """A running request's figures from the window's record of it (its windows' receipts so far)."""
    rs = record.receipts
    return RequestFigures(len(record.tokens), len(rs), sum(len(r.proposal_token_ids) for r in rs),
                          sum(r.accepted_proposal_tokens for r in rs),
                          decode_tokens_per_s(len(record.tokens), record.decode_elapsed_us),
                          tuple((r.base_position, r.accepted_proposal_tokens, len(r.proposal_token_ids)) for r in rs))


def figures_of_row(row: ServedRequest) -> RequestFigures:
    """A finished (or waiting) request's figures from its row."""
    return RequestFigures(row.output_tokens, row.windows, row.proposed, row.accepted, row.tokens_per_s,
                          tuple(row.context_at_windows))


class RequestLog:
    """The traffic of the server the window runs (or ran last): ``rows`` oldest first, ``records`` by request
    id (the window's own, filled from each request's stream), ``version`` raised whenever either changed
    (views redraw when it moves), ``rows_version`` raised when the rows were read again (a request arrived,
    started or ended: what a finished request shows changes only then), ``shown``: the id of the request the
    views show (its record is kept)."""

    def __init__(self) -> None:
        self.rows: list[ServedRequest] = []
        self.records: dict[int, SessionRecord] = {}
        self.version = 0
        self.rows_version = 0
        self.shown: int | None = None
        self._snapshot: Callable[[], list[ServedRequest]] | None = None
        self._feeds: dict = {}  # request id -> (row, RecordStream) still to drain
        self._stale = False
        self._tracked = 0  # the newest request id with a record (or none) so far

    def attach(self, snapshot: Callable[[], list[ServedRequest]]) -> None:
        """Follow a new server's traffic (``ServeSlot.snapshot_rows``): the last server's rows and records go."""
        self._snapshot = snapshot
        self.rows, self.records, self._feeds, self.shown = [], {}, {}, None
        self._tracked = 0
        self._stale = True
        self.version += 1
        self.rows_version += 1

    def note(self, row: ServedRequest) -> None:
        """``row`` arrived, started or ended (the server's ``on_change``, handed to the GUI thread)."""
        self._track(row)
        self._stale = True
        self.version += 1

    def _track(self, row: ServedRequest) -> None:
        """Keep a record of ``row`` filled from its stream, from its first sight on (it may be running or done
        already: its stream holds every record since it arrived)."""
        if row.id > self._tracked:
            self._tracked = row.id
            if row.feed is not None:
                self.records[row.id] = SessionRecord()
                self._feeds[row.id] = (row, row.feed)

    def drain(self) -> bool:
        """Apply every record the requests pushed since the last call to the window's records of them (GUI
        thread: the redraw tick); a request that is done and drained needs its stream no more. Returns
        whether anything changed (then ``version`` moved)."""
        changed = False
        for rid, (row, feed) in list(self._feeds.items()):
            done = row.state == "done"  # read before draining: its last records were pushed before
            items = feed.drain()
            if items:
                self.records[rid].extend(items)
                changed = True
            if done:
                del self._feeds[rid]
        if self._stale and self._snapshot is not None:
            self.rows = self._snapshot()
            for r in self.rows[-KEEP_RECORDS:]:  # the snapshot may hold a request whose arrival is still on its way
                self._track(r)
            self.rows_version += 1
            self._stale = False
            self._evict()
            changed = True
        if changed:
            self.version += 1
        return changed

    def _evict(self) -> None:
        """Keep the records of the newest ``KEEP_RECORDS`` requests and of the one shown."""
        keep = {r.id for r in self.rows[-KEEP_RECORDS:]} | {self.shown}
        for rid in [k for k in self.records if k not in keep]:
            del self.records[rid]
            self._feeds.pop(rid, None)

    def row(self, rid: int) -> ServedRequest | None:
        """The row of request ``rid``, or None."""
        return next((r for r in reversed(self.rows) if r.id == rid), None)

    def figures(self, row: ServedRequest) -> RequestFigures:
        """What ``row`` shows now: counted from the window's record while it runs, its own figures after."""
        record = self.records.get(row.id)
        if row.state == "running" and record is not None:
            return figures_of_record(record)
        return figures_of_row(row)

    def newest_started(self) -> ServedRequest | None:
        """The newest request that is running or done (the one the views follow), or None."""
        return next((r for r in reversed(self.rows) if r.state != "waiting"), None)
