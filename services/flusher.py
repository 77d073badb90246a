"""The flusher process: makes [FLUSHED, COMMITTED) of the CommitLog durable and owns the
checkpoint file while the services run (docs/SERVICES.md, flusher).

Flushing goes through the engine's seam: `core.files.mapped_file.MappedFile.flush` on a read-only
mapping of each segment, which ends in `Mapping.flush` (fdatasync of the file: it writes back
the pages every process dirtied through its own mapping). The flusher never writes data.

- ASYNC_FLUSH: every `flush_interval_commitlog` ms (with `flush_commitlog_timed` false, also
  on a `flush` wakeup) when at least `flush_commitlog_least_pages` pages are dirty; after
  `flush_commitlog_thorough_interval` ms whatever is there.
- SYNC_FLUSH: at once on a wakeup (the `flush` FIFO from the appender, ipc/wakeup.py; PULL on
  ipc `flusher` from the committer and a slave's ha process), or on new data seen within 5 ms
  (SYNC_POLL_MS: what catches a lost wakeup), everything up to COMMITTED: one fdatasync answers
  every put waiting below it (group commit).

After an advance it raises FLUSHED (and CONFIRM under SYNC_FLUSH), sets PHYSIC_TS to the
LAST_STORE_TS it read before choosing its target (so never a record it has not flushed, up to
the appender's order of writes), and under SYNC_FLUSH then wakes the appender through the
`flushed` FIFO (the appender reads FLUSHED after it; a lost wakeup costs it one poll interval).

The policy (interval, least pages, thorough interval, timed, the segment walk, no retry after
a failure) is core.jobs.FlushJob, the job the embedded store's flush thread runs as well; this
module is the words, wakeups and checkpoint around it.

The checkpoint (`core.log.checkpoint.StoreCheckpoint`) gets physic timestamp, flushed and confirm
offsets and copies of LOGICS_TS, INDEX_TS and DISPATCHED_DURABLE whenever one of them changed,
at most every CHECKPOINT_INTERVAL_S (each write is an fdatasync of its own, kept off the group
commit's path), and at drain. A stale checkpoint only makes a recovery scan more.

Every second with flushes done it emits a `stats` event with `flush_latency` (the time of each
fdatasync, services/histogram.Histogram).

A failed flush (OSError) is never retried: FLUSH_FAILED = 1, FLUSHED stays, the process exits
with code 3 and the supervisor runs the abnormal recovery.
"""
from __future__ import annotations

import logging
import time

import zmq

from core.log.checkpoint import StoreCheckpoint
from core.files.fileops import REAL_FILE_OPS
from core.jobs import FlushFailed, FlushJob
from ipc.control_block import ServiceState, Word
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from ipc.wakeup import Wakeup
from services.histogram import Histogram
from services.base import ServiceLoop, run_service
from services.segment_cache import SegmentCache

log = logging.getLogger("mqstore.flusher")
CHECKPOINT_INTERVAL_S = 0.1
SYNC_POLL_MS = 5
EXIT_FLUSH_FAILED = 3


class Flusher(ServiceLoop):
    """Hosts core.jobs.FlushJob; the job's positions (core.jobs.SegmentPositions) are the
    COMMITTED and FLUSHED words and read-only mappings of the segments."""
    name = "flusher"

    def __init__(self, config, cb):
        super().__init__(config, cb)
        self.sync = bool(cb.get(Word.SYNC_FLUSH))
        self.job = FlushJob(config, self, self.sync, self._failed, SYNC_POLL_MS)
        self.interval_ms = self.job.interval_ms
        self.file_size = config.mapped_file_size_commitlog
        self.flushed = cb.get(Word.FLUSHED)
        self.store_ts = 0
        self.segments = SegmentCache(config.commitlog_dir, self.file_size, writable=False)
        self.checkpoint: StoreCheckpoint | None = None
        self.checkpointed = None
        self.next_checkpoint = 0.0
        self.latency = Histogram()

    def setup(self) -> None:
        self.checkpoint = StoreCheckpoint(self.config.checkpoint_path, REAL_FILE_OPS)
        self.pull = make_socket(self.ctx, zmq.PULL)
        bind_ipc(self.pull, ipc_endpoint(self.run_dir, "flusher"))
        self.flush_wakeup = Wakeup(self.run_dir, "flush")
        self.flushed_wakeup = Wakeup(self.run_dir, "flushed")
        self.poller.register(self.pull, zmq.POLLIN)
        self.poller.register(self.flush_wakeup.fileno(), zmq.POLLIN)

    def run(self) -> int:
        try:
            return super().run()
        except FlushFailed as e:
            log.error("flush failed, store no longer writable, exiting %d: %s", EXIT_FLUSH_FAILED, e)
            self.set_state(ServiceState.FAILED, reason=str(e))
            self.close()
            return EXIT_FLUSH_FAILED

    def run_once(self) -> None:
        woken = self.take_wakeups(self.pull)
        woken = self.flush_wakeup.drain() or woken
        least = self.job.due(woken)
        if least is not None:
            self.flush(least)
        self.write_checkpoint(force=False)
        self.emit_latency_every_second("flush_latency", self.latency, time.monotonic())

    def flush(self, least_pages: int) -> None:
        self.job.run(least_pages)

    # -- the job's positions ---------------------------------------------------------------
    def target(self) -> int:
        self.store_ts = self.cb.get(Word.LAST_STORE_TS)      # read before the target
        return self.cb.get(Word.COMMITTED)

    def done(self) -> int:
        return self.flushed

    def step(self, flushed: int, target: int, least_pages: int) -> int:
        size = self.file_size
        start = flushed - flushed % size
        mf = self.segments.get(start)
        mf.flushed_position = flushed - start
        mf.wrote_position = min(target - start, size)
        began = time.perf_counter()
        try:
            reached = start + mf.flush(least_pages)
        except OSError as e:
            raise OSError(e.errno, f"flush of {mf.path} failed: {e}") from e
        if reached != flushed:
            self.latency.observe(time.perf_counter() - began)
        if reached == start + size:
            self.segments.drop(start)
        return reached

    def advanced(self, flushed: int, target: int) -> None:
        cb = self.cb
        self.flushed = flushed
        cb.set(Word.FLUSHED, flushed)
        if self.sync:
            cb.raise_to(Word.CONFIRM, flushed)
        if flushed == target and self.store_ts:
            cb.raise_to(Word.PHYSIC_TS, self.store_ts)
        if self.sync:
            self.flushed_wakeup.notify()           # after the words: the appender reads them next

    def _failed(self, error: OSError) -> None:
        self.cb.set(Word.FLUSH_FAILED, 1)
        self.flushed_wakeup.notify()               # parked puts get FLUSH_DISK_TIMEOUT now

    def write_checkpoint(self, force: bool) -> None:
        cb = self.cb
        values = (self.flushed, cb.get(Word.PHYSIC_TS), cb.get(Word.LOGICS_TS), cb.get(Word.INDEX_TS),
                  cb.get(Word.DISPATCHED_DURABLE), cb.get(Word.CONFIRM))
        now = time.monotonic()
        if values == self.checkpointed or (not force and now < self.next_checkpoint):
            return
        ckpt = self.checkpoint
        (ckpt.flushed_phy_offset, physic_ts, logics_ts, index_ts, ckpt.dispatched_phy_offset,
         ckpt.confirm_phy_offset) = values
        if physic_ts:
            ckpt.physic_msg_timestamp = physic_ts
        if logics_ts:
            ckpt.logics_msg_timestamp = logics_ts
        if index_ts:
            ckpt.index_msg_timestamp = index_ts
        ckpt.flush()
        self.checkpointed = values
        self.next_checkpoint = now + CHECKPOINT_INTERVAL_S

    def drain(self) -> None:
        """The final flush of everything committed, then the checkpoint."""
        self.flush(0)
        self.write_checkpoint(force=True)
        self.checkpoint.shutdown()

    def close(self) -> None:
        self.segments.close()
        self.pull.close(0)
        for wakeup in (getattr(self, n, None) for n in ("flush_wakeup", "flushed_wakeup")):
            if wakeup is not None:
                wakeup.close()
        super().close()


if __name__ == "__main__":
    raise SystemExit(run_service(Flusher))
