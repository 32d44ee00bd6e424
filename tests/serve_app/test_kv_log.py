"""The board's record of a replica's prefix cache: each reader gets what changed since its cursor, or all of it."""

from __future__ import annotations

from engines.kv_blocks import KvEvents
from serve_app.kv_log import KEPT_CHANGES, KvLog


def test_a_reader_gets_the_changes_since_its_cursor_then_nothing():
    log = KvLog()
    log.add(KvEvents(stored={1, 2}, cleared=True))
    log.add(KvEvents(stored={3}, removed={1}))
    seq, first = log.since(0)
    assert seq == 2 and first.cleared
    blocks: set[int] = set()
    first.apply_to(blocks)
    assert blocks == {2, 3}
    assert log.since(seq) is None
    log.add(KvEvents(removed={2}))
    seq, later = log.since(seq)
    later.apply_to(blocks)
    assert blocks == {3} == log.blocks


def test_a_reader_too_far_behind_gets_the_whole_set():
    log = KvLog()
    for block in range(KEPT_CHANGES + 5):
        log.add(KvEvents(stored={block}))
    seq, everything = log.since(1)
    assert everything.cleared and everything.stored == set(range(KEPT_CHANGES + 5))
    assert seq == KEPT_CHANGES + 5
    # A cursor from a board that restarted (ahead of this log) resynchronises too.
    assert log.since(seq + 10)[1].cleared


def test_empty_batches_are_not_numbered():
    log = KvLog()
    log.add(KvEvents())
    assert log.seq == 0 and log.since(0) is None
