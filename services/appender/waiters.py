"""The appender's table of put replies parked until the flusher reports their records durable
(SYNC_FLUSH group commit) or, the same table again, until a slave acknowledges them
(SYNC_MASTER: services/appender/replica.py).

Records are appended in order and every waiter gets the same timeout, so both the record ends
and the deadlines of the parked replies grow along the queue: releasing (flushed position
reached) and expiring (FLUSH_DISK_TIMEOUT) both pop from the front, O(1) per reply.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass


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
