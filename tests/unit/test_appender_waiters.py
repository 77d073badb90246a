"""services.appender.waiters: parked SYNC_FLUSH replies released by the flushed position or
expired at their deadline, in order; put statistics and their latency buckets."""
from __future__ import annotations

import math

from services.appender.waiters import FlushWaiters, Parked
from services.histogram import BUCKETS_MS, PutStats


def parked(end, deadline):
    return Parked(end, deadline, b"id", {"rid": end}, 0.0)


def test_release_in_order_up_to_flushed():
    w = FlushWaiters()
    for end in (100, 200, 300):
        w.park(parked(end, 10.0))
    assert [p.end for p in w.release(199)] == [100]
    assert [p.end for p in w.release(300)] == [200, 300]
    assert not w and w.next_deadline is None


def test_expire_at_deadline():
    w = FlushWaiters()
    w.park(parked(100, 1.0))
    w.park(parked(200, 2.0))
    assert w.next_deadline == 1.0
    assert w.expire(0.5) == []
    assert [p.end for p in w.expire(1.0)] == [100]
    assert [p.end for p in w.take_all()] == [200]
    assert len(w) == 0


def test_stats_buckets_and_reset():
    s = PutStats()
    assert s.empty()
    s.stored("A", 100, 102400)
    s.stored("A", 1, 10)
    s.stored("B", 2, 4)
    s.replied("PUT_OK", 0.00005)      # 0.05 ms -> 0.1 bucket
    s.replied("PUT_OK", 0.0001)       # exactly 0.1 ms -> 0.1 bucket
    s.replied("PUT_OK", 0.0007)       # -> 1 ms bucket
    s.replied("FLUSH_DISK_TIMEOUT", 5.0)
    out = s.take()
    assert out["puts"] == {"A": 101, "B": 2} and out["bytes"] == {"A": 102410, "B": 4}
    assert out["latency"] == {"PUT_OK": {0.1: 2, 1: 1}, "FLUSH_DISK_TIMEOUT": {math.inf: 1}}
    assert s.empty() and s.take() == {"puts": {}, "bytes": {}, "latency": {}}
    assert BUCKETS_MS[-1] == math.inf and len(BUCKETS_MS) == 14
