"""Read-only views (core.read.views) over files written by separate writer objects on
the same directories, as the reader and reput processes see the appender's and reput's
files: bounded reads, segments picked up as they appear, a consume queue's max offset found
by scanning and bounded by the dispatched offset, index files re-listed, nothing ever
written, created or deleted by a view."""
from __future__ import annotations

import os

import pytest

from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.log.consume_queue_store import ConsumeQueueStore
from core.log.dispatch import Dispatcher
from core.files.fileops import REAL_FILE_OPS
from core.log.index_service import IndexService
from core.record.message import Message
from core.read.store_reader import StoreReader
from core.read.views import (
    READ_ONLY_FILE_OPS, CommitLogView, ConsumeQueueStoreView, ConsumeQueueView, IndexView,
    ReadOnlyMappedFileQueue,
)
from core.status import GetMessageStatus

SEG = 16 * 1024
CQ_FILE = 20 * 50


class Writer:
    """The writing side, as the appender and reput processes hold it."""

    def __init__(self, cfg: StoreConfig):
        os.makedirs(cfg.commitlog_dir, exist_ok=True)
        self.cfg = cfg
        self.commitlog = CommitLog(cfg, REAL_FILE_OPS)
        self.commitlog.queue.load()
        self.cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue, REAL_FILE_OPS)
        self.cqs.load()
        self.index = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num, REAL_FILE_OPS)
        self.index.load(True, 0)
        self.dispatcher = Dispatcher(self.commitlog, self.cqs, self.index)
        self.dispatched = 0

    def put(self, n, topic="T", queue_id=0, tags=None, start=0):
        out = []
        for i in range(start, start + n):
            msg = Message(topic, b"body-%06d" % i * 3, queue_id=queue_id, tags=tags, keys=f"key{i}")
            out.append(self.commitlog.append(self.commitlog.prepare(msg)))
        return out

    def dispatch(self):
        end = self.commitlog.get_max_offset()
        self.dispatched, _ = self.dispatcher.run(self.dispatched, end)
        return self.dispatched


@pytest.fixture
def cfg(tmp_path):
    return StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=SEG,
                       mapped_file_size_consume_queue=CQ_FILE, max_hash_slot_num=32, max_index_num=64)


@pytest.fixture
def writer(cfg):
    return Writer(cfg)


def test_read_only_file_ops_refuse_every_change(tmp_path):
    path = str(tmp_path / "f")
    for call in (lambda: READ_ONLY_FILE_OPS.create_file(path, 4096),
                 lambda: READ_ONLY_FILE_OPS.write_file_atomic(path, b"x"),
                 lambda: READ_ONLY_FILE_OPS.unlink(path),
                 lambda: READ_ONLY_FILE_OPS.remove_leftovers(str(tmp_path)),
                 lambda: READ_ONLY_FILE_OPS.make_dirs(path)):
        with pytest.raises(PermissionError):
            call()
    assert not os.path.exists(path)
    with open(path, "wb") as f:
        f.write(bytes(4096))
    mapping = READ_ONLY_FILE_OPS.map_file(path, 4096, writable=True)
    with pytest.raises(TypeError):
        mapping.buf[0:1] = b"x"                     # PROT_READ whatever the caller asked
    mapping.close()


def test_commitlog_view_reads_only_below_its_end_and_picks_up_new_segments(cfg, writer):
    first = writer.put(5)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    assert view.read(0, first[0].wrote_bytes) is None           # end 0: nothing readable
    view.set_end(first[2].wrote_offset)
    assert view.read(first[1].wrote_offset, first[1].wrote_bytes) == writer.commitlog.read(
        first[1].wrote_offset, first[1].wrote_bytes)
    assert view.read(first[2].wrote_offset, first[2].wrote_bytes) is None
    assert view.look_record(first[2].wrote_offset) is None
    more = writer.put(400, start=5)                              # rolls over many segments
    assert len(writer.commitlog.queue.files) > 3
    assert len(view.queue.files) == 1
    end = writer.commitlog.get_max_offset()
    view.set_end(end)
    assert len(view.queue.files) == len(writer.commitlog.queue.files)
    for res in (more[0], more[200], more[-1]):
        assert view.look_record(res.wrote_offset) == writer.commitlog.look_record(res.wrote_offset)
        assert view.pickup_store_timestamp(res.wrote_offset, res.wrote_bytes) == res.store_timestamp
    assert view.get_min_offset() == 0 and view.get_max_offset() == end
    assert view.read(end, 1) is None


def test_commitlog_view_never_writes(cfg, writer):
    writer.put(3)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    view.set_end(writer.commitlog.get_max_offset())
    with pytest.raises(PermissionError):
        view.queue.flush(0)
    empty = ReadOnlyMappedFileQueue(os.path.join(cfg.store_path_root_dir, "none"), SEG)
    empty.load()
    with pytest.raises(PermissionError):
        empty.get_last_mapped_file(0, create=True)
    with pytest.raises(PermissionError):
        view.queue.truncate_dirty_files(0)


def test_dispatcher_runs_over_a_commitlog_view(cfg, writer):
    results = writer.put(300)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    end = writer.commitlog.get_max_offset()
    view.set_end(end)
    cqs = ConsumeQueueStore(str(os.path.join(cfg.store_path_root_dir, "cq2")), CQ_FILE, REAL_FILE_OPS)
    reached, stop = Dispatcher(view, cqs).run(0, end)
    assert reached == end and stop == "done"
    cq = cqs.find("T", 0)
    assert cq.get_max_offset_in_queue() == 300
    assert [cq.get_entry(i)[0] for i in (0, 150, 299)] == [results[i].wrote_offset for i in (0, 150, 299)]


def test_vanished_segment_is_forgotten(cfg, writer):
    writer.put(300)
    view = CommitLogView(cfg.commitlog_dir, SEG)
    view.set_end(writer.commitlog.get_max_offset())
    first = view.queue.files[0]
    assert not first.is_mapped
    os.unlink(first.path)                                        # retention, in another process
    assert view.read(0, 8) is None
    assert view.queue.files[0].file_from_offset == SEG
    view.set_min(SEG)
    assert view.get_min_offset() == SEG


def test_consume_queue_view_learns_its_max_by_scanning_below_dispatched(cfg, writer):
    writer.put(120)
    writer.dispatch()
    cqs = ConsumeQueueStoreView(cfg.consumequeue_dir, CQ_FILE, dispatched=lambda: writer.dispatched)
    assert cqs.find("T", 1) is None and cqs.find("U", 0) is None
    cq = cqs.find("T", 0)
    assert cq.get_max_offset_in_queue() == 120
    assert len(cq.queue.files) == 3                              # 50 entries per file
    assert cq.get_entry(119) == writer.cqs.find("T", 0).get_entry(119)
    writer.put(40, start=120)
    writer.dispatch()
    # Entries of records past what the view is told is dispatched are not trusted yet.
    assert cq.refresh_max(writer.commitlog.get_max_offset() - 1) == 159
    assert cq.refresh_max(writer.dispatched) == 160
    assert cq.get_entry(159) == writer.cqs.find("T", 0).get_entry(159)
    assert cq.get_entry(160) is None


def test_consume_queue_view_learns_its_max_from_arrivals(cfg, writer):
    writer.put(10)
    writer.dispatch()
    cq = ConsumeQueueStoreView(cfg.consumequeue_dir, CQ_FILE, dispatched=lambda: 0).find("T", 0)
    assert cq.get_max_offset_in_queue() == 0                     # nothing trusted below 0
    writer.put(60, start=10)
    writer.dispatch()
    cq.learn_max(70)
    assert cq.get_max_offset_in_queue() == 70
    assert cq.get_entries(60, 100) == writer.cqs.find("T", 0).get_entries(60, 100)
    cq.learn_max(5)                                              # never goes back
    assert cq.get_max_offset_in_queue() == 70


def test_consume_queue_view_starts_at_the_newest_segment_of_a_long_queue(cfg, writer):
    writer.put(260)
    writer.dispatch()
    cq = ConsumeQueueView("T", 0, cfg.consumequeue_dir, CQ_FILE)
    cq.load()
    assert cq._skip_full_segments(0, writer.dispatched) == 250
    assert cq.refresh_max(writer.dispatched) == 260


def test_consume_queue_view_follows_expiry(cfg, writer):
    writer.put(120)
    writer.dispatch()
    cqs = ConsumeQueueStoreView(cfg.consumequeue_dir, CQ_FILE, dispatched=lambda: writer.dispatched,
                                min_phy=lambda: min_phy)
    min_phy = 0
    cq = cqs.find("T", 0)
    assert cq.get_min_offset_in_queue() == 0
    min_phy = writer.cqs.find("T", 0).get_entry(60)[0]
    writer.cqs.find("T", 0).delete_expired_file(min_phy)         # drops the first CQ file
    cq = cqs.find("T", 0)
    assert cq.get_min_offset_in_queue() == 60
    assert cq.get_max_offset_in_queue() == 120


def test_store_reader_over_views_answers_like_over_the_writer(cfg, writer):
    writer.put(30, tags="A")
    writer.put(30, tags="B", start=30)
    writer.put(5, queue_id=1, start=60)
    writer.dispatch()
    end = writer.dispatched
    view = CommitLogView(cfg.commitlog_dir, SEG)
    view.set_end(end)
    cqs = ConsumeQueueStoreView(cfg.consumequeue_dir, CQ_FILE, dispatched=lambda: end)
    ours = StoreReader(cfg, view, cqs, IndexView(cfg.index_dir, 32, 64))
    theirs = StoreReader(cfg, writer.commitlog, writer.cqs, writer.index)
    for args in (("T", 0, 0, 32, None), ("T", 0, 10, 5, "B"), ("T", 0, 60, 5, None),
                 ("T", 0, 61, 5, None), ("T", 1, 0, 32, "A || B"), ("T", 2, 0, 1, None),
                 ("T", 0, 0, 32, "C")):
        a, b = ours.get_message("g", *args), theirs.get_message("g", *args)
        assert (a.status, a.next_begin_offset, a.min_offset, a.max_offset, a.buffers) == \
               (b.status, b.next_begin_offset, b.min_offset, b.max_offset, b.buffers), args
    assert ours.get_message("g", "T", 0, 60, 5).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    got = ours.query_message("T", "key7", 10, 0, 1 << 62).messages
    assert [m.body for m in got] == [b"body-000007" * 3]


def test_index_view_relists_files_and_leaves_the_writers_leftovers(cfg, writer):
    writer.put(10)
    writer.dispatch()
    view = IndexView(cfg.index_dir, 32, 64)
    assert [o for o in view.query_offset("T", "key3", 10, 0, 1 << 62)[0]]
    leftover = os.path.join(cfg.index_dir, "20990101000000000.tmp")
    with open(leftover, "wb") as f:
        f.write(b"in creation")
    writer.put(200, start=10)                                    # 63 entries per file: rolls
    writer.dispatch()
    assert len(writer.index.files) > 2
    offsets, _, _ = view.query_offset("T", "key150", 10, 0, 1 << 62)
    assert len(view.files) == len(writer.index.files)
    assert [writer.commitlog.look_record(o)[-40:].count(b"key150") for o in offsets] == [1]
    assert os.path.exists(leftover)
    with pytest.raises(PermissionError):
        view.load(True, 0)
    with pytest.raises(PermissionError):
        view.truncate(0)


def test_read_only_queue_tolerates_foreign_files(cfg, writer):
    writer.put(3)
    with open(os.path.join(cfg.commitlog_dir, "00000000000000999999"), "wb") as f:
        f.write(b"short")                                        # wrong size: skipped
    with open(os.path.join(cfg.commitlog_dir, "notes.txt"), "w") as f:
        f.write("x")
    queue = ReadOnlyMappedFileQueue(cfg.commitlog_dir, SEG)
    queue.load()
    assert [mf.file_from_offset for mf in queue.files] == [0]
