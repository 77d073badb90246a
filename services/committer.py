"""The committer process (only with the transient store pool): copies [COMMITTED, WROTE) from
the shared-memory buffer lent to each segment into the segment file, with
`core.files.mapped_file.MappedFile.commit` (docs/SERVICES.md, committer).

It commits every `commit_interval_commitlog` ms, or at once on a `commit` wakeup from the
appender (PULL on ipc `committer`), when at least `commit_commitlog_least_pages` pages are
waiting; after `commit_commitlog_thorough_interval` ms, or when a segment is full, it commits
whatever is there. After an advance it raises COMMITTED and CONFIRM (the pool runs only under
ASYNC_FLUSH, where readers may see what is committed), wakes the flusher, and returns
(`pool_return`) the buffer of every segment it has committed to its end. Every second with
commits done it emits a `stats` event with `commit_latency` (the time of each copy).

The policy (interval, least pages, thorough interval, the segment walk) is core.jobs.CommitJob,
the job the embedded store's commit thread runs as well; this module is the words, sockets and
pool buffers around it.

A segment with no buffer lent was written straight into its file (the pool was empty when
the appender started it): committing it only moves COMMITTED along. The appender lends a
buffer before writing the segment's first byte and raises WROTE after writing, so WROTE past a
segment's start means its buffer, if any, is already recorded in the control block.
"""
from __future__ import annotations

import logging
import time

import zmq

from core.files.cache_window import UnmapBehind
from core.jobs import CommitJob
from ipc.control_block import Word
from ipc.protocol import pack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from services.transient_pool import SharedPool
from services.histogram import Histogram
from services.base import ServiceLoop, run_service
from services.segment_cache import SegmentCache

log = logging.getLogger("mqstore.committer")


class Committer(ServiceLoop):
    """Hosts core.jobs.CommitJob; the job's positions (core.jobs.SegmentPositions) are the
    WROTE and COMMITTED words, writable mappings of the segments and the pool's buffers."""
    name = "committer"

    def __init__(self, config, cb):
        super().__init__(config, cb)
        self.job = CommitJob(config, self)
        self.interval_ms = self.job.interval_ms
        self.file_size = config.mapped_file_size_commitlog
        self.committed = cb.get(Word.COMMITTED)
        self.segments = SegmentCache(config.commitlog_dir, self.file_size, writable=True)
        self.unmap = UnmapBehind(self.segments, config.page_cache_window_commitlog)
        self.latency = Histogram()

    def setup(self) -> None:
        self.pool = SharedPool(self.cb, self.config.transient_store_pool_size, self.file_size)
        self.pull = make_socket(self.ctx, zmq.PULL)
        bind_ipc(self.pull, ipc_endpoint(self.run_dir, "committer"))
        self.flush_push = make_socket(self.ctx, zmq.PUSH)
        self.flush_push.setsockopt(zmq.SNDTIMEO, 0)
        self.flush_push.connect(ipc_endpoint(self.run_dir, "flusher"))
        self.poller.register(self.pull, zmq.POLLIN)

    def run_once(self) -> None:
        woken = self.take_wakeups(self.pull)
        now = time.monotonic()
        self.emit_latency_every_second("commit_latency", self.latency, now)
        least = self.job.due(woken, now)
        if least is not None:
            self.commit(least)

    def commit(self, least_pages: int) -> None:
        self.job.run(least_pages)

    # -- the job's positions ---------------------------------------------------------------
    def target(self) -> int:
        return self.cb.get(Word.WROTE)

    def done(self) -> int:
        return self.committed

    def step(self, committed: int, wrote: int, least_pages: int) -> int:
        size = self.file_size
        start = committed - committed % size
        mf = self.segments.get(start)
        index = self.cb.pool_buffer_for(start)
        mf.write_buffer = None if index is None else self.pool.buffers[index]
        mf.committed_position = committed - start
        mf.wrote_position = min(wrote - start, size)
        began = time.perf_counter()
        reached = start + mf.commit(least_pages)
        if reached != committed:
            self.latency.observe(time.perf_counter() - began)
        if reached == start + size:
            if index is not None:
                self.cb.pool_return(index)
            self.segments.drop(start)
        return reached

    def advanced(self, committed: int, wrote: int) -> None:
        self.committed = committed
        self.cb.set(Word.COMMITTED, committed)
        self.cb.raise_to(Word.CONFIRM, committed)
        self.unmap.advance(committed)
        try:
            self.flush_push.send(pack({"op": "flush", "upto": committed}), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass                           # the flusher polls COMMITTED as well

    def drain(self) -> None:
        """Commit everything written before exit."""
        self.job.drain()

    def close(self) -> None:
        self.segments.close()
        self.pool.close()
        self.pull.close(0)
        self.flush_push.close(0)
        super().close()


if __name__ == "__main__":
    raise SystemExit(run_service(Committer))
