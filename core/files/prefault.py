"""Prefaulting the CommitLog ahead of the writer, in a background thread.

A segment that is not warmed (`warm_mapped_file_enable` off, RocketMQ's default) takes a page
fault on the first write of every 4 KiB page: with 1 KiB records, one fault every four
appends, paid by the appending thread. `PrefaultAhead` keeps the next `ahead` bytes of the
segment being written mapped by calling madvise on them from its own thread. The call goes
through ctypes, which releases the GIL (mmap.madvise keeps it), so the faults are taken on the
other core while appends go on. The thread holds a reference on the segment while it works, so
the segment is never unmapped under it.

The advice follows the flush mode:
- ASYNC_FLUSH: MADV_POPULATE_WRITE, pages mapped writable: an append into them is a plain copy
  (the fastest appends). It also dirties them, so the zero pages ahead are written back once
  more than the data: the background flush pays that, no put waits for it.
- SYNC_FLUSH: MADV_POPULATE_READ, pages in the page cache and mapped but left clean (an append
  takes a light write-protect fault per page). With POPULATE_WRITE every group commit's
  fdatasync also wrote back whatever zero pages the thread had dirtied ahead of the data: the
  commit that followed a 16 MiB refill waited for 16 MiB more than its records (measured: the
  slowest batch put of 1,000 took 83-113 ms against 20-31 ms with POPULATE_READ, and the disk
  wrote every byte twice).

Where the advice is missing (Linux < 5.14) or fails (no memory: it returns an error rather than
raising SIGBUS) the thread stops trying: appends then fault as before.
"""
from __future__ import annotations

import ctypes
import logging
import threading
import weakref

from core.files.fileops import MADV_POPULATE_READ, MADV_POPULATE_WRITE, PAGE_SIZE

log = logging.getLogger(__name__)
AHEAD = 32 << 20                # bytes kept prefaulted past the write position
CHECK_EVERY = 256 << 10         # the writer reports its position after this many bytes
NEVER = 1 << 62                 # an offset the writer never reaches: no more reports

_libc = ctypes.CDLL(None, use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int


def buffer_address(buf) -> int:
    """The address of a writable buffer (an mmap). The export taken to read it is dropped at
    once, so the buffer can still be closed; the caller keeps it open while it uses the address."""
    view = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(view)
    finally:
        del view


class PrefaultAhead:
    """Call `wrote(mf, position)` after an append that reached the offset the last call
    returned (and after a segment change); the thread keeps [position, position + AHEAD) of
    `mf` prefaulted. `close()` stops the thread."""

    def __init__(self, queue, ahead: int = AHEAD, sync_flush: bool = False):
        self.queue = queue
        self.ahead = ahead
        self.advice = MADV_POPULATE_READ if sync_flush else MADV_POPULATE_WRITE
        self._refill = ahead // 2               # populate again when less than this is left
        self._wanted: tuple | None = None        # (segment, position) the writer reached
        self._done_mf = None
        self._done_upto = 0                      # prefaulted below this offset of _done_mf
        self._wake = threading.Event()
        self._stopped = False
        self._supported = True
        # The thread holds this object weakly: a log dropped without close() (its segments,
        # their mappings and descriptors) is freed, and the finalizer wakes the thread to end.
        self._thread = threading.Thread(target=_serve, args=(weakref.ref(self), self._wake),
                                        name="prefault", daemon=True)
        weakref.finalize(self, self._wake.set)
        self._thread.start()

    def wrote(self, mf, position: int) -> int:
        """The writer reached `position` in `mf`; returns the physical offset at which it should
        call again (it need not call before: cheap appends stay cheap)."""
        again = mf.file_from_offset + position + CHECK_EVERY
        if mf is self._done_mf and position + self._refill <= self._done_upto:
            return again
        if not self._supported or mf.write_buffer is not None:
            return NEVER                          # a pool buffer is resident already
        if not self._wake.is_set():
            self._wanted = (mf, position)
            self._wake.set()
        return again

    def _serve_once(self) -> bool:
        """One wake-up of the thread: False when it should end."""
        wanted = self._wanted
        self._wake.clear()
        if self._stopped:
            return False
        if wanted is not None:
            self._populate(*wanted)
        return True

    def _populate(self, mf, position: int) -> None:
        """One madvise call for everything missing up to position + AHEAD: the thread needs
        the GIL only between calls, and an appending thread hands it over only every switch
        interval (5 ms), so many small calls would fall behind the writer."""
        if mf is not self._done_mf:
            self._done_mf, self._done_upto = mf, position - position % PAGE_SIZE
        start = max(self._done_upto, position - position % PAGE_SIZE)
        end = min(mf.file_size, (position + self.ahead) // PAGE_SIZE * PAGE_SIZE)
        if start >= end:
            return
        buf = self.queue.hold(mf)
        if buf is None:
            return
        try:
            if _madvise(buffer_address(buf) + start, end - start, self.advice) != 0:
                log.info("madvise(%d) failed (errno %d: not available here, or no memory); "
                         "appends fault their own pages", self.advice, ctypes.get_errno())
                self._supported = False
                return
            self._done_upto = end
        finally:
            mf.release()

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)


def _serve(ref, wake: threading.Event) -> None:
    """The prefault thread: it takes the PrefaultAhead from `ref` only while it works."""
    while True:
        wake.wait()
        ahead = ref()
        if ahead is None or not ahead._serve_once():
            return
        del ahead
