"""`services.reader.pull.BatchStoreReader` answers every pull exactly as core.read.store_reader's
StoreReader does (statuses, next offsets, tag filter, RocketMQ's batch limits in memory and
on disk) while copying runs of adjacent records at once."""
from __future__ import annotations

import os

import pytest

from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.log.consume_queue_store import ConsumeQueueStore
from core.log.dispatch import Dispatcher
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from core.read.store_reader import StoreReader
from core.read.views import CommitLogView, ConsumeQueueStoreView
from core.status import GetMessageStatus
from services.reader.pull import BatchStoreReader, PullBatch, iter_records

SEG = 16 * 1024
S = GetMessageStatus


def build(tmp_path, **overrides):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=SEG,
                      mapped_file_size_consume_queue=20 * 40, **overrides)
    os.makedirs(cfg.commitlog_dir)
    commitlog = CommitLog(cfg, REAL_FILE_OPS)
    commitlog.queue.load()
    tags = ["A", "B", None, "C"]
    for i in range(300):
        queue_id = 0 if i % 7 else 1                # queue 0: mostly adjacent runs
        body = b"m%05d" % i * (1 + i % 5)
        commitlog.append(commitlog.prepare(Message("T", body, queue_id=queue_id, tags=tags[i % 4])))
    end = commitlog.get_max_offset()
    cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue, REAL_FILE_OPS)
    cqs.load()
    Dispatcher(commitlog, cqs).run(0, end)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    view.set_end(end)
    ours = BatchStoreReader(cfg, view, ConsumeQueueStoreView(cfg.consumequeue_dir, 20 * 40), None)
    theirs = StoreReader(cfg, commitlog, cqs, None)
    return ours, theirs


def same(ours, theirs, *args):
    a, b = ours.get_message("g", *args), theirs.get_message("g", *args)
    records = [bytes(r) for r in iter_records(getattr(a, "chunks", []))]
    assert (a.status, a.next_begin_offset, a.min_offset, a.max_offset) == \
           (b.status, b.next_begin_offset, b.min_offset, b.max_offset), args
    assert records == b.buffers, args
    assert a.message_count == len(b.buffers)
    return a


@pytest.mark.parametrize("overrides", [
    {},
    {"max_transfer_count_on_message_in_memory": 5, "max_transfer_bytes_on_message_in_memory": 700},
    {"access_message_in_memory_max_ratio": 0, "max_transfer_count_on_message_in_disk": 3},
    {"access_message_in_memory_max_ratio": 0, "max_transfer_bytes_on_message_in_disk": 500},
    {"max_filter_message_size": 100},
])
def test_batch_reader_matches_store_reader(tmp_path, overrides):
    ours, theirs = build(tmp_path, **overrides)
    for queue_id in (0, 1, 2):
        for offset in (0, 1, 13, 40, 41, 42, 99, 200, 256, 257, 300):
            for max_msgs in (1, 7, 32, 1024):
                for tag_filter in (None, "*", "A", "B || C", "Z"):
                    same(ours, theirs, "T", queue_id, offset, max_msgs, tag_filter)
    same(ours, theirs, "U", 0, 0, 32, None)


def test_adjacent_records_are_copied_as_one_run(tmp_path):
    ours, _ = build(tmp_path, max_transfer_count_on_message_in_memory=1024,
                    max_transfer_bytes_on_message_in_memory=1 << 20)
    result = ours.get_message("g", "T", 0, 0, 6, None)
    assert isinstance(result, PullBatch) and result.status is S.FOUND
    assert result.count == 6 and len(result.chunks) == 1           # messages 1..6 lie back to back
    assert result.raw() == result.chunks[0]
    assert [m.body for m in result.messages] == [b"m%05d" % i * (1 + i % 5) for i in range(1, 7)]


def test_records_gone_from_the_log_are_message_was_removing(tmp_path):
    ours, _ = build(tmp_path)
    ours.commitlog.set_min(SEG)                                     # retention moved the start
    first = ours.get_message("g", "T", 0, 0, 4, None)
    assert first.status is S.MESSAGE_WAS_REMOVING and first.count == 0
    later = ours.get_message("g", "T", 0, 250, 4, None)
    assert later.status is S.FOUND
