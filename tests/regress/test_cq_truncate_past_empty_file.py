"""Regression: `ConsumeQueue.truncate_dirty_logic_files` stopped at an empty last segment.

Scanning from the newest segment back, a segment without entries ended the scan, so the
entries before it that point past the cut were kept. An empty last consume-queue segment is
what a crash leaves when the queue had just rolled and the new segment was never flushed;
recovery then left consume-queue entries pointing past the recovered CommitLog end.
"""
import os

from core.log.consume_queue import ConsumeQueue
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message


def test_truncate_looks_past_an_empty_last_file(tmp_path):
    cq = ConsumeQueue("T", 0, str(tmp_path), 20 * 50, REAL_FILE_OPS)
    cq.load()
    for i in range(60):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.truncate_dirty_logic_files(5000)                # cut exactly at a file start
    assert cq.get_max_offset_in_queue() == 50
    assert cq.queue.files[-1].wrote_position == 0      # the empty file stays
    cq.truncate_dirty_logic_files(2000)
    assert cq.get_max_offset_in_queue() == 20
    assert cq.max_physic_offset == 2000


def test_recovery_with_an_unflushed_new_cq_file(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)
    offsets = []
    for i in range(51):                                # 50 fill the first CQ file, 1 more rolls
        r = store.put_message(Message("T", b"m%03d" % i))
        assert r.ok
        offsets.append(r.append_result.wrote_offset)
    assert store.wait_for_dispatch()
    store.shutdown()
    cq_dir = os.path.join(cfg.consumequeue_dir, "T", "0")
    with open(os.path.join(cq_dir, "00000000000000001000"), "r+b") as f:
        f.write(bytes(1000))                           # the new CQ file never reached the disk
    with open(os.path.join(cfg.commitlog_dir, "00000000000000000000"), "r+b") as f:
        f.seek(offsets[40])
        f.write(bytes(16384 - offsets[40]))            # the CommitLog ends after 40 records
    open(cfg.abort_path, "w").close()
    store2 = open_store(cfg)
    assert store2.get_max_phy_offset() == offsets[40]
    assert store2.get_max_offset_in_queue("T", 0) == 40
    cq = store2.cq_store.find("T", 0)
    assert cq.max_physic_offset <= offsets[40]
    r = store2.put_message(Message("T", b"after"))
    assert r.ok and r.append_result.logics_offset == 40
