"""The engine's background policies, written once, as jobs over `core` objects and a
positions interface: the embedded store runs them in threads (core/embedded_services.py), the
service processes host the same jobs (services/reput.py), the positions being plain
attributes of the store in the first and control-block words in the second.

`ReputJob` (RocketMQ's ReputMessageService): dispatches the CommitLog from `reput_from` up to
the confirm offset into the consume queues and the index (core.log.dispatch.Dispatcher),
flushes the queues every `flush_interval_consume_queue` ms with
`flush_consume_queue_least_pages`, and every `flush_consume_queue_thorough_interval` ms and at
drain flushes queues and index whole and reports how far they are durable.

A full disk (ENOSPC, EDQUOT: a consume-queue or index file that cannot be created, written or
synced) is no crash (DESIGN.md section 4): the job logs it, holds the dispatch (or the flush)
where it is and tries again every DISK_RETRY_S; dispatching a range again is idempotent, so
the entries and keys written before the error are not doubled, and what could not be flushed
stays unflushed for the next flush. Consumers lag until space comes back.
"""
from __future__ import annotations

import errno
import logging
import time
from typing import Protocol

from core.log.dispatch import IDLE_AFTER_S, IDLE_INTERVAL_MS, DispatchStop

log = logging.getLogger(__name__)
DISK_RETRY_S = 1.0          # after ENOSPC a held dispatch or flush waits this long
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(error: OSError) -> bool:
    """Whether `error` says the disk (or the quota) is full."""
    return error.errno in NO_SPACE


class ReputPositions(Protocol):
    """The positions a `ReputJob` reads and raises. Embedded: the store's own objects
    (core/embedded_services.py); in processes: control-block words (services/reput.py)."""

    def min_offset(self) -> int:
        """The first byte of the log (retention moves it)."""

    def confirm(self) -> int:
        """How far the log may be dispatched."""

    def reached(self, offset: int) -> None:
        """Dispatch stands at `offset` (called after each attempt, a held one included)."""

    def durable(self, offset: int, logics_ts: int, index_ts: int) -> None:
        """Queues and index are durable up to `offset` (store timestamps of the newest
        dispatched record and of the index's flushed end)."""


class ReputJob:
    """One dispatch step (`dispatch_once`), the consume-queue flush rules (`flush_due`), the
    interval to wait before the next step (`wait_ms`) and the final work (`drain`).

    `chunk`: at most this many bytes per step (None: all up to the confirm offset);
    `on_range(min_offset, confirm)`: called before a step reads the log (a read-only view
    sets its bounds there)."""

    def __init__(self, config, dispatcher, cq_store, index, positions: ReputPositions,
                 reput_from: int, chunk: int | None = None, on_range=None):
        self.config = config
        self.dispatcher = dispatcher
        self.cq_store = cq_store
        self.index = index
        self.positions = positions
        self.reput_from = reput_from
        self.chunk = chunk
        self.on_range = on_range
        now = time.monotonic()
        self.last_moved = now
        self.moved = False                  # the last step dispatched something
        self._last_cq_flush = self._last_thorough = now
        self._invalid_at = -1
        self._disk_retry_at = None          # after ENOSPC: when dispatch tries the disk again
        self._flush_retry_at = None         # after ENOSPC: when a flush tries the disk again

    # -- dispatch ------------------------------------------------------------------------
    def behind(self) -> int:
        return self.positions.confirm() - self.reput_from

    def holding(self) -> bool:
        """A full disk holds the dispatch until its next try."""
        return self._disk_retry_at is not None and time.monotonic() < self._disk_retry_at

    def dispatch_once(self) -> bool:
        """Dispatch what is below the confirm offset (at most `chunk` bytes); True when it moved."""
        positions = self.positions
        min_offset = positions.min_offset()
        if self.reput_from < min_offset:
            log.warning("reput jumps from %d to the log's first byte %d", self.reput_from, min_offset)
            self.reput_from = min_offset
        confirm = positions.confirm()
        start = self.reput_from
        if start >= confirm or self.holding():
            self.moved = False
            return False
        if self.on_range is not None:
            self.on_range(min_offset, confirm)
        limit = confirm if self.chunk is None else min(confirm, start + self.chunk)
        try:
            reached, stop = self.dispatcher.run(start, limit)
            if reached == start and limit < confirm:        # one record larger than a chunk
                reached, stop = self.dispatcher.run(start, confirm)
        except OSError as e:
            if not no_space(e):
                raise
            if self._disk_retry_at is None:
                log.error("cannot write consume queues or index: %s; dispatch waits at %d and "
                          "tries again every %g s", e, start, DISK_RETRY_S)
            self._disk_retry_at = time.monotonic() + DISK_RETRY_S
            positions.reached(start)                        # what was written before the error
            self.moved = False
            return False
        if self._disk_retry_at is not None:
            self._disk_retry_at = None
            log.info("consume queues and index can be written again: dispatch goes on from %d", start)
        if stop == DispatchStop.INVALID and reached < confirm and reached != self._invalid_at:
            self._invalid_at = reached
            log.error("no valid record at %d below the confirm offset %d; dispatch waits there",
                      reached, confirm)
        self.reput_from = reached
        positions.reached(reached)
        self.moved = reached > start
        if self.moved:
            self.last_moved = time.monotonic()
        return self.moved

    # -- waiting -------------------------------------------------------------------------
    def idle(self) -> bool:
        """Nothing dispatched for IDLE_AFTER_S."""
        return time.monotonic() - self.last_moved >= IDLE_AFTER_S

    def wait_ms(self, interval_ms: float) -> float:
        """How long to wait before the next step: not at all while the last step moved and
        more is there; `interval_ms` otherwise, at least IDLE_INTERVAL_MS once idle."""
        if self.moved and self.behind() > 0:
            return 0
        if self.idle():
            return max(interval_ms, IDLE_INTERVAL_MS)
        return interval_ms

    # -- flushing ------------------------------------------------------------------------
    def flush_due(self) -> None:
        """Every `flush_interval_consume_queue` ms flush the queues with least pages; every
        `flush_consume_queue_thorough_interval` ms flush queues and index whole (`persist`)."""
        now = time.monotonic()
        cfg = self.config
        if now - self._last_cq_flush < cfg.flush_interval_consume_queue / 1000:
            return
        if self._flush_retry_at is not None and now < self._flush_retry_at:
            return
        self._last_cq_flush = now
        if now - self._last_thorough >= cfg.flush_consume_queue_thorough_interval / 1000:
            self._last_thorough = now
            self.persist()
        else:
            self._held_on_full_disk(self.cq_store.flush, cfg.flush_consume_queue_least_pages)

    def persist(self) -> bool:
        """Flush queues and index whole, then say how far they are durable; False (nothing
        said) when the disk is full."""
        dispatched = self.reput_from
        timestamp = self.dispatcher.last_store_timestamp
        if not self._held_on_full_disk(flush_whole, self.cq_store, self.index):
            return False
        index_ts = self.index.last_flushed_index_timestamp if self.index is not None else 0
        self.positions.durable(dispatched, timestamp, index_ts)
        return True

    def _held_on_full_disk(self, flush, *args) -> bool:
        try:
            flush(*args)
        except OSError as e:
            if not no_space(e):
                raise
            if self._flush_retry_at is None:
                log.error("cannot flush consume queues or index: %s; tried again every %g s",
                          e, DISK_RETRY_S)
            self._flush_retry_at = time.monotonic() + DISK_RETRY_S
            return False
        if self._flush_retry_at is not None:
            self._flush_retry_at = None
            log.info("consume queues and index can be flushed again")
        return True

    def drain(self, between=None) -> None:
        """At stop: dispatch what is left (calling `between()` after each step), then persist."""
        while self.dispatch_once():
            if between is not None:
                between()
        self.persist()


def flush_whole(cq_store, index) -> None:
    """Flush every consume queue and the index whole."""
    cq_store.flush(0)
    if index is not None:
        index.flush()
