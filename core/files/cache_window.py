"""Keeping the CommitLog's page cache to a window behind the newest bytes
(`page_cache_window_commitlog`, bytes; 0, the default, leaves the page cache to the kernel as
RocketMQ does).

Every byte a store appends is a new page of page cache, and the kernel keeps it until memory
runs short. While free memory lasts, each new page is memory the machine has not used lately;
on a virtual machine whose free memory goes back to the host (virtio-balloon free page
reporting) the first write of such a page costs ~9 us of kernel CPU per 4 KiB, about a quarter
of a 1 KiB put's whole cost (benchmarks/README.md). Dropping pages once they are dispatched
and `window` bytes behind gives the kernel pages back at the rate new ones are
needed, so that new ones are the ones just freed (~1 us per page here). Reads of older
messages then come from the disk, as RocketMQ's reads past `access_message_in_memory_max_ratio`.

The kernel drops a page of the page cache (POSIX_FADV_DONTNEED) only when it is clean and no
process maps it, so the work is split:
- `UnmapBehind`: each process that maps CommitLog segments (appender or committer, reput,
  reader) zaps its own page table entries below its position minus the window (MADV_DONTNEED:
  on a shared file mapping the data stays in the file and in the page cache; a later read
  faults it back);
- `DropBehind`: the reput process, which wakes every few milliseconds, drops the cached pages
  below DISPATCHED minus the window. A page not flushed yet is not dropped: the call starts its
  writeback (the flusher's fdatasync still decides FLUSHED), and each step covers the last two
  windows again (`retry`), which drops it then, and pages a process had not unmapped yet.
Both move in steps of `STEP` bytes, so the calls are few (one per 8 MiB appended). The
services do this; the embedded store (core.store) only lets go of its appender's mappings.
"""
from __future__ import annotations

import mmap
import os

from core.files.mapped_file import offset_to_file_name

STEP = 8 << 20                  # act once the position moved this far (a multiple of 2 MiB)


def _floor(offset: int) -> int:
    return max(0, offset - offset % STEP)


class UnmapBehind:
    """Zap this process's mappings of `queue` (a MappedFileQueue) below a moving offset."""

    def __init__(self, queue, window: int):
        self.queue = queue
        self.window = window
        self.done = -1                  # below this, zapped; -1 until the first position

    def advance(self, position: int) -> None:
        """The process has reached global offset `position`."""
        if not self.window:
            return
        upto = _floor(position - self.window)
        if self.done < 0:
            self.done = upto            # mappings below the first position are not ours to track
            return
        if upto < self.done + STEP:
            return
        for mf in list(self.queue.files):
            start = mf.file_from_offset
            lo, hi = max(self.done, start), min(upto, start + mf.file_size)
            if lo >= hi or not mf.is_mapped:
                continue
            buf = self.queue.hold(mf)
            if buf is None:
                continue
            try:
                buf.madvise(mmap.MADV_DONTNEED, lo - start, hi - lo)
            finally:
                mf.release()
        self.done = upto


class DropBehind:
    """Drop the CommitLog's cached pages below a moving offset (reput's part)."""

    def __init__(self, commitlog_dir: str, file_size: int, window: int, start: int):
        self.dir = commitlog_dir
        self.file_size = file_size
        self.window = window
        self.retry = max(2 * window, 4 * STEP)    # dropped again: pages still mapped last time
        self.done = _floor(start - window)

    def advance(self, safe: int) -> None:
        """Bytes below `safe` are dispatched (a page not flushed yet stays, its writeback
        started, and goes on a later step)."""
        if not self.window:
            return
        upto = _floor(safe - self.window)
        if upto < self.done + STEP:
            return
        lo = max(0, self.done - self.retry)
        while lo < upto:
            start = lo - lo % self.file_size
            hi = min(upto, start + self.file_size)
            self._drop(start, lo - start, hi - lo)
            lo = hi
        self.done = upto

    def _drop(self, start: int, offset: int, length: int) -> None:
        try:
            fd = os.open(os.path.join(self.dir, offset_to_file_name(start)), os.O_RDONLY)
        except FileNotFoundError:       # deleted as expired: nothing cached
            return
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
