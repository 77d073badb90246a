"""`core.files.cache_window`: page table entries zapped and cached pages dropped below the window,
the window itself and the data kept, pages another mapping still holds dropped on a later
step, and nothing done with the window at 0. Residency is read with mincore(2)."""
from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from core.files.cache_window import STEP, DropBehind, UnmapBehind
from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import offset_to_file_name
from core.files.mapped_file_queue import MappedFileQueue

MiB = 1 << 20
SEGMENT = 16 * MiB
WINDOW = 8 * MiB
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)


def resident_pages(path: str, lo: int, hi: int) -> int:
    """How many pages of [lo, hi) of the file are in the page cache (a mapping of our own,
    which touches nothing)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, hi - lo, mmap.PROT_READ, mmap.MAP_SHARED, fd, lo)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = ctypes.create_string_buffer((hi - lo) // PAGE)
            assert _libc.mincore(addr, hi - lo, vec) == 0, ctypes.get_errno()
            return sum(b & 1 for b in vec.raw)
        finally:
            _libc.munmap(addr, hi - lo)
    finally:
        os.close(fd)


@pytest.fixture
def written(tmp_path):
    """A CommitLog-like queue of 16 MiB segments with 40 MiB written through its mappings
    and made durable; (queue, data)."""
    queue = MappedFileQueue(str(tmp_path / "commitlog"), SEGMENT, REAL_FILE_OPS)
    data = os.urandom(MiB)
    for i in range(40):
        mf = queue.get_last_mapped_file(i * MiB, create=True)
        assert mf.append_bytes(data)
    while queue.flushed_where < 40 * MiB:           # one segment a call, as RocketMQ's
        queue.flush(0)
    yield queue, data
    queue.shutdown()


def segment_path(queue, start: int) -> str:
    return os.path.join(queue.store_path, offset_to_file_name(start))


def test_below_the_window_is_unmapped_and_dropped_the_window_stays(written):
    queue, data = written
    unmap, drop = UnmapBehind(queue, WINDOW), DropBehind(queue.store_path, SEGMENT, WINDOW, 0)
    unmap.advance(0)                               # the position the process started at
    unmap.advance(40 * MiB)
    drop.advance(40 * MiB)
    assert unmap.done == drop.done == 32 * MiB
    assert resident_pages(segment_path(queue, 0), 0, SEGMENT) == 0
    assert resident_pages(segment_path(queue, SEGMENT), 0, SEGMENT) == 0
    tail = segment_path(queue, 2 * SEGMENT)
    assert resident_pages(tail, 0, 8 * MiB) == 8 * MiB // PAGE      # the window, kept
    for i in (0, 17, 39):                          # the data is all there, read back from disk
        assert queue.read(i * MiB, MiB) == data


def test_a_page_still_mapped_elsewhere_is_dropped_on_a_later_step(written):
    queue, _ = written
    drop = DropBehind(queue.store_path, SEGMENT, WINDOW, 0)
    drop.advance(24 * MiB)                          # the queue's own mapping still maps it all
    assert resident_pages(segment_path(queue, 0), 0, 16 * MiB) == 16 * MiB // PAGE
    unmap = UnmapBehind(queue, WINDOW)
    unmap.advance(0)
    unmap.advance(40 * MiB)
    drop.advance(24 * MiB + STEP)                   # again over the last `retry` bytes
    assert resident_pages(segment_path(queue, 0), 0, 16 * MiB) == 0


def test_window_zero_leaves_the_page_cache_to_the_kernel(written):
    queue, _ = written
    unmap, drop = UnmapBehind(queue, 0), DropBehind(queue.store_path, SEGMENT, 0, 0)
    unmap.advance(0)
    unmap.advance(40 * MiB)
    drop.advance(40 * MiB)
    assert resident_pages(segment_path(queue, 0), 0, SEGMENT) == SEGMENT // PAGE


def test_steps_are_whole_and_a_deleted_segment_is_skipped(written):
    queue, _ = written
    drop = DropBehind(queue.store_path, SEGMENT, WINDOW, 0)
    drop.advance(WINDOW + STEP - 1)                 # less than a step past the window
    assert drop.done == 0
    os.unlink(segment_path(queue, 0))               # retention removed the first segment
    drop.advance(40 * MiB)
    assert drop.done == 32 * MiB
