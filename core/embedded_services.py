"""The embedded store's threads: each hosts a job of core/jobs.py (the flush, commit, reput and
allocate policies the service processes host too) over the store's own objects, in the same
ServiceThread shape (STYLE.md): wait for work or the interval, do one unit, drain at stop.

- `FlushService`: core.jobs.FlushJob over the CommitLog's queue; under SYNC_FLUSH also the
  group commit of the puts, by leader and followers (the put that finds no flush under way
  runs the fdatasync, and it answers every waiter below it).
- `CommitService`: core.jobs.CommitJob, copying transient-pool buffers into the files.
- `ReputService`: core.jobs.ReputJob over `StorePositions` (the CommitLog's offsets, the
  checkpoint); `idle` lets the next put wake it.
- `AllocateService`: core.jobs.AllocateJob, the queue's allocator; the store's DISK_FULL flag.
- `ScheduleService`: delivers delayed messages when due (core.delay.schedule,
  core.delay.timer_job), re-putting them through `MessageStore.put_encoded`.
"""
from __future__ import annotations

import logging
import threading
import time

from core.record.codec import SCHEDULE_TOPIC
from core.delay.offsets import DelayOffsetStore
from core.jobs import AllocateJob, CommitJob, FlushFailed, FlushJob, ReputJob
from core.running_flags import DISK_FULL, FLUSH_FAILED, NOT_WRITEABLE, WRITE_LOGICS_QUEUE_ERROR
from core.delay.put import TIMER_TOPIC
from core.delay.reput_record import EncodedRun, ReputRules
from core.delay.schedule import DelayScheduler, batch_groups
from core.status import PutMessageResult, PutMessageStatus
from core.delay.timer_job import TimerScheduler

log = logging.getLogger(__name__)
S_FLUSH_DISK_TIMEOUT = PutMessageStatus.FLUSH_DISK_TIMEOUT
_TOO_LARGE = PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "the body is over max_message_size")
SYNC_POLL_MS = 10           # SYNC_FLUSH: the thread looks for what puts left unflushed


class ServiceThread(threading.Thread):
    interval_ms = 10

    def __init__(self, name: str):
        super().__init__(name=name, daemon=True)
        self.stopped = False
        self._wakeup = threading.Event()
        self.woken = False               # the last wait ended on a wakeup

    def wakeup(self) -> None:
        self._wakeup.set()

    def wait_for_running(self, interval_ms: float) -> None:
        self.woken = self._wakeup.wait(interval_ms / 1000)
        self._wakeup.clear()

    def run(self) -> None:
        try:
            while not self.stopped:
                self.wait_for_running(self.interval_ms)
                self.run_once()
            self.drain()
        except Exception:
            log.exception("%s stopped by an error", self.name)
            self.on_crash()

    def run_once(self) -> None:
        """One unit of work; each service defines its own."""

    def drain(self) -> None:
        """Final work at stop."""

    def on_crash(self) -> None:
        """Called when run_once raised: mark the store so it stops taking writes."""

    def stop(self, join: bool = True) -> None:
        self.stopped = True
        self.wakeup()
        if join and self.is_alive():
            self.join()


class FlushService(ServiceThread):
    """Hosts core.jobs.FlushJob in a thread over the CommitLog's queue (its positions:
    `target`, `done`, `step`, `advanced`), and the SYNC_FLUSH group commit of the puts."""

    def __init__(self, store):
        super().__init__("flush-commitlog")
        self.store = store
        self.commitlog = store.commitlog
        self.sync = store.config.is_sync_flush
        self.job = FlushJob(store.config, self, self.sync, self._fail, SYNC_POLL_MS)
        self.interval_ms = self.job.interval_ms
        self.cv = threading.Condition()
        self.flushing = False            # a flush (by a put or the thread) is under way
        self.failed = False

    # -- put side ------------------------------------------------------------------------
    def wait_flushed(self, next_offset: int, timeout_ms: int) -> bool:
        """Group commit, leader/follower: block until the flushed position passes
        `next_offset`. A waiter that finds no flush under way runs it itself (one fdatasync
        for everything appended so far) and wakes the others; the others wait for it. No
        hand-off to the flush thread on the put's path: that hand-off (wake it, let it run,
        be woken back) cost two thirds of a single put (benchmarks/embedded.py, SYNC rows)."""
        queue = self.commitlog.queue
        if queue.flushed_where >= next_offset:
            return True
        deadline = time.monotonic() + timeout_ms / 1000
        cv = self.cv
        while True:
            with cv:
                while queue.flushed_where < next_offset:
                    if self.failed:
                        return False
                    if not self.flushing and not self.stopped:
                        self.flushing = True         # this waiter leads the next flush
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    cv.wait(remaining)
                else:
                    return True
            self._lead_flush()

    def _lead_flush(self) -> None:
        """Flush everything appended so far, publish, and hand the lead back. The caller set
        `flushing` under the condition; one flush runs at a time."""
        try:
            self._flush(0)
        finally:
            with self.cv:
                self.flushing = False
                self.cv.notify_all()

    # -- loop ----------------------------------------------------------------------------
    def wait_for_running(self, interval_ms: float) -> None:
        """ASYNC_FLUSH: until the next flush is due (a wakeup the job does not take, with
        `flush_commitlog_timed`, does not put it off by an interval)."""
        if not self.sync and self.job.next_run:
            interval_ms = max(1.0, (self.job.next_run - time.monotonic()) * 1000)
        super().wait_for_running(interval_ms)

    def run_once(self) -> None:
        if self.sync:
            # Puts lead their own flushes; the thread flushes what puts that do not wait
            # (WAIT=false) left behind, unless a put is flushing now.
            if self.commitlog.queue.flushed_where < self.commitlog.get_max_offset():
                with self.cv:
                    if self.flushing:
                        return
                    self.flushing = True
                self._lead_flush()
            return
        least = self.job.due(self.woken)
        if least is not None:
            self._flush(least)

    def _flush(self, least_pages: int) -> None:
        try:
            self.job.run(least_pages)
        except FlushFailed:
            pass                                 # `_fail` has marked the store

    # -- the job's positions ---------------------------------------------------------------
    def target(self) -> int:
        return self.commitlog.get_max_offset()

    def done(self) -> int:
        return self.commitlog.queue.flushed_where

    def step(self, flushed: int, target: int, least_pages: int) -> int:
        self.commitlog.flush(least_pages)
        return self.commitlog.queue.flushed_where

    def advanced(self, flushed: int, target: int) -> None:
        self._publish_checkpoint()
        if not self.sync:
            with self.cv:
                self.cv.notify_all()

    def _fail(self, error: OSError) -> None:
        """A failed flush is never retried: stop, refuse writes, wake every waiter."""
        log.error("flush failed, store is no longer writable: %s", error)
        self.store.flags.set(FLUSH_FAILED | NOT_WRITEABLE)
        self.failed = True
        self.stopped = True
        with self.cv:
            self.cv.notify_all()

    def _publish_checkpoint(self) -> None:
        queue = self.commitlog.queue
        ckpt = self.store.checkpoint
        if queue.store_timestamp:
            ckpt.physic_msg_timestamp = queue.store_timestamp
        ckpt.flushed_phy_offset = queue.flushed_where

    def drain(self) -> None:
        if not self.failed:
            self._flush(0)
            # As RocketMQ's shutdown, flush(0) at least once even with nothing left: a flush with
            # no least pages is what records the newest flushed store time for the checkpoint.
            try:
                self.commitlog.flush(0)
            except OSError as e:
                self._fail(e)
                return
            self._publish_checkpoint()
        with self.cv:
            self.cv.notify_all()

    def on_crash(self) -> None:
        self._fail(OSError("flush service crashed"))


class CommitService(ServiceThread):
    """Hosts core.jobs.CommitJob in a thread over the CommitLog's queue; an advance wakes
    the flush thread."""

    def __init__(self, store):
        super().__init__("commit-commitlog")
        self.store = store
        self.commitlog = store.commitlog
        self.job = CommitJob(store.config, self)
        self.interval_ms = self.job.interval_ms

    def run_once(self) -> None:
        least = self.job.due(self.woken)
        if least is not None:
            self.job.run(least)

    # -- the job's positions ---------------------------------------------------------------
    def target(self) -> int:
        return self.commitlog.queue.get_max_wrote_position()

    def done(self) -> int:
        return self.commitlog.queue.committed_where

    def step(self, committed: int, target: int, least_pages: int) -> int:
        self.commitlog.commit(least_pages)
        return self.commitlog.queue.committed_where

    def advanced(self, committed: int, target: int) -> None:
        self.store.flush_service.wakeup()

    def drain(self) -> None:
        self.job.drain()


class StorePositions:
    """The reput job's positions in the embedded store (core.jobs.ReputPositions): the
    CommitLog's own offsets, and the checkpoint the store writes."""

    def __init__(self, store):
        self.store = store
        self.commitlog = store.commitlog

    def min_offset(self) -> int:
        return self.commitlog.get_min_offset()

    def confirm(self) -> int:
        return self.commitlog.get_confirm_offset()

    def reached(self, offset: int) -> None:
        """Nothing to raise: `reput_from` is read from the job."""

    def durable(self, offset: int, logics_ts: int, index_ts: int) -> None:
        self.store.record_dispatched(offset, logics_ts, index_ts)


class ReputService(ServiceThread):
    """Hosts core.jobs.ReputJob in a thread: a step every millisecond, as RocketMQ's; once
    nothing has been dispatched for IDLE_AFTER_S, every IDLE_INTERVAL_MS (the job says when),
    and `idle` is set so that the next put wakes it at once (`MessageStore.put_message`)."""
    interval_ms = 1

    def __init__(self, store, from_offset: int):
        super().__init__("reput")
        self.store = store
        self.job = ReputJob(store.config, store.dispatcher, store.cq_store, store.index_service,
                            StorePositions(store), from_offset)
        self.idle = False

    @property
    def reput_from(self) -> int:
        return self.job.reput_from

    def behind(self) -> int:
        return self.job.behind()

    def wait_for_running(self, interval_ms: float) -> None:
        job = self.job
        wait_ms = job.wait_ms(interval_ms, eager=False)
        if job.idle():
            self.idle = True                     # from now on a put wakes the thread
            if job.behind() > 0 and not job.holding():
                self.idle = False                # a put came before it could see `idle`
                return
        super().wait_for_running(wait_ms)
        self.idle = False

    def run_once(self) -> None:
        self.job.dispatch_once()
        self.job.flush_due()

    def drain(self) -> None:
        self.job.drain()

    def on_crash(self) -> None:
        self.store.flags.set(WRITE_LOGICS_QUEUE_ERROR)


class AllocateService(ServiceThread):
    """Hosts core.jobs.AllocateJob in a thread: `allocate(path, next_path)` is the queue's
    allocator (called by puts); the thread makes the next segment ahead and, after ENOSPC,
    tries the failed one again. Its positions: the store's DISK_FULL flag, which the store
    sets itself with the time a put may try again (MessageStore._note_create_failure) and
    which a segment created again clears. `discard_ahead()` (at shutdown) deletes the
    segments made ahead that the queue never asked for."""
    interval_ms = 1000

    def __init__(self, fileops, file_size: int, warm: bool = False, flags=None):
        super().__init__("allocate-mapped-file")
        self.flags = flags
        self.job = AllocateJob(fileops, file_size, warm, self)

    @property
    def last_error(self) -> OSError | None:
        return self.job.last_error

    def allocate(self, path: str, next_path: str) -> None:
        self.job.allocate(path, next_path)
        self.wakeup()

    def disk_full(self, full: bool) -> None:
        if not full and self.flags is not None and self.flags.is_set(DISK_FULL):
            log.info("segments can be created again: DISK_FULL cleared")
            self.flags.clear(DISK_FULL)

    def run_once(self) -> None:
        self.job.run_once()

    def discard_ahead(self) -> None:
        """Delete the segments made ahead and never asked for; call once the thread stopped."""
        self.job.discard_ahead()


class ScheduleService(ServiceThread):
    """The scheduler jobs (delay levels, core.delay.schedule; timers, core.delay.timer_job) over the
    store's own consume queues and CommitLog; their re-puts are `put_encoded` calls (records
    built from the stored ones, core.delay.reput_record), so they are flushed and dispatched as
    any put."""

    def __init__(self, store):
        super().__init__("schedule")
        self.store = store
        cq_store, log_ = store.cq_store, store.commitlog
        rules = ReputRules(log_.store_host_bytes, log_.prop_crc, log_.max_message_size,
                           no_wait=store.config.is_sync_flush)
        self.job = DelayScheduler(store.config.delay_levels_ms,
                                  DelayOffsetStore(store.config.config_dir, store.fileops),
                                  lambda queue_id: cq_store.find(SCHEDULE_TOPIC, queue_id),
                                  log_.read, self._put_all, rules=rules)
        self.job.load()
        self.timers = TimerScheduler(store.config.store_path_root_dir,
                                     lambda: cq_store.find(TIMER_TOPIC, 0), log_.read,
                                     self._put_all, store.fileops, rules=rules,
                                     precision_ms=store.config.timer_precision_ms)
        self.timers.load()
        self._wait_ms = 0

    def _put_all(self, deliveries) -> list:
        """Re-put a batch: each group of `batch_groups` as one `put_encoded`, one by one when
        that is refused; a body over the message size limit in force (it may have been lowered
        since the put) MESSAGE_ILLEGAL, as a put of it would be. No re-put waits for a flush by
        itself (under SYNC_FLUSH its record says WAIT false, as RocketMQ's scheduler delivers
        them), but the whole waits for one flush past its last record: one fsync, not one per
        message in turn."""
        store = self.store
        limit = store.commitlog.max_message_size
        results = [_TOO_LARGE if d.body_len > limit else None for d in deliveries]
        fit = [i for i, r in enumerate(results) if r is None]
        for group in batch_groups([deliveries[i] for i in fit], limit):
            group = [fit[i] for i in group]
            r = store.put_encoded(EncodedRun([deliveries[i] for i in group]))
            for i, one in zip(group, [r] * len(group) if r.ok or len(group) == 1 else
                              [store.put_encoded(EncodedRun([deliveries[i]])) for i in group]):
                results[i] = one
        stored = [r.append_result.next_offset for r in results if r.append_result is not None]
        if store.config.is_sync_flush and stored and not store.flush_service.wait_flushed(
                max(stored), store.config.sync_flush_timeout):
            return [S_FLUSH_DISK_TIMEOUT if r.ok else r.status for r in results]
        return [r.status for r in results]

    def wait_for_running(self, interval_ms: float) -> None:
        super().wait_for_running(self._wait_ms)

    def run_once(self) -> None:
        self._wait_ms = min(self.job.run_once(), self.timers.run_once())

    def drain(self) -> None:
        self.job.offsets.persist()
        self.timers.persist(force=True)
