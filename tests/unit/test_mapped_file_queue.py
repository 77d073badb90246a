"""`MappedFileQueue`: RocketMQ's MappedFileQueueTest with its numbers (reference 13.5), plus
loading, durable truncation, commit through write buffers and the bounded mapping window."""
from __future__ import annotations

import os
import struct
import time

import pytest

from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import offset_to_file_name
from core.files.mapped_file_queue import MappedFileQueue, StoreLoadError

FIXED = b"0123456789abcdef"                       # 16 bytes, RocketMQ's "fixedMsg"


@pytest.fixture
def make_queue(tmp_path):
    def make(size=1024, sub="q", **kw):
        return MappedFileQueue(str(tmp_path / sub), size, REAL_FILE_OPS, **kw)
    return make


def append(queue, data, start=0):
    mf = queue.get_last_mapped_file(start, create=True)
    assert mf is not None
    return mf.append_bytes(data)


def fill(queue, data, times, start=0):
    for _ in range(times):
        assert append(queue, data, start)


def test_get_last_mapped_file(make_queue):
    q = make_queue()
    for _ in range(1024):
        assert append(q, FIXED)
    assert len(q.files) == 16
    assert [mf.file_from_offset for mf in q.files] == [1024 * i for i in range(16)]
    assert q.files[0].first_create_in_queue and not q.files[1].first_create_in_queue
    assert q.get_max_offset() == 1024 * 16
    assert q.get_last_mapped_file() is q.files[-1]


def test_find_mapped_file_by_offset(make_queue):
    q = make_queue()
    fill(q, b"abcd", 1024)
    assert q.mapped_memory_size() == 4096
    for offset, start in ((0, 0), (100, 0), (1024, 1024), (1124, 1024), (2048, 2048), (2148, 2048),
                          (3072, 3072), (4095, 3072)):
        assert q.find_mapped_file_by_offset(offset).file_from_offset == start
    assert q.find_mapped_file_by_offset(4096) is None
    assert q.find_mapped_file_by_offset(4196) is None
    assert q.find_mapped_file_by_offset(4096, True) is q.files[0]


def test_find_mapped_file_by_offset_start_offset_is_non_zero(make_queue):
    q = make_queue()
    assert append(q, FIXED, start=1024)
    assert q.files[0].file_from_offset == 1024
    assert q.find_mapped_file_by_offset(1025).file_from_offset == 1024
    assert q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(123) is None
    assert q.find_mapped_file_by_offset(0, True).file_from_offset == 1024
    assert q.find_mapped_file_by_offset(123, True).file_from_offset == 1024
    assert q.get_min_offset() == 1024


def test_find_mapped_file_by_iteration(make_queue):
    q = make_queue()
    fill(q, FIXED, 3 * 64)
    assert len(q.files) == 3
    assert q.find_mapped_file_by_offset(1028).file_from_offset == 1024
    q.files[1], q.files[2] = q.files[2], q.files[1]
    assert q.find_mapped_file_by_offset(1028).file_from_offset == 1024   # fallback scan


def test_flush_advances_one_file_per_call(make_queue):
    """MappedFileQueueTest.testAppendMessage."""
    q = make_queue()
    fill(q, FIXED, 1024)
    for i in range(1, 7):
        assert q.flush(0) is False                    # something was flushed
        assert q.flushed_where == 1024 * i
    while not q.flush(0):
        pass
    assert q.flushed_where == 1024 * 16
    assert q.flush(0) is True                         # nothing left


def test_flush_least_pages_on_a_growing_file(make_queue):
    q = make_queue(size=4096 * 4)
    fill(q, b"x" * 1000, 3)
    assert q.flush(1) is True                         # under a page
    assert q.flushed_where == 0
    assert q.flush(0) is False
    assert q.flushed_where == 3000


def test_get_mapped_memory_size(make_queue):
    q = make_queue()
    fill(q, b"abcd", 1024)
    assert q.mapped_memory_size() == 4096


def write_cq_units(q, count, size):
    """`count` 20-byte consume-queue-like units whose first long is their index."""
    for i in range(count):
        assert append(q, struct.pack(">qiq", i, size, 0))


def test_delete_expired_file_by_offset(make_queue):
    q = make_queue(size=5120)
    write_cq_units(q, 2048, 20)
    assert len(q.files) == 8
    first = q.files[0]
    assert first.hold() is not None                   # a reader holds the first file
    assert q.delete_expired_file_by_offset(20480, 20) == 0
    assert os.path.exists(first.path)
    first.release()
    deleted = q.delete_expired_file_by_offset(20480, 20)
    assert deleted > 0
    assert q.files[0].file_from_offset > 0
    assert not os.path.exists(first.path)


def test_delete_expired_file_by_offset_stops_at_a_live_file(make_queue):
    q = make_queue(size=5120)
    write_cq_units(q, 2048, 20)                       # file k holds 256k .. 256k+255
    assert q.delete_expired_file_by_offset(600, 20) == 2          # files 0 and 1 end below 600
    assert q.files[0].file_from_offset == 2 * 5120
    assert q.delete_expired_file_by_offset(10 ** 9, 20) == 5      # never the last file
    assert len(q.files) == 1


def test_delete_expired_file_by_time(make_queue):
    q = make_queue()
    fill(q, b"x" * 512, 100)
    assert len(q.files) == 50
    old = time.time() - 200
    for i in list(range(0, 5)) + list(range(21, 50)):
        os.utime(q.files[i].path, (old, old))
    assert q.delete_expired_file_by_time(100 * 1000, 0, False) == 5
    assert len(q.files) == 45                         # only the leading run goes
    assert q.files[0].file_from_offset == 5 * 1024


def test_delete_expired_file_by_time_batch_max_and_clean_immediately(make_queue):
    q = make_queue()
    fill(q, b"x" * 512, 60)
    assert len(q.files) == 30
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, 0, False) == 0     # all young
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, 0, True) == 10     # at most 10 a call
    assert q.delete_expired_file_by_time(72 * 3600 * 1000, 0, True, batch_max=100) == 19
    assert len(q.files) == 1                          # never the last file


def test_delete_expired_file_by_time_stops_at_a_held_file(make_queue):
    q = make_queue()
    fill(q, b"x" * 512, 10)
    held = q.files[2]
    held.hold()
    try:
        assert q.delete_expired_file_by_time(0, 0, True) == 2
        assert q.files[0] is held
    finally:
        held.release()


def test_truncate_to_zero_keeps_one_empty_file(make_queue):
    """MappedFileQueueTest.testReset (resetOffset(0))."""
    q = make_queue(size=64)
    fill(q, FIXED, 8)
    assert len(q.files) == 2
    q.truncate_dirty_files(0)
    assert len(q.files) == 1
    assert q.get_max_offset() == 0
    assert q.files[0].wrote_position == 0
    assert os.listdir(q.store_path) == [offset_to_file_name(0)]


def test_truncate_inside_a_file_zeroes_the_rest_durably(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 8)
    for _ in range(2):
        q.flush(0)
    q.truncate_dirty_files(40)
    assert [mf.file_from_offset for mf in q.files] == [0]
    assert q.get_max_offset() == 40
    assert q.flushed_where == 40                           # pulled back to the cut
    with open(q.files[0].path, "rb") as f:
        data = f.read()
    assert data[:40] == (FIXED * 3)[:40]
    assert data[40:] == bytes(24)
    assert not os.path.exists(os.path.join(q.store_path, offset_to_file_name(64)))
    assert append(q, b"next")                          # appends continue at the cut
    assert q.read(40, 4) == b"next"


def test_truncate_at_a_file_boundary(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 12)                                # 3 files, the last half full
    q.truncate_dirty_files(64)
    assert [mf.file_from_offset for mf in q.files] == [0, 64]
    assert q.files[1].wrote_position == 0
    assert q.get_max_offset() == 64


def test_load_sets_positions_to_file_size(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 6)
    q.shutdown()
    q2 = make_queue(size=64)
    q2.load()
    assert [mf.file_from_offset for mf in q2.files] == [0, 64]
    assert all(mf.wrote_position == 64 == mf.flushed_position for mf in q2.files)
    assert q2.read(64, 16) == FIXED


def test_load_removes_tmp_leftovers_and_an_empty_last_file(make_queue, tmp_path):
    q = make_queue(size=64)
    fill(q, FIXED, 4)
    d = q.store_path
    open(os.path.join(d, offset_to_file_name(64) + ".tmp"), "wb").close()
    open(os.path.join(d, offset_to_file_name(64)), "wb").close()       # zero-length last file
    q2 = make_queue(size=64)
    q2.load()
    assert [mf.file_from_offset for mf in q2.files] == [0]
    assert sorted(os.listdir(d)) == [offset_to_file_name(0)]


def test_load_refuses_a_file_of_another_size(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 8)
    with open(q.files[0].path, "ab") as f:
        f.write(b"extra")
    with pytest.raises(StoreLoadError, match="64 bytes"):
        make_queue(size=64).load()


def test_load_ignores_foreign_names(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 4)
    os.mkdir(os.path.join(q.store_path, "12345"))
    open(os.path.join(q.store_path, "notes.txt"), "w").close()
    q2 = make_queue(size=64)
    q2.load()
    assert len(q2.files) == 1


def test_empty_queue(make_queue):
    q = make_queue()
    assert q.get_first_mapped_file() is None
    assert q.get_last_mapped_file() is None
    assert q.get_min_offset() == -1
    assert q.get_max_offset() == 0
    assert q.find_mapped_file_by_offset(0) is None
    assert q.flush(0) is True
    assert q.read(0, 1) is None


def test_read_never_crosses_a_file(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 8)
    assert q.read(48, 16) == FIXED
    assert q.read(56, 16) is None
    assert q.read(64, 16) == FIXED


def test_commit_with_write_buffers(make_queue):
    q = make_queue(size=4096)
    mf = q.get_last_mapped_file(0, create=True)
    mf.write_buffer = bytearray(4096)
    mf.append_bytes(b"w" * 4096)
    q.get_last_mapped_file(0, create=True).append_bytes(b"v" * 10)
    assert q.get_max_offset() == 4096 + 10                 # the new file has no buffer
    assert q.read(0, 4) is None                            # nothing of file 0 committed yet
    assert q.commit(0) is False
    assert q.committed_where == 4096
    assert q.read(0, 4) == b"wwww"
    assert q.commit(0) is False
    assert q.committed_where == 4106
    assert q.commit(0) is True


def test_mapping_window_is_bounded(make_queue):
    q = make_queue(size=1024, max_mapped=4)
    fill(q, FIXED, 64 * 12)
    for mf in q.files:
        assert q.read(mf.file_from_offset, 16) == FIXED
    mapped = [mf for mf in q.files if mf.is_mapped]
    assert len(mapped) <= 4
    assert all(mf.refs == 0 for mf in q.files)


def test_destroy(make_queue):
    q = make_queue(size=64)
    fill(q, FIXED, 8)
    d = q.store_path
    q.destroy()
    assert q.files == [] and os.listdir(d) == []
    assert q.flushed_where == 0
