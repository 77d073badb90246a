"""The fast path of services.reader.pull.BatchStoreReader (a pull with no tag filter whose next
records are whole, readable, in memory and within the byte limit: no loop over messages in
Python) answers exactly as core.read.store_reader.StoreReader does, takes over the common case, and
falls back to the general walk everywhere else: segment ends, blanks, the on-disk limits, the
byte limit, records not readable yet or gone."""
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
from services.reader.pull import BatchStoreReader, iter_records

SEG = 16 * 1024
CQ_SEG = 20 * 64
S = GetMessageStatus


class WalkOnly(BatchStoreReader):
    """The same reader with the fast path switched off: the reference for what it must answer."""

    def _plain_pull(self, *args, **kwargs):
        return None


def build(tmp_path, **overrides):
    """Queues 0 and 1 written in runs of 1..37 adjacent records (batches), interleaved, across
    many small segments; queue 2 gets one record in five (never adjacent)."""
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=SEG,
                      mapped_file_size_consume_queue=CQ_SEG, **overrides)
    os.makedirs(cfg.commitlog_dir)
    commitlog = CommitLog(cfg, REAL_FILE_OPS)
    commitlog.queue.load()
    i = 0
    for run in range(60):
        queue_id = run % 2
        for _ in range(1 + (run * 7) % 37):
            body = b"q%d-%05d|" % (queue_id, i) * (1 + i % 9)
            commitlog.append(commitlog.prepare(Message("T", body, queue_id=queue_id,
                                                       tags=("A", "B", None)[i % 3])))
            if i % 5 == 0:
                commitlog.append(commitlog.prepare(Message("T", b"x%d" % i, queue_id=2)))
            i += 1
    end = commitlog.get_max_offset()
    cqs = ConsumeQueueStore(cfg.consumequeue_dir, CQ_SEG, REAL_FILE_OPS)
    cqs.load()
    Dispatcher(commitlog, cqs).run(0, end)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    view.set_end(end)
    cq_view = ConsumeQueueStoreView(cfg.consumequeue_dir, CQ_SEG)
    ours = BatchStoreReader(cfg, view, cq_view, None)
    walk = WalkOnly(cfg, view, cq_view, None)
    theirs = StoreReader(cfg, commitlog, cqs, None)
    return ours, walk, theirs, end


def plain(reader, *args):
    """The fast path's answer alone (None when it declines)."""
    found = reader._plain_pull(*args)
    return found and found[0]


def answer(result) -> tuple:
    records = [bytes(r) for r in iter_records(getattr(result, "chunks", None) or [])] or \
        list(getattr(result, "buffers", []))
    return (result.status, result.next_begin_offset, result.min_offset, result.max_offset, records)


def offsets_of(reader, queue_id):
    cq = reader.cq_store.find("T", queue_id)
    return range(0, cq.get_max_offset_in_queue() + 2)


@pytest.mark.parametrize("overrides", [
    {},
    {"max_transfer_count_on_message_in_memory": 5, "max_transfer_bytes_on_message_in_memory": 700},
    {"max_transfer_bytes_on_message_in_memory": 2000},
    {"access_message_in_memory_max_ratio": 0, "max_transfer_count_on_message_in_disk": 3},
])
def test_every_pull_answers_as_the_store_reader(tmp_path, overrides):
    ours, walk, theirs, _ = build(tmp_path, **overrides)
    fast = 0
    for queue_id in (0, 1, 2):
        for offset in offsets_of(ours, queue_id):
            for max_msgs in (1, 4, 32, 1024):
                a = ours.get_message("g", "T", queue_id, offset, max_msgs, None)
                assert answer(a) == answer(theirs.get_message("g", "T", queue_id, offset, max_msgs, None)), \
                    (queue_id, offset, max_msgs)
                assert answer(a) == answer(walk.get_message("g", "T", queue_id, offset, max_msgs, None))
                cq = ours.cq_store.find("T", queue_id)
                lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
                if offset < hi and plain(ours, cq, offset, max_msgs, lo, hi) is not None:
                    fast += 1
    if overrides.get("access_message_in_memory_max_ratio") == 0:
        assert fast == 0                                 # on disk: never the fast path
    else:
        assert fast > 500                                # the common case takes it


def test_fast_path_takes_the_common_case_and_leaves_the_rest(tmp_path):
    ours, walk, _, end = build(tmp_path)
    cq = ours.cq_store.find("T", 0)
    lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
    got = plain(ours, cq, 0, 32, lo, hi)
    assert got is not None and got.status is S.FOUND and got.count == 32
    assert answer(got) == answer(walk.pull(cq, 0, 32))
    assert len(got.chunks) > 1                           # several runs (batches) in one answer
    # The entries of one consume-queue segment end at 64: a pull from 60 answers 4, as the walk.
    tail = plain(ours, cq, 60, 32, lo, hi)
    assert tail is not None and tail.count == 4 and answer(tail) == answer(walk.pull(cq, 60, 32))
    # Not readable yet (the view of the log ends early): the walk answers what is readable.
    ours.commitlog.set_end(end // 2)
    partial = [o for o in range(hi) if plain(ours, cq, o, 32, lo, hi) is None]
    assert partial
    for o in range(hi):
        assert answer(ours.pull(cq, o, 32)) == answer(walk.pull(cq, o, 32))
    ours.commitlog.set_end(end)
    # Gone (retention moved the start of the log): the walk skips what was removed.
    ours.commitlog.set_min(SEG)
    assert plain(ours, cq, 0, 32, lo, hi) is None
    for o in range(0, hi, 3):
        assert answer(ours.pull(cq, o, 32)) == answer(walk.pull(cq, o, 32))


def test_tag_filters_take_the_walk(tmp_path):
    ours, walk, theirs, _ = build(tmp_path)
    for offset in range(0, 200, 3):
        for tag_filter in ("*", "A", "B || A", "Z"):
            a = ours.get_message("g", "T", 0, offset, 32, tag_filter)
            assert answer(a) == answer(theirs.get_message("g", "T", 0, offset, 32, tag_filter))


def test_views_are_the_same_bytes_without_a_copy(tmp_path):
    ours, _, _, _ = build(tmp_path)
    cq = ours.cq_store.find("T", 1)
    copied = ours.pull(cq, 3, 32)
    viewed = ours.pull(cq, 3, 32, views=True)
    assert all(isinstance(c, memoryview) for c in viewed.chunks)
    assert all(isinstance(c, bytes) for c in copied.chunks)
    assert bytes(viewed.raw()) == copied.raw() and viewed.count == copied.count
    # A segment unmapped while a view of it is alive stays readable through the view.
    mf = ours.commitlog.queue.find_mapped_file_by_offset(0)
    data = bytes(viewed.chunks[0])
    for f in ours.commitlog.queue.files:
        f.unmap_if_idle()
    assert bytes(viewed.chunks[0]) == data and not mf.is_mapped
    viewed.chunks.clear()
