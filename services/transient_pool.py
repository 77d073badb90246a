"""The transient store pool as the services see it: the supervisor's shared-memory buffers
`<control name>-pool-<i>` (one segment in size each), attached by the appender (which lends
them) and the committer (which copies them into the files and returns them).

Lending is recorded in the control block (`ControlBlock.pool_lend` / `pool_return`: LENT is the
appender's word, RETURNED the committer's), so it survives an appender crash: a restarted
appender finds the buffer lent to its current segment with `pool_buffer_for` and writes on in
it, and the committer keeps copying from it meanwhile.

`SharedPool.borrow()` is the pool protocol of `core.log.commitlog.CommitLog` (the engine calls it
when it starts a new segment and takes what it returns as `MappedFile.write_buffer`). It lends
for the newest segment of the CommitLog it is attached to: a buffer already lent to that
segment and not returned (an appender that died just after lending), else a free one, else
None, and the engine then writes that segment straight into the file (RocketMQ's fallback
when its pool is empty; the committer sees no buffer lent and only moves COMMITTED along).
Buffers are not zeroed on reuse: nothing reads a buffer past WROTE.
"""
from __future__ import annotations

import logging
from multiprocessing import resource_tracker, shared_memory

from ipc.control_block import POOL_BUFFERS, ControlBlock

log = logging.getLogger(__name__)


def pool_buffer_name(control_name: str, index: int) -> str:
    return f"{control_name}-pool-{index}"


class SharedPool:
    def __init__(self, cb: ControlBlock, count: int, file_size: int):
        self.cb = cb
        self.file_size = file_size
        self._shms = []
        self.buffers = []
        for i in range(min(count, POOL_BUFFERS)):
            shm = shared_memory.SharedMemory(pool_buffer_name(cb.name, i), create=False)
            try:
                # Attached segments are registered too on Python 3.11; only the supervisor,
                # which created them, may unlink them (as ipc/control_block.py does).
                resource_tracker.unregister(shm._name, "shared_memory")
            except Exception:
                pass
            if shm.size < file_size:
                shm.close()
                raise RuntimeError(f"pool buffer {shm.name} is {shm.size} bytes, "
                                   f"smaller than a segment ({file_size})")
            self._shms.append(shm)
            self.buffers.append(shm.buf[:file_size])
        self.segment_of_next_borrow = None     # callable() -> segment offset, set by the appender

    def __len__(self) -> int:
        return len(self.buffers)

    def buffer_for(self, segment_offset: int):
        """The buffer lent to `segment_offset` and not yet returned, or None."""
        i = self.cb.pool_buffer_for(segment_offset)
        return None if i is None or i >= len(self.buffers) else self.buffers[i]

    def lend(self, segment_offset: int):
        """A buffer for `segment_offset`: the one already lent to it, else a free one; None
        when every buffer is lent out."""
        i = self.cb.pool_buffer_for(segment_offset)
        if i is None:
            for j in range(len(self.buffers)):
                if self.cb.pool_is_free(j):
                    self.cb.pool_lend(j, segment_offset)
                    i = j
                    break
        if i is None or i >= len(self.buffers):
            log.warning("transient store pool exhausted (%d buffers lent); segment %d is "
                        "written straight into its file", len(self.buffers), segment_offset)
            return None
        return self.buffers[i]

    def borrow(self):
        """The engine's pool protocol: a buffer for the segment being started."""
        return self.lend(self.segment_of_next_borrow())

    def give_back(self, buf) -> None:
        """Buffers go back through the committer (`pool_return`), never from the appender."""

    def close(self) -> None:
        for view in self.buffers:
            view.release()
        self.buffers = []
        for shm in self._shms:
            try:
                shm.close()
            except BufferError:
                log.warning("pool buffer %s still referenced at close", shm.name)
        self._shms = []
