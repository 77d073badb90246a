"""`core.files.prefault.PrefaultAhead`: keeps the segment being written prefaulted ahead of the
write position, from its own thread, without changing a byte; and the CommitLog starts it for
real mappings only."""
from __future__ import annotations

import os
import time

from core.log.commitlog import CommitLog
from core.record.decode import decode_message
from core.files.fileops import MADV_POPULATE_READ, MADV_POPULATE_WRITE, PAGE_SIZE, REAL_FILE_OPS
from core.files.mapped_file_queue import MappedFileQueue
from core.record.message import Message
from core.files.prefault import PrefaultAhead

SEGMENT = 4 << 20


def _wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_keeps_the_range_ahead_prefaulted_and_leaves_the_bytes_alone(tmp_path):
    queue = MappedFileQueue(str(tmp_path / "log"), SEGMENT, REAL_FILE_OPS)
    mf = queue.get_last_mapped_file(0, create=True)
    buf = queue.hold(mf)
    pattern = bytes(range(256)) * 64
    for off in range(0, SEGMENT, len(pattern) * 3):
        buf[off:off + len(pattern)] = pattern
    before = bytes(buf)
    pf = PrefaultAhead(queue, ahead=1 << 20)
    try:
        pf.wrote(mf, 5000)
        _wait_for(lambda: pf._done_upto >= 1 << 20)
        assert pf._supported and pf._done_upto % PAGE_SIZE == 0
        pf.wrote(mf, 3 << 20)                             # far past: fills up to the end
        _wait_for(lambda: pf._done_upto == SEGMENT)
        assert bytes(buf) == before
    finally:
        pf.close()
        mf.release()
        queue.shutdown()
    assert not pf._thread.is_alive()


def _dirtied_by_prefault(tmp_path, sync_flush: bool) -> int:
    """Bytes of page cache the prefault thread dirtied (Linux charges write_bytes to a process
    when it dirties a page) while it prefaulted 2 MiB past 4 KiB of data; all of them would be
    written back by the next fdatasync."""
    queue = MappedFileQueue(str(tmp_path / f"log{int(sync_flush)}"), SEGMENT, REAL_FILE_OPS)
    mf = queue.get_last_mapped_file(0, create=True)
    buf = queue.hold(mf)
    pf = PrefaultAhead(queue, ahead=2 << 20, sync_flush=sync_flush)
    try:
        buf[0:PAGE_SIZE] = b"\x07" * PAGE_SIZE
        before = _write_bytes()
        pf.wrote(mf, PAGE_SIZE)
        _wait_for(lambda: pf._done_upto >= 2 << 20)
        return _write_bytes() - before
    finally:
        pf.close()
        mf.release()
        queue.shutdown()


def _write_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("write_bytes"))


def test_sync_flush_prefaults_without_dirtying_what_a_group_commit_writes(tmp_path):
    """Under SYNC_FLUSH the pages ahead are populated clean, so the fdatasync of a group commit
    writes the records, not the zero pages the thread prefaulted past them."""
    assert _dirtied_by_prefault(tmp_path, sync_flush=False) >= 1 << 20     # ASYNC: dirtied ahead
    assert _dirtied_by_prefault(tmp_path, sync_flush=True) < 256 << 10


def test_commitlog_prefaults_real_segments_and_appends_stay_intact(tiny_config):
    log = CommitLog(tiny_config(), REAL_FILE_OPS)
    log.queue.load()
    results = [log.append(log.prepare(Message("T", b"%03d" % i * 100, queue_id=0)))
               for i in range(200)]
    assert log._prefault is not None and log._prefault.advice == MADV_POPULATE_WRITE
    for i, r in enumerate(results):
        assert decode_message(log.read(r.wrote_offset, r.wrote_bytes)).body == b"%03d" % i * 100
    log.shutdown()
    assert log._prefault is None


def test_a_sync_flush_commitlog_prefaults_clean_pages(tiny_config):
    log = CommitLog(tiny_config(flush_disk_type="SYNC_FLUSH"), REAL_FILE_OPS)
    log.queue.load()
    log.append(log.prepare(Message("T", b"x")))
    assert log._prefault.advice == MADV_POPULATE_READ
    log.shutdown()
