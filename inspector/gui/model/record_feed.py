"""Where the worker's records go on the GUI thread: ``RecordFeed`` drains the worker's
``RecordStream`` into the session the window shows.

The engine thread pushes a run's immutable records (``inspector.session.run_records``) as it goes;
the window calls ``RecordFeed.feed`` on its redraw tick and first thing in each lifecycle
handler, so every record reaches the shown ``SessionRecord`` in the order it was pushed, and
before the signal that follows it is handled.
"""

from __future__ import annotations

from inspector.session.session_record import SessionRecord
from inspector.session.run_records import RecordStream


class RecordFeed:
    """Applies the records pushed to ``stream`` (the worker's ``records``) to a shown session."""

    def __init__(self, stream: RecordStream) -> None:
        self.stream = stream

    def feed(self, session: SessionRecord) -> int:
        """Apply every record pushed since the last call to ``session`` (``SessionRecord.extend``) when it
        is live; a session read from a file takes none and they are dropped (they belong to no shown run).
        Returns how many records were applied."""
        items = self.stream.drain()
        if items and session.origin == "live":
            session.extend(items)
            return len(items)
        return 0
