"""Long polling in the reader (RocketMQ's PullRequestHoldService): pulls that found nothing
wait here, per queue, until an arrival for their queue or their deadline.

A held pull keeps its request and a `cursor`: the queue offset to read from when it is run
again (the requested offset, or past entries it already scanned without a tag match). The
reader takes the pulls of a queue whose max offset moved past their cursor, runs them again,
answers those that found something and parks the others again; `take_expired` hands out
those whose deadline passed, to be answered with what is there then.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass


@dataclass(slots=True)
class PullRequest:
    """A validated `pull` (docs/PROTOCOL.md)."""
    group: str
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    tag_filter: str | None
    poll_ms: int
    raw: bool
    repeat: int = 1                  # pulls one reply may hold (docs/PROTOCOL.md, `repeat`)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.queue_id


@dataclass(slots=True)
class HeldPull:
    peer: bytes
    rid: int
    request: PullRequest
    cursor: int
    deadline: float                  # time.monotonic() seconds
    seq: int = 0                     # matches the live heap entry; stale entries are skipped
    held: bool = False


class PullHoldTable:
    def __init__(self):
        self._by_queue: dict[tuple[str, int], list[HeldPull]] = {}
        self._deadlines: list = []
        self._seq = itertools.count(1)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def hold(self, pull: HeldPull) -> None:
        pull.seq = next(self._seq)
        pull.held = True
        self._by_queue.setdefault(pull.request.key, []).append(pull)
        heapq.heappush(self._deadlines, (pull.deadline, pull.seq, pull))
        self._count += 1

    def has(self, key: tuple[str, int]) -> bool:
        return key in self._by_queue

    def queues(self) -> list[tuple[str, int]]:
        return list(self._by_queue)

    def take(self, key: tuple[str, int], max_offset: int | None = None) -> list[HeldPull]:
        """Remove and return the pulls of `key` whose cursor is below `max_offset` (all if None)."""
        pulls = self._by_queue.get(key)
        if not pulls:
            return []
        if max_offset is None:
            taken, kept = pulls, []
        else:
            taken = [p for p in pulls if p.cursor < max_offset]
            kept = [p for p in pulls if p.cursor >= max_offset]
        if kept:
            self._by_queue[key] = kept
        else:
            del self._by_queue[key]
        for p in taken:
            p.held = False
        self._count -= len(taken)
        return taken

    def take_expired(self, now: float) -> list[HeldPull]:
        out = []
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            _, seq, pull = heapq.heappop(heap)
            if not pull.held or pull.seq != seq:
                continue
            pulls = self._by_queue[pull.request.key]
            pulls.remove(pull)
            if not pulls:
                del self._by_queue[pull.request.key]
            pull.held = False
            self._count -= 1
            out.append(pull)
        return out

    def next_deadline(self) -> float | None:
        heap = self._deadlines
        while heap and (not heap[0][2].held or heap[0][2].seq != heap[0][1]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def take_all(self) -> list[HeldPull]:
        out = [p for pulls in self._by_queue.values() for p in pulls]
        for p in out:
            p.held = False
        self._by_queue.clear()
        self._deadlines.clear()
        self._count = 0
        return out
