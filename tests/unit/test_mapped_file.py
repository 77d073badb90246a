"""`MappedFile`: RocketMQ's MappedFileTest (append, read back, shut down while a reader holds
the segment, destroy after release), the three positions, the least-pages rule of flush and
commit, the transient write buffer, durable zeroing and end of life."""
from __future__ import annotations

import os

import pytest

from core.files.fileops import PAGE_SIZE, REAL_FILE_OPS
from core.files.mapped_file import MappedFile, offset_to_file_name

SIZE = 64 * 1024
TEXT = b"RocketMQ-store-mapped-file-32-by"        # 32 bytes


@pytest.fixture
def new_file(tmp_path):
    def make(offset=0, size=SIZE):
        path = str(tmp_path / offset_to_file_name(offset))
        REAL_FILE_OPS.create_file(path, size)
        return MappedFile(path, size, REAL_FILE_OPS)
    return make


def test_file_name_is_the_20_digit_start_offset(new_file):
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    mf = new_file(offset=131072)
    assert mf.file_name == "00000000000000131072"
    assert mf.file_from_offset == 131072
    assert os.path.getsize(mf.path) == SIZE


def test_select_mapped_buffer(new_file):
    """MappedFileTest.testSelectMappedBuffer."""
    mf = new_file()
    assert len(TEXT) == 32
    assert mf.append_bytes(TEXT)
    assert mf.wrote_position == 32
    assert mf.read(0, 32) == TEXT
    held = mf.hold()                                   # a reader holds the segment
    assert held is not None
    mf.shutdown()
    assert not mf.available
    assert mf.hold() is None                          # no new readers once shut down
    assert mf.read(0, 32) is None
    assert bytes(held[0:32]) == TEXT                  # the holder still reads its mapping
    assert not mf.destroy()                           # still held: cleanup is not over
    assert os.path.exists(mf.path)
    mf.release()
    assert mf.destroy()
    assert not os.path.exists(mf.path)
    assert not mf.is_mapped


def test_positions_and_full(new_file):
    mf = new_file(size=4096)
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (0, 0, 0)
    assert mf.append_bytes(b"x" * 4000)
    assert not mf.append_bytes(b"y" * 97)             # does not fit: nothing written
    assert mf.wrote_position == 4000
    assert mf.append_bytes(b"y" * 96)
    assert mf.is_full and mf.wrote_position == 4096
    assert mf.read_position == 4096
    mf.set_positions(100)
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (100, 100, 100)


def test_read_refuses_unreadable_ranges(new_file):
    mf = new_file()
    mf.append_bytes(b"abc")
    assert mf.read(0, 3) == b"abc"
    assert mf.read(1, 2) == b"bc"
    assert mf.read(0, 4) is None                      # past the read position
    assert mf.read(-1, 2) is None
    assert mf.read(0, -1) is None
    assert mf.read(3, 0) == b""


def test_flush_with_least_pages(new_file):
    mf = new_file()
    mf.append_bytes(b"a" * 100)
    assert mf.flush(1) == 0                            # less than a page dirty
    assert mf.flush(0) == 100
    mf.append_bytes(b"b" * (PAGE_SIZE * 2))
    assert mf.flush(3) == 100                          # two pages, three wanted
    assert mf.flush(2) == 100 + PAGE_SIZE * 2
    assert mf.flush(0) == 100 + PAGE_SIZE * 2          # nothing new


def test_full_file_flushes_whatever_least_pages_says(new_file):
    mf = new_file(size=4096)
    mf.append_bytes(b"z" * 4096)
    assert mf.flush(100) == 4096


def test_flushed_bytes_are_on_disk(new_file):
    mf = new_file()
    mf.append_bytes(TEXT)
    mf.flush(0)
    with open(mf.path, "rb") as f:
        assert f.read(32) == TEXT


def test_transient_write_buffer_commit(new_file):
    mf = new_file(size=8192)
    mf.write_buffer = bytearray(8192)
    assert mf.append_bytes(b"q" * 5000)
    assert mf.read_position == 0                       # readers see committed bytes only
    assert mf.read(0, 10) is None
    assert mf.flush(0) == 0                            # nothing committed, nothing to flush
    with open(mf.path, "rb") as f:
        assert f.read(10) == bytes(10)                 # the file has nothing yet
    assert mf.commit(2) == 0                           # one page, two wanted
    assert mf.commit(1) == 5000
    assert mf.read_position == 5000
    assert mf.read(0, 5000) == b"q" * 5000
    assert mf.flush(0) == 5000
    with open(mf.path, "rb") as f:
        assert f.read(5000) == b"q" * 5000


def test_commit_without_write_buffer_follows_wrote(new_file):
    mf = new_file()
    mf.append_bytes(b"x" * 10)
    assert mf.commit(4) == 10
    assert mf.committed_position == 10


def test_zero_is_durable(new_file):
    mf = new_file(size=8192)
    mf.append_bytes(b"\xff" * 8192)
    mf.flush(0)
    mf.zero(100, 8192)
    assert mf.read(0, 100) == b"\xff" * 100
    assert mf.read(100, 8092) == bytes(8092)
    with open(mf.path, "rb") as f:
        data = f.read()
    assert data[:100] == b"\xff" * 100 and data[100:] == bytes(8092)


def _covered(ranges) -> int:
    return sum(b - a for a, b in ranges)


def test_zero_of_a_never_written_tail_reads_none_of_it(new_file):
    """Zeroing the fallocated, never-written tail of a segment (what recovery and appender
    startup do past the end of the log) must not read it through the mapping: that faults in
    a page cache page per 4 KiB, seconds for the tail of a 1 GiB segment. The file system
    reports holes coarsely (a write fault reads ahead around itself, and those pages count as
    data), so the test asks only that most of a large tail stays a hole."""
    size = 64 << 20
    mf = new_file(size=size)
    mf.append_bytes(b"\xee" * 5000)
    mapping = mf.mapping
    before = mapping.data_ranges(0, size)
    assert before and before[0][0] == 0 and before[0][1] >= 5000     # the bytes written
    assert _covered(before) < size // 2
    mf.zero(100, size)
    assert mf.read(0, 100) == b"\xee" * 100 and mf.read(100, 4900) == bytes(4900)
    assert _covered(mapping.data_ranges(0, size)) < size // 2
    with open(mf.path, "rb") as f:
        assert f.read(8192) == b"\xee" * 100 + bytes(8092)


def test_data_ranges_cover_what_was_written_and_skip_far_holes(new_file):
    size = 64 << 20
    mf = new_file(size=size)
    buf = mf.hold()
    try:
        buf[40 << 20:(40 << 20) + 10] = b"x" * 10
    finally:
        mf.release()
    ranges = mf.mapping.data_ranges(0, size)
    assert any(a <= 40 << 20 and (40 << 20) + 10 <= b for a, b in ranges)
    assert mf.mapping.data_ranges(0, 16 << 20) == []
    inside = mf.mapping.data_ranges((40 << 20) + 5, (40 << 20) + 7)
    assert inside == [((40 << 20) + 5, (40 << 20) + 7)]


def test_zero_also_clears_the_write_buffer(new_file):
    mf = new_file(size=4096)
    mf.write_buffer = bytearray(b"\x07" * 4096)
    mf.zero(10, 4096)
    assert mf.write_buffer[:10] == b"\x07" * 10
    assert mf.write_buffer[10:] == bytes(4086)


def test_unmap_only_when_idle(new_file):
    mf = new_file()
    assert not mf.is_mapped
    mf.hold()
    assert mf.is_mapped and mf.refs == 1
    assert not mf.unmap_if_idle()
    mf.release()
    assert mf.unmap_if_idle()
    assert not mf.is_mapped
    mf.append_bytes(b"again")                          # maps again on demand
    assert mf.read(0, 5) == b"again"


def test_append_to_an_unmapped_file_maps_it(new_file):
    mf = new_file()
    assert not mf.is_mapped
    assert mf.append_bytes(TEXT)
    assert mf.read(0, 32) == TEXT
    assert mf.refs == 0


def test_destroy_twice_and_missing_file(new_file):
    mf = new_file()
    assert mf.destroy()
    assert mf.destroy()                                # already gone is fine
    assert mf.last_modified() == 0.0
