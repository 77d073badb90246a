"""services.appender.startup: a restarting appender positions the segments from WROTE, zeroes
what lies past it, re-validates [DISPATCHED, WROTE) and finds the consume queues' max offsets
without writing anything."""
from __future__ import annotations

import os

import pytest

from core.log.commitlog import CommitLog
from core.log.consume_queue_store import ConsumeQueueStore
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from services.appender import startup


def write_log(config, count, topic="T", queues=2):
    log = CommitLog(config, REAL_FILE_OPS)
    log.queue.load()
    ends = []
    for i in range(count):
        rec = log.prepare(Message(topic, bytes([i % 256]) * 700, i % queues, born_timestamp=1))
        ends.append(log.append(rec).next_offset)
    end = log.queue.get_max_wrote_position()
    log.shutdown()
    return end, ends


def reopen(config, wrote):
    log = CommitLog(config, REAL_FILE_OPS)
    ahead = startup.open_segments(log.queue, wrote)
    return log, ahead


def test_positions_from_wrote_and_revalidation(tiny_config):
    config = tiny_config()
    end, ends = write_log(config, 60)
    assert len(os.listdir(config.commitlog_dir)) > 2            # it rolled
    log, ahead = reopen(config, end)
    assert ahead == [] and log.queue.get_max_wrote_position() == end
    assert all(mf.is_full for mf in log.queue.files[:-1])
    seen = startup.revalidate(log.queue, None, 0, end)
    assert seen == {("T", 0): 30, ("T", 1): 30}
    assert startup.revalidate(log.queue, None, ends[40], end) == {("T", 0): 30, ("T", 1): 30}
    assert startup.revalidate(log.queue, None, end, end) == {}
    log.shutdown()


def test_bytes_past_wrote_are_zeroed_and_later_segments_too(tiny_config):
    config = tiny_config()
    end, ends = write_log(config, 30)
    wrote = ends[20]                       # the last 9 records were never acknowledged
    size = config.mapped_file_size_commitlog
    ahead_name = os.path.join(config.commitlog_dir, f"{(end // size + 1) * size:020d}")
    REAL_FILE_OPS.create_file(ahead_name, size)
    with open(ahead_name, "r+b") as f:
        f.write(b"junk")
    log, ahead = reopen(config, wrote)
    assert [mf.path for mf in ahead] == [ahead_name]
    startup.zero_past_wrote(log.queue, ahead, wrote)
    last = log.queue.files[-1]
    with open(last.path, "rb") as f:
        data = f.read()
    assert data[last.wrote_position:] == bytes(size - last.wrote_position)
    assert data[:last.wrote_position] != bytes(last.wrote_position)
    with open(ahead_name, "rb") as f:
        assert f.read() == bytes(size)
    assert startup.revalidate(log.queue, None, 0, wrote) == {("T", 0): 11, ("T", 1): 10}
    log.shutdown()


def test_damage_below_wrote_is_refused(tiny_config):
    config = tiny_config()
    end, ends = write_log(config, 5)
    path = os.path.join(config.commitlog_dir, "0" * 20)
    with open(path, "r+b") as f:
        f.seek(ends[2] - 10)                  # inside the body of the third record
        f.write(b"\xff" * 4)
    log, _ = reopen(config, end)
    with pytest.raises(startup.LogDamaged):
        startup.revalidate(log.queue, None, 0, end)
    with pytest.raises(startup.LogDamaged):
        reopen(config, end + 10 * config.mapped_file_size_commitlog)
    log.shutdown()


def test_consume_queue_max_offsets_read_only(tiny_config):
    config = tiny_config()                    # 50 entries per consume-queue file
    store = ConsumeQueueStore(config.consumequeue_dir, config.mapped_file_size_consume_queue,
                              REAL_FILE_OPS)
    for i in range(120):
        store.find_or_create("A", 0).put_message_position_info(i * 100, 100, 0, i)
    for i in range(50):
        store.find_or_create("B", 3).put_message_position_info(i * 100, 100, 0, i)
    store.find_or_create("C", 0).put_message_position_info(0, 100, 0, 7)   # starts late: fillers
    store.flush(0)
    store.shutdown()
    qdir = os.path.join(config.consumequeue_dir, "B", "3")
    REAL_FILE_OPS.create_file(os.path.join(qdir, f"{50 * 20:020d}"), config.mapped_file_size_consume_queue)
    stamps = {p: os.stat(p).st_mtime_ns for p in _files(config.consumequeue_dir)}
    got = startup.consume_queue_max_offsets(config.consumequeue_dir, config.mapped_file_size_consume_queue)
    assert got == {("A", 0): 120, ("B", 3): 50, ("C", 0): 8}
    assert {p: os.stat(p).st_mtime_ns for p in _files(config.consumequeue_dir)} == stamps
    assert startup.topic_queue_table(got, {("A", 0): 125, ("B", 3): 10, ("D", 1): 1}) == \
        {("A", 0): 125, ("B", 3): 50, ("C", 0): 8, ("D", 1): 1}
    assert startup.consume_queue_max_offsets(str(config.consumequeue_dir) + "-none", 1000) == {}


def _files(root):
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names]
