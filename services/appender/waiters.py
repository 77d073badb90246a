"""The appender's table of put replies parked until the flusher reports their records durable
(SYNC_FLUSH group commit) or, the same table again, until a slave acknowledges them
(SYNC_MASTER: services/appender/replica.py), and the latency statistics the write services emit in their
`stats` events for the supervisor's metrics (supervisor/metrics.py).

Records are appended in order and every waiter gets the same timeout, so both the record ends
and the deadlines of the parked replies grow along the queue: releasing (flushed position
reached) and expiring (FLUSH_DISK_TIMEOUT) both pop from the front, O(1) per reply.
"""
from __future__ import annotations

import bisect
import collections
import math
from dataclasses import dataclass

BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, math.inf)
_BOUNDS_S = [b / 1000 for b in BUCKETS_MS[:-1]]
SUM_KEY = "sum_ms"          # a latency map's key for the sum of its observations, in ms


@dataclass(slots=True)
class Parked:
    end: int                 # CommitLog offset just past the request's last record
    deadline: float          # time.monotonic() after which it times out (FLUSH_DISK/SLAVE_TIMEOUT)
    identity: bytes          # the client's ROUTER identity
    fields: dict             # the reply envelope without its status
    received: float          # time.perf_counter() when the request arrived
    parked_at: float = 0.0   # time.monotonic() when it began to wait for a slave (SYNC_MASTER)


class FlushWaiters:
    def __init__(self):
        self._queue: collections.deque[Parked] = collections.deque()

    def __len__(self) -> int:
        return len(self._queue)

    def park(self, parked: Parked) -> None:
        self._queue.append(parked)

    def release(self, flushed: int) -> list[Parked]:
        """Every parked reply whose records end at or below `flushed`."""
        out = []
        q = self._queue
        while q and q[0].end <= flushed:
            out.append(q.popleft())
        return out

    def expire(self, now: float) -> list[Parked]:
        """Every parked reply whose deadline has passed."""
        out = []
        q = self._queue
        while q and q[0].deadline <= now:
            out.append(q.popleft())
        return out

    def take_all(self) -> list[Parked]:
        out = list(self._queue)
        self._queue.clear()
        return out

    @property
    def next_deadline(self) -> float | None:
        return self._queue[0].deadline if self._queue else None


class Histogram:
    """Latency counts in the buckets of BUCKETS_MS since the last `take()`: a bucket counts the
    observations slower than the previous bound and at most as slow as its own (not
    cumulative); its key is its upper bound in ms (inf last), and the key SUM_KEY holds the
    sum of the observations in ms (present whenever a bucket is). The flusher and committer
    emit theirs as `flush_latency` and `commit_latency` in their `stats` events."""

    def __init__(self):
        self.counts = [0] * len(BUCKETS_MS)
        self.total = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_S, seconds)] += 1
        self.total += 1
        self.sum_s += seconds

    def take(self) -> dict:
        out = {b: n for b, n in zip(BUCKETS_MS, self.counts) if n}
        if out:
            out[SUM_KEY] = self.sum_s * 1000.0
        self.counts = [0] * len(BUCKETS_MS)
        self.total = 0
        self.sum_s = 0.0
        return out


class PutStats:
    """Counts since the last `take()`: messages and body bytes stored per topic, and reply
    latency (reply time - receive time, one observation per request) per reply status in the
    buckets of BUCKETS_MS. A bucket counts the requests slower than the previous bound and at
    most as slow as its own (not cumulative); its key is its upper bound in ms (inf last). The
    sum of each status's latencies, in ms, goes in its own field, `latency_sum_ms`."""

    def __init__(self):
        self.puts: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.latency: dict[str, Histogram] = {}

    def stored(self, topic: str, count: int, nbytes: int) -> None:
        self.puts[topic] = self.puts.get(topic, 0) + count
        self.bytes[topic] = self.bytes.get(topic, 0) + nbytes

    def replied(self, status: str, seconds: float) -> None:
        hist = self.latency.get(status)
        if hist is None:
            hist = self.latency[status] = Histogram()
        hist.observe(seconds)

    def empty(self) -> bool:
        return not self.puts and not self.latency

    def take(self) -> dict:
        """The event fields `puts`, `bytes`, `latency` ({status: {bucket_ms: count}}) and, when
        there were replies, `latency_sum_ms` ({status: ms}); and a reset."""
        latency = {status: hist.take() for status, hist in self.latency.items()}
        out = {"puts": self.puts, "bytes": self.bytes, "latency": latency}
        if latency:
            out["latency_sum_ms"] = {status: counts.pop(SUM_KEY, 0.0) for status, counts in latency.items()}
        self.puts, self.bytes, self.latency = {}, {}, {}
        return out
