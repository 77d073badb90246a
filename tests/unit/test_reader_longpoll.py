"""`services.reader.longpoll.PullHoldTable`: held pulls by queue and by deadline."""
from __future__ import annotations

from services.reader.longpoll import HeldPull, PullHoldTable, PullRequest


def pull(topic="T", queue_id=0, cursor=5, deadline=10.0, rid=1):
    req = PullRequest("g", topic, queue_id, cursor, 32, None, 1000, False)
    return HeldPull(b"peer", rid, req, cursor, deadline)


def test_take_by_queue_only_what_the_new_max_passes():
    table = PullHoldTable()
    a, b, c = pull(cursor=5, rid=1), pull(cursor=9, rid=2), pull(queue_id=1, cursor=0, rid=3)
    for p in (a, b, c):
        table.hold(p)
    assert len(table) == 3 and table.has(("T", 0)) and sorted(table.queues()) == [("T", 0), ("T", 1)]
    assert table.take(("T", 0), 5) == []
    assert table.take(("T", 0), 6) == [a]
    assert len(table) == 2
    assert table.take(("T", 0)) == [b] and not table.has(("T", 0))
    assert table.take(("X", 0), 100) == []
    assert table.take_all() == [c] and len(table) == 0


def test_deadlines_in_order_and_stale_entries_skipped():
    table = PullHoldTable()
    early, late = pull(deadline=1.0, rid=1), pull(deadline=2.0, rid=2, queue_id=1)
    table.hold(late)
    table.hold(early)
    assert table.next_deadline() == 1.0
    assert table.take(("T", 0)) == [early]                       # woken before its deadline
    assert table.next_deadline() == 2.0
    assert table.take_expired(1.5) == []
    early.deadline = 3.0
    table.hold(early)                                            # held again: a new deadline
    assert table.take_expired(2.5) == [late]
    assert table.take_expired(10.0) == [early]
    assert len(table) == 0 and table.next_deadline() is None
