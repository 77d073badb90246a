"""The engine's background policies, written once, as jobs over `core` objects and a
positions interface (a Protocol each): the embedded store runs them in threads
(core/embedded_services.py), the service processes host the same jobs (services/flusher.py,
committer.py, reput.py, allocator.py), the positions being the store's own objects in the first
and control-block words in the second. `core` imports no ipc: the processes implement the
interfaces on their side.

- `FlushJob` (RocketMQ's FlushRealTimeService): `flush_interval_commitlog`,
  `flush_commitlog_least_pages`, `flush_commitlog_thorough_interval`, `flush_commitlog_timed`;
  under SYNC_FLUSH everything at once (the group commit around it is the host's); a failed
  flush is never retried.
- `CommitJob` (CommitRealTimeService): the transient pool's commit interval and least pages.
- `ReputJob` (ReputMessageService): dispatches the CommitLog from `reput_from` up to the
  confirm offset into the consume queues and the index (core.log.dispatch.Dispatcher),
  flushes the queues every `flush_interval_consume_queue` ms with
  `flush_consume_queue_least_pages`, and every `flush_consume_queue_thorough_interval` ms and
  at drain flushes queues and index whole and reports how far they are durable.
- `AllocateJob` (AllocateMappedFileService): CommitLog segments created whole, the next one
  ahead, the failed one tried again after ENOSPC.

A full disk (ENOSPC, EDQUOT: a consume-queue or index file that cannot be created, written or
synced) is no crash for the reput (DESIGN.md section 4): the job logs it, holds the dispatch
(or the flush) where it is and tries again every DISK_RETRY_S; dispatching a range again is
idempotent, so the entries and keys written before the error are not doubled, and what could
not be flushed stays unflushed for the next flush. Consumers lag until space comes back. The
thread and the process wait a full disk out alike, by construction.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time
from typing import Protocol

from core.files.least_pages import LeastPages
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

    def wait_ms(self, interval_ms: float, eager: bool = True) -> float:
        """How long to wait before the next step: `interval_ms`, at least IDLE_INTERVAL_MS
        once idle; with `eager`, not at all while the last step moved and more is there (a
        process of its own; a thread sharing the interpreter with the puts waits the interval
        between steps, each step taking everything there is)."""
        if eager and self.moved and self.behind() > 0:
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


# -- flush and commit of the CommitLog ------------------------------------------------------
class FlushFailed(Exception):
    """A flush raised OSError; the store must not take writes until recovered."""


class SegmentPositions(Protocol):
    """What a `FlushJob` or `CommitJob` works on: `target()` is how far there is data to take
    (written, or committed for a flush), `done()` how far it is taken, `step(done, target,
    least_pages)` takes the segment holding `done` (RocketMQ's MappedFile.flush or commit)
    and returns the new position, `advanced(done, target)` publishes an advance.
    Embedded: the CommitLog's queue (core/embedded_services.py); in processes: control-block
    words and mappings of the segments (services/flusher.py, services/committer.py)."""

    def target(self) -> int:
        """How far there is data to take."""

    def done(self) -> int:
        """How far it is taken."""

    def step(self, done: int, target: int, least_pages: int) -> int:
        """Take the segment holding `done`; return the new position."""

    def advanced(self, done: int, target: int) -> None:
        """Publish that everything below `done` is taken."""


class PeriodicJob:
    """RocketMQ's rule for a periodic flush or commit of the CommitLog: every `interval_ms`
    (or at once on a wakeup, unless `timed`), at least `least_pages` dirty pages
    (core.files.least_pages), everything once every `thorough_interval_ms`; then segment by
    segment up to the target, as far as each step moves."""

    def __init__(self, positions: SegmentPositions, interval_ms: float, least_pages: int,
                 thorough_interval_ms: int, timed: bool = False):
        self.positions = positions
        self.interval_ms = interval_ms
        self.timed = timed
        self.least = LeastPages(least_pages, thorough_interval_ms)
        self.next_run = 0.0

    def due(self, woken: bool, now: float | None = None) -> int | None:
        """The least pages for a run made now, or None when none is due."""
        now = time.monotonic() if now is None else now
        if now < self.next_run and not (woken and not self.timed):
            return None
        self.next_run = now + self.interval_ms / 1000
        return self.least.now(now)

    def run(self, least_pages: int) -> bool:
        """Take segments up to the target; True when it moved."""
        positions = self.positions
        target = positions.target()
        start = done = positions.done()
        while done < target:
            reached = self.step(done, target, least_pages)
            if reached == done:
                break
            done = reached
        if done > start:
            positions.advanced(done, target)
        return done > start

    def step(self, done: int, target: int, least_pages: int) -> int:
        return self.positions.step(done, target, least_pages)


class FlushJob(PeriodicJob):
    """The CommitLog flush (RocketMQ's FlushRealTimeService and, under SYNC_FLUSH, the group
    commit's flush): `flush_interval_commitlog`, `flush_commitlog_least_pages`,
    `flush_commitlog_thorough_interval`, `flush_commitlog_timed`; under SYNC_FLUSH every
    `sync_poll_ms` and always everything. A failed flush is never retried:
    `on_failure(error)` marks the store not writable and FlushFailed is raised."""

    def __init__(self, config, positions: SegmentPositions, sync: bool, on_failure,
                 sync_poll_ms: float):
        super().__init__(positions, sync_poll_ms if sync else config.flush_interval_commitlog,
                         config.flush_commitlog_least_pages,
                         config.flush_commitlog_thorough_interval, config.flush_commitlog_timed)
        self.sync = sync
        self.on_failure = on_failure

    def due(self, woken: bool, now: float | None = None) -> int | None:
        return 0 if self.sync else super().due(woken, now)

    def step(self, done: int, target: int, least_pages: int) -> int:
        try:
            return self.positions.step(done, target, least_pages)
        except OSError as e:
            self.on_failure(e)
            raise FlushFailed(str(e)) from e


class CommitJob(PeriodicJob):
    """The transient pool's commit (RocketMQ's CommitRealTimeService): every
    `commit_interval_commitlog` ms or on a wakeup, `commit_commitlog_least_pages`,
    `commit_commitlog_thorough_interval`."""

    def __init__(self, config, positions: SegmentPositions):
        super().__init__(positions, config.commit_interval_commitlog,
                         config.commit_commitlog_least_pages,
                         config.commit_commitlog_thorough_interval)

    def drain(self) -> None:
        """Commit everything written."""
        positions = self.positions
        while positions.done() < positions.target():
            if not self.run(0):
                log.error("cannot commit past %d (written up to %d)", positions.done(),
                          positions.target())
                return


# -- allocation of CommitLog segments -------------------------------------------------------
class AllocatePositions(Protocol):
    """Where an `AllocateJob` says the disk is full or has room again. Embedded: the store's
    DISK_FULL flag; in processes: the DISK_FULL word (services/allocator.py)."""

    def disk_full(self, full: bool) -> None:
        """A segment could not be created for want of space (True), or was created (False)."""


class AllocateJob:
    """RocketMQ's AllocateMappedFileService: `allocate(path, next_path)` creates `path` whole
    (core.files.fileops.FileOps.create_file: tmp, fallocate, fsync, rename) unless it exists
    whole, and queues `next_path`, which `run_once` creates ahead (and with `warm` prefaults
    and mlocks), so that the appender's next roll finds its segment ready. ENOSPC on `path`
    says the disk is full; since nothing asks for a segment while puts are refused, `run_once`
    tries that path again every DISK_RETRY_S and the first success says there is room again.
    A segment made ahead that nobody asked for is deleted by `discard_ahead` at a clean stop.
    `allocate` may run in another thread than `run_once` (the embedded store's puts)."""

    def __init__(self, fileops, file_size: int, warm: bool, positions: AllocatePositions):
        self.fileops = fileops
        self.file_size = file_size
        self.warm = warm
        self.positions = positions
        self.pending: list[str] = []            # paths to create ahead
        self.ahead: set[str] = set()            # made ahead, not yet asked for
        self.failed_path: str | None = None     # the path that hit ENOSPC, tried again
        self.next_retry = 0.0
        self.last_error: OSError | None = None
        self._lock = threading.Lock()
        self._creating = threading.Lock()

    def allocate(self, path: str, next_path: str | None = None) -> None:
        """Create `path` now (raises OSError) and queue `next_path` to be made ahead."""
        with self._creating:
            self.ahead.discard(path)
            try:
                self._create(path)
            except OSError as e:
                self.last_error = e
                if e.errno == errno.ENOSPC:
                    self.failed_path = path
                    self.next_retry = time.monotonic() + DISK_RETRY_S
                    self.positions.disk_full(True)
                raise
            self._created()
        if next_path is not None:
            with self._lock:
                if next_path not in self.pending:
                    self.pending.append(next_path)

    def run_once(self) -> None:
        """Create the segments queued ahead; try a path that hit ENOSPC again when due."""
        while True:
            with self._lock:
                if not self.pending:
                    break
                path = self.pending.pop(0)
            self._create_ahead(path)
        if self.failed_path is not None and time.monotonic() >= self.next_retry:
            self._retry()

    def discard_ahead(self) -> None:
        """Delete the segments made ahead and never asked for (at a clean stop)."""
        with self._creating:
            self.fileops.discard_unwritten(self.ahead, log)
            self.ahead.clear()

    def _create(self, path: str) -> bool:
        """Create `path` unless it exists whole; True if it was created now."""
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            self.fileops.create_file(path, self.file_size)
            log.info("created %s", os.path.basename(path))
            return True
        if size != self.file_size:
            raise OSError(errno.EINVAL, f"{path} exists with {size} bytes, segments are {self.file_size}")
        return False

    def _created(self) -> None:
        self.failed_path = None
        self.positions.disk_full(False)

    def _create_ahead(self, path: str) -> None:
        try:
            with self._creating:
                if not self._create(path):
                    return
                self.ahead.add(path)
            if self.warm:
                self._warm(path)
        except OSError as e:
            self.last_error = e
            log.warning("could not create %s ahead of time: %s", path, e)

    def _warm(self, path: str) -> None:
        started = time.monotonic()
        if not self.fileops.warm_file(path, self.file_size):
            log.warning("mlock of %s not allowed here; segment warmed but not locked", path)
        log.info("warmed %s in %.3f s", os.path.basename(path), time.monotonic() - started)

    def _retry(self) -> None:
        path = self.failed_path
        try:
            with self._creating:
                self._create(path)
                self._created()
        except OSError as e:
            self.next_retry = time.monotonic() + DISK_RETRY_S
            if e.errno != errno.ENOSPC:
                log.warning("retry of %s failed: %s", path, e)
