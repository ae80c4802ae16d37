"""The worker's records reach the shown session through ``RecordFeed`` (the window model's package): a live
session takes them in order, a session read from a file takes none. No model, no Qt window."""

from __future__ import annotations

from inspector.gui.model.record_feed import RecordFeed
from inspector.session.run_records import RecordStream, TokenTexts
from inspector.session.session_record import SessionRecord


def test_a_live_session_takes_every_record_pushed_since_the_last_feed_in_order():
    stream = RecordStream()
    feed = RecordFeed(stream)
    shown = SessionRecord()
    stream.push(TokenTexts({5: "a"}))
    stream.push(TokenTexts({5: "b", 6: "c"}))
    assert feed.feed(shown) == 2
    assert shown.texts == {5: "b", 6: "c"}  # the later record wins: applied in the order pushed
    assert feed.feed(shown) == 0


def test_a_session_read_from_a_file_takes_none_and_the_records_are_dropped():
    stream = RecordStream()
    feed = RecordFeed(stream)
    saved = SessionRecord()
    saved.origin = "document"
    stream.push(TokenTexts({7: "x"}))
    assert feed.feed(saved) == 0
    assert saved.texts == {}
    live = SessionRecord()
    assert feed.feed(live) == 0 and live.texts == {}  # they belonged to no shown run
