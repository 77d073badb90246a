"""Consume queues that cost what their data costs (issue 27): RocketMQ's file layout written
sparse with pwrite, one bounded mapping window per process, recovery from each queue's tail
only, new queue files made durable by the next flush, and a full disk as an OSError."""
from __future__ import annotations

import errno
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.log.consume_queue import BLANK_SIZE, ENTRY, TAIL_ENTRIES, UNIT_SIZE, ConsumeQueue
from core.log.consume_queue_store import SYNCFS_AT, ConsumeQueueStore
from core.files.fileops import REAL_FILE_OPS
from core.files.mapping_window import MappingWindow
from tests.crash.recording import RecordingFileOps
from tests.integration.harness import fill_disk, small_tmpfs

ROCKETMQ_CQ_FILE = 300_000 * UNIT_SIZE


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_queue_file_has_rocketmq_layout_and_takes_space_as_written(tmp_path):
    """RocketMQ's ConsumeQueue reads 20-byte entries from byte 0 of a 6,000,000-byte file
    and stops at the first zero one; the file takes one block for a handful of entries."""
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), ROCKETMQ_CQ_FILE, REAL_FILE_OPS)
    cqs.load()
    cqs.put_entries("T", 3, 0, b"".join(ENTRY.pack(1000 * i, 100 + i, i - 7) for i in range(5)), 4104)
    cqs.flush(0)
    path = tmp_path / "cq" / "T" / "3" / "00000000000000000000"
    assert path.stat().st_size == ROCKETMQ_CQ_FILE
    assert path.stat().st_blocks * 512 <= 8192            # not 6 MB: sparse
    data = path.read_bytes()
    for i in range(5):                                      # big-endian offset, size, tag code
        assert data[i * 20:(i + 1) * 20] == (1000 * i).to_bytes(8, "big") + \
            (100 + i).to_bytes(4, "big") + (i - 7).to_bytes(8, "big", signed=True)
    assert data[100:] == bytes(ROCKETMQ_CQ_FILE - 100)      # zero past the last entry
    cqs.shutdown()


def test_a_process_maps_at_most_its_window_whatever_the_number_of_queues(tmp_path):
    window = 8
    before = open_fds()
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, REAL_FILE_OPS, window_capacity=window)
    cqs.load()
    most = 0
    for q in range(300):
        cqs.put_entries(f"T{q // 4}", q % 4, 0, ENTRY.pack(q * 100, 100, 0), q * 100 + 100)
        most = max(most, cqs.window.mapped_count(), open_fds() - before)
    for q in range(300):
        assert cqs.find(f"T{q // 4}", q % 4).get_entry(0) == (q * 100, 100, 0)
        most = max(most, cqs.window.mapped_count())
    assert cqs.window.mapped_count() <= window
    assert most <= 2 * window + 2                          # 2 descriptors per writable mapping
    cqs.flush(0)
    cqs.shutdown()


def test_the_window_keeps_a_held_segment_mapped():
    class Seg:
        def __init__(self):
            self.is_mapped, self.refs = True, 0

        def unmap_if_idle(self):
            if self.refs:
                return False
            self.is_mapped = False
            return True

    w = MappingWindow(2)
    segs = [Seg() for _ in range(4)]
    segs[0].refs = 1
    for s in segs:
        w.admit(s)
    assert segs[0].is_mapped                               # held: kept though the oldest
    assert [s.is_mapped for s in segs[1:]] == [False, False, True]


def test_a_cold_queue_is_not_mapped_by_load_and_recovery(tmp_path):
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, REAL_FILE_OPS)
    cqs.load()
    for q in range(50):
        cqs.put_entries("T", q, 0, ENTRY.pack(q, 10, 0), q + 10)
    cqs.flush(0)
    cqs.shutdown()
    again = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, REAL_FILE_OPS)
    again.load()
    again.recover()
    again.correct_min_offset(0)
    assert again.window.mapped_count() == 0
    assert again.topic_queue_table() == {("T", q): 1 for q in range(50)}
    assert again.max_physic_offset() == 49 + 10
    again.shutdown()


def test_new_queue_files_are_made_durable_by_the_next_flush_not_at_creation(tmp_path):
    ops = RecordingFileOps(str(tmp_path))
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, ops)
    cqs.load()
    fsyncs = ops.dir_fsyncs
    for q in range(3):
        cqs.put_entries("New", q, 0, ENTRY.pack(q, 10, 0), q + 10)
    assert ops.dir_fsyncs == fsyncs                        # nothing on the dispatch path
    cqs.flush(0)
    assert ops.dir_fsyncs >= fsyncs + 4                    # three queue dirs and the topic's
    for q in range(3):
        image = ops.image(str(tmp_path / "cq" / "New" / str(q) / "00000000000000000000"))
        assert bytes(image.durable[:20]) == ENTRY.pack(q, 10, 0)


def test_a_flush_of_many_queues_is_one_file_system_sync(tmp_path):
    ops = RecordingFileOps(str(tmp_path))
    synced = []
    real = ops.sync_filesystem
    ops.sync_filesystem = lambda path: (synced.append(path), real(path))
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, ops)
    cqs.load()
    n = SYNCFS_AT + 10
    for q in range(n):
        cqs.put_entries(f"T{q}", 0, 0, ENTRY.pack(q, 10, 0), q + 10)
    cqs.flush(0)
    assert len(synced) == 1
    for q in range(n):
        cq = cqs.find(f"T{q}", 0)
        assert cq.queue.flushed_where == UNIT_SIZE and not cq.queue.flush_due(0)
        image = ops.image(str(tmp_path / "cq" / f"T{q}" / "0" / "00000000000000000000"))
        assert bytes(image.durable[:20]) == ENTRY.pack(q, 10, 0)
    assert not any(cq.queue.new_dirs for cq in cqs.queues.values())


def linear_reference(files: list[bytes]) -> tuple[int, int]:
    """RocketMQ's recover over the last three files: (valid bytes, end of the newest real entry)."""
    end, real_end = 0, -1
    start = max(0, len(files) - 3)
    end = start * len(files[0])
    for i in range(start, len(files)):
        data = files[i]
        count = 0
        for phys, size, _ in ENTRY.iter_unpack(data):
            if phys < 0 or size <= 0:
                break
            if size != BLANK_SIZE:
                real_end = phys + size
            count += 1
        end = i * len(data) + count * UNIT_SIZE
        if count * UNIT_SIZE < len(data):
            break
    return end, real_end


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 1200), blanks=st.integers(0, 400),
       torn=st.one_of(st.none(), st.integers(1, TAIL_ENTRIES)), torn_size=st.sampled_from([0, -1]))
def test_recovery_from_the_tail_matches_rocketmq_s_scan(tmp_path_factory, n, blanks, torn, torn_size):
    """Entries written densely from 0 (fillers first, as a queue that starts late), with
    maybe one torn entry among the last TAIL_ENTRIES: the tail-only recovery finds the same
    end and the same newest record as a scan of every entry."""
    per_file = 500
    blanks = min(blanks, n)
    entries = [ENTRY.pack(0, BLANK_SIZE, 0)] * blanks + \
        [ENTRY.pack(1000 + 50 * i, 50, i) for i in range(blanks, n)]
    if torn is not None and n:
        at = max(0, n - torn)
        entries[at] = ENTRY.pack(7, torn_size, 0)
    raw = b"".join(entries)
    step = per_file * UNIT_SIZE
    files = [raw[i:i + step] for i in range(0, max(len(raw), 1), step)] or [b""]
    files = [f + bytes(per_file * UNIT_SIZE - len(f)) for f in files]
    root = tmp_path_factory.mktemp("cq")
    qdir = root / "T" / "0"
    qdir.mkdir(parents=True)
    if n:
        for i, data in enumerate(files):
            (qdir / f"{i * per_file * UNIT_SIZE:020d}").write_bytes(data.rstrip(b"\0"))
            os.truncate(qdir / f"{i * per_file * UNIT_SIZE:020d}", per_file * UNIT_SIZE)
    cq = ConsumeQueue("T", 0, str(root), per_file * UNIT_SIZE, REAL_FILE_OPS)
    cq.load()
    cq.recover()
    end, real_end = linear_reference(files) if n else (0, -1)
    assert cq.queue.get_max_offset() == end
    assert cq.max_physic_offset == real_end
    cq.shutdown()
    left = b"".join((qdir / name).read_bytes() for name in sorted(os.listdir(qdir)))
    assert left[:end] == raw[:end] and not any(left[end:])   # what was cut is zero on disk


def test_a_full_disk_is_an_oserror_at_the_write_and_the_entry_goes_in_when_space_is_back(tmp_path):
    with small_tmpfs(tmp_path, "1m") as mnt:
        cqs = ConsumeQueueStore(str(mnt / "cq"), ROCKETMQ_CQ_FILE, REAL_FILE_OPS)
        cqs.load()
        filler = fill_disk(mnt)
        with pytest.raises(OSError) as err:
            cqs.put_entries("Fresh", 0, 0, ENTRY.pack(5, 10, 0), 15)   # no SIGBUS: a status
        assert err.value.errno == errno.ENOSPC
        cq = cqs.find("Fresh", 0)
        assert cq is None or cq.get_max_offset_in_queue() == 0
        filler.unlink()
        cqs.put_entries("Fresh", 0, 0, ENTRY.pack(5, 10, 0), 15)
        assert cqs.find("Fresh", 0).get_entry(0) == (5, 10, 0)
        cqs.flush(0)
        cqs.shutdown()


def test_an_entry_that_ends_past_the_data_s_last_block_is_kept(tmp_path):
    """Entry 204 spans bytes 4080-4100; a file whose last 8 bytes of it (a zero tag code) were
    never written ends its data at 4096, and the search took 4096 // 20 = 204 for the bound."""
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    path = qdir / ("0" * 20)
    path.write_bytes((ENTRY.pack(0, BLANK_SIZE, 0) * 204 + ENTRY.pack(5, 10, 0)).rstrip(b"\0"))
    os.truncate(path, 500 * UNIT_SIZE)
    cq = ConsumeQueue("T", 0, str(tmp_path), 500 * UNIT_SIZE, REAL_FILE_OPS)
    cq.load()
    cq.recover()
    assert cq.get_max_offset_in_queue() == 205
    assert cq.get_entry(204) == (5, 10, 0) and cq.max_physic_offset == 15
    cq.shutdown()


def test_reading_a_cold_queue_maps_nothing_and_sees_what_a_mapping_would(tmp_path):
    """A pull from a queue whose segment is not mapped reads it with pread: the window keeps
    the hot queues, and a new entry written after is read at once (the same page cache)."""
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, REAL_FILE_OPS, window_capacity=4)
    cqs.load()
    for q in range(10):
        cqs.put_entries("T", q, 0, ENTRY.pack(100 * q, 10, q), 100 * q + 10)
    cqs.flush(0)
    cqs.shutdown()
    cold = ConsumeQueueStore(str(tmp_path / "cq"), 20 * 50, REAL_FILE_OPS, window_capacity=4)
    cold.recover()
    for q in range(10):
        assert cold.find("T", q).get_entry(0) == (100 * q, 10, q)
    assert cold.window.mapped_count() == 0
    assert not any(mf.is_mapped for cq in cold.queues.values() for mf in cq.queue.files)
    cold.put_entries("T", 3, 1, ENTRY.pack(900, 5, 0), 905)       # maps queue 3 to write
    assert cold.find("T", 3).get_entries(0, 8) == ENTRY.pack(300, 10, 3) + ENTRY.pack(900, 5, 0)
    cold.shutdown()
