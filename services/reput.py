"""The reput process (RocketMQ's ReputMessageService): the only writer of consumequeue/ and
index/. It dispatches the CommitLog range [DISPATCHED, CONFIRM) with core.log.dispatch.Dispatcher
over a read-only CommitLog view, into core.ConsumeQueueStore and core.IndexService.

Each loop (every millisecond while the reader holds pulls, as RocketMQ's; every
UNWATCHED_INTERVAL_MS while none is held; at least IDLE_INTERVAL_MS once the store has been
idle for IDLE_AFTER_S) dispatches at most `CHUNK` bytes, raises DISPATCHED, and, while the
reader holds pulls (PULLS_HELD), publishes one `{"arrivals": [[topic, queue_id, max_offset],
...]}` on the PUB socket `reput.pub` (one entry per queue that grew, with its new max offset)
for the reader's long polling. Consume queues are flushed every
`flush_interval_consume_queue` ms with `flush_consume_queue_least_pages`; every
`flush_consume_queue_thorough_interval` ms and at drain, queues and index are flushed whole
and then DISPATCHED_DURABLE, LOGICS_TS and INDEX_TS are raised (the flusher copies them into
the checkpoint). When retention has moved MIN_PHY, consume-queue and index files that point
only below it are deleted (at most every `clean_resource_interval` ms).

Dispatch makes a system call (`sched_yield`) between the steps of each batch (scan, consume
queues, index). On the 2-CPU VMs we run on, a thread woken on the CPU where reput runs Python
waited for reput's next system call or the 4 ms scheduler tick: the ZeroMQ I/O threads of the
appender and its clients waited about a millisecond behind each dispatch, which made the
slowest unbatched puts (with the steps split so, one-in-flight put p99 1.5 -> 0.9 ms). A
range of at most SHORT_RANGE_BYTES (a live store's new puts, a few dozen records) is also
taken SHORT_STEP_RECORDS records at a time, so that it gives way every few records (p99 a
further 0.1-0.3 ms lower in 9 of 11 interleaved comparisons); larger ranges (a loaded store,
catching up) keep the large batches, whose fixed cost small steps would multiply.

The dispatch step, the consume-queue flush rules and the full-disk hold (ENOSPC, EDQUOT: no
crash, dispatch or flush waits where it is and tries again; DESIGN.md section 4) are
core.jobs.ReputJob, the job the embedded store runs in a thread; this module is the control-block
words it reads and raises, the PUB socket and the clean-up of files below MIN_PHY around it.
Consumers lag (the `dispatch` lag of `mqstore status`) until space comes back.

A (re)started reput resumes from DISPATCHED_DURABLE, what is known to be on disk: it loads
and recovers the queues and the index, and dispatching the range again is idempotent (an
entry already there is skipped, an index key already there is not added twice). When that
leaves it more than `CATCH_UP_BYTES` (or four CommitLog segments, if less) behind, it reports
RECOVERING with progress while it catches up, before it reports RUNNING.

Usage (started by the supervisor): python -m services.reput --store ROOT
"""
from __future__ import annotations

import logging
import os
import time

import zmq

from core.log.consume_queue import UNIT_SIZE
from core.log.consume_queue_store import ConsumeQueueStore
from core.jobs import ReputJob
from core.log.dispatch import Dispatcher
from core.files.fileops import REAL_FILE_OPS
from core.log.index_service import IndexService
from core.files.cache_window import DropBehind, UnmapBehind
from core.read.views import CommitLogView
from ipc.control_block import ServiceState, Word
from ipc.protocol import pack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from services.base import ServiceLoop, run_service

log = logging.getLogger("reput")
CHUNK = 4 << 20
UNWATCHED_INTERVAL_MS = 10     # the loop's interval while no pull is held (wait_for_running)
CATCH_UP_BYTES = 64 << 20
SHORT_RANGE_BYTES = 64 << 10   # a dispatch of at most this much is taken in short steps...
SHORT_STEP_RECORDS = 8         # ...of this many records, giving way between them


class Reput(ServiceLoop):
    name = "reput"
    interval_ms = 1

    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.commitlog = CommitLogView(cfg.commitlog_dir, cfg.mapped_file_size_commitlog,
                                       cfg.max_mapped_files)
        self.unmap = UnmapBehind(self.commitlog.queue, cfg.page_cache_window_commitlog)
        self.drop = DropBehind(cfg.commitlog_dir, cfg.mapped_file_size_commitlog,
                               cfg.page_cache_window_commitlog, cb.get(Word.DISPATCHED))
        self.cq_store = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue,
                                          REAL_FILE_OPS)
        self.cq_store.recover()                  # lists and recovers the queues in one walk
        self.cq_store.correct_min_offset(max(cb.get(Word.MIN_PHY), 0))
        reflush_from(self.cq_store, cb.get(Word.DISPATCHED_DURABLE))
        self.index = None
        if cfg.message_index_enable:
            self.index = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num,
                                      REAL_FILE_OPS, cfg.max_msgs_num_batch)
            self.index.load(True, cb.get(Word.INDEX_TS))
        self.arrivals: dict[tuple[str, int], int] = {}
        self.dispatcher = Dispatcher(self.commitlog, self.cq_store, self.index, self._arrived,
                                     give_way=os.sched_yield,
                                     short_steps=(SHORT_RANGE_BYTES, SHORT_STEP_RECORDS),
                                     delay_levels=self.config.delay_levels_ms)
        self.job = ReputJob(cfg, self.dispatcher, self.cq_store, self.index, self,
                            max(cb.get(Word.DISPATCHED_DURABLE), cb.get(Word.MIN_PHY)),
                            chunk=CHUNK, on_range=self._bound_view)
        now = time.monotonic()
        self._next_clean, self._cleaned_to = now, -1          # a first pass at start
        self.pub = make_socket(self.ctx, zmq.PUB)
        bind_ipc(self.pub, ipc_endpoint(self.run_dir, "reput.pub"))
        log.info("reput starts at %d (CONFIRM %d, DISPATCHED %d)", self.job.reput_from,
                 cb.get(Word.CONFIRM), cb.get(Word.DISPATCHED))
        self._catch_up()

    def _catch_up(self) -> None:
        job = self.job
        start = job.reput_from
        total = self.cb.get(Word.CONFIRM) - start
        if total <= min(CATCH_UP_BYTES, 4 * self.config.mapped_file_size_commitlog):
            return
        self.set_state(ServiceState.RECOVERING, done=0, total=total)
        while not self.stopped and job.dispatch_once():
            self.report_progress(job.reput_from - start, total)
            job.flush_due()
        self.report_progress(job.reput_from - start, total)

    # -- the job's positions (core.jobs.ReputPositions): control-block words -------------
    def min_offset(self) -> int:
        return self.cb.get(Word.MIN_PHY)

    def confirm(self) -> int:
        return self.cb.get(Word.CONFIRM)

    def _bound_view(self, min_offset: int, confirm: int) -> None:
        self.commitlog.set_min(min_offset)
        self.commitlog.set_end(confirm)

    def reached(self, offset: int) -> None:
        self.cb.raise_to(Word.DISPATCHED, offset)
        self.unmap.advance(offset)
        self.drop.advance(offset)
        self._publish()

    def durable(self, offset: int, logics_ts: int, index_ts: int) -> None:
        cb = self.cb
        cb.raise_to(Word.DISPATCHED_DURABLE, offset)
        if logics_ts:
            cb.raise_to(Word.LOGICS_TS, logics_ts)
        if self.index is not None:
            cb.raise_to(Word.INDEX_TS, index_ts)

    # -- dispatch ------------------------------------------------------------------------
    def _arrived(self, topic: str, queue_id: int, next_offset: int) -> None:
        self.arrivals[topic, queue_id] = next_offset

    def _publish(self) -> None:
        """Send the arrivals to the reader while it holds pulls (PULLS_HELD); otherwise
        nobody waits for them (a pull reads DISPATCHED itself) and they are dropped: a message
        per dispatch woke the reader for nothing and cost both processes CPU."""
        if not self.arrivals:
            return
        if not self.cb.get(Word.PULLS_HELD):
            self.arrivals = {}
            return
        msg = pack({"arrivals": [[t, q, m] for (t, q), m in self.arrivals.items()]})
        self.arrivals = {}
        try:
            self.pub.send(msg, zmq.NOBLOCK)
        except zmq.Again:
            log.warning("arrivals dropped: the reader is not keeping up")

    # -- the loop ------------------------------------------------------------------------
    def wait_for_running(self, timeout_ms: float) -> None:
        """Sleep the interval unless there is more to dispatch. The interval is a millisecond
        while the reader holds pulls (PULLS_HELD: consumers wait for the next message) and
        UNWATCHED_INTERVAL_MS while none waits: nobody is then held up by a later consume-queue
        entry, and waking 1,000 times a second to dispatch a put or two took a CPU from the
        appender and its clients on small machines (the slowest unbatched puts). Once nothing
        has been dispatched for IDLE_AFTER_S it is at least IDLE_INTERVAL_MS (the job's rule).
        CONFIRM is a shared word, not a message: there is no socket to wait on, so this
        process sleeps."""
        self.ready = {}
        if not self.cb.get(Word.PULLS_HELD):
            timeout_ms = max(timeout_ms, UNWATCHED_INTERVAL_MS)
        wait_ms = self.job.wait_ms(timeout_ms)
        if wait_ms:
            time.sleep(wait_ms / 1000)

    def run_once(self) -> None:
        self.job.dispatch_once()
        self.job.flush_due()
        self._clean_due()

    def _clean_due(self) -> None:
        """RocketMQ's CleanConsumeQueueService: once retention has moved MIN_PHY, delete the
        consume-queue and index files that point only below it (never a queue's last file),
        at most every `clean_resource_interval` ms."""
        now = time.monotonic()
        if now < self._next_clean:
            return
        self._next_clean = now + self.config.clean_resource_interval / 1000
        min_phy = self.cb.get(Word.MIN_PHY)
        if min_phy <= self._cleaned_to:
            return
        self._cleaned_to = min_phy
        queues = self.cq_store.delete_expired(min_phy)
        indexes = self.index.delete_expired_file(min_phy) if self.index is not None else 0
        if queues or indexes:
            log.info("the log starts at %d now: deleted %d consume-queue and %d index files "
                     "that pointed only below it", min_phy, queues, indexes)

    def drain(self) -> None:
        self.job.drain(between=lambda: self.cb.heartbeat(self.name))
        log.info("drained: dispatched up to %d (CONFIRM %d)", self.job.reput_from,
                 self.cb.get(Word.CONFIRM))

    def close(self) -> None:
        self.pub.close(0)
        if self.index is not None:
            self.index.shutdown()
        self.cq_store.shutdown()
        self.commitlog.shutdown()
        super().close()


def reflush_from(cq_store, durable: int) -> None:
    """Entries for records at or past `durable` may have been written by a reput that died
    before flushing them: they are in the page cache, and `ConsumeQueue.recover` counted them
    as flushed. Move each queue's flushed position back to its first such entry, so that the
    next full flush makes them durable before DISPATCHED_DURABLE passes them."""
    for cq in cq_store.queues.values():
        if cq.max_physic_offset <= durable:
            continue                            # every entry is older: nothing to look at
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.get_entry(mid)
            if entry is not None and entry[0] < durable:
                lo = mid + 1
            else:
                hi = mid
        queue, offset = cq.queue, lo * UNIT_SIZE
        if offset >= queue.flushed_where:
            continue
        for mf in queue.files:
            if mf.file_from_offset + mf.file_size > offset:
                mf.flushed_position = min(mf.flushed_position, max(0, offset - mf.file_from_offset))
        queue.flushed_where = offset


if __name__ == "__main__":
    raise SystemExit(run_service(Reput))
