"""`MessageStore` restart and recovery: RocketMQ's DefaultMessageStoreTest.testRecover (normal
and abnormal, a damaged last record), torn tails, consume queues rebuilt from the CommitLog,
the abnormal start segment chosen from the checkpoint, a torn checkpoint, and recovering
twice."""
from __future__ import annotations

import os
import shutil

import pytest

from core.log.checkpoint import StoreCheckpoint
from core.log.commitlog import now_ms
from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import offset_to_file_name
from core.record.message import Message
from core.status import GetMessageStatus

SEG = 4096 * 4
BODY = b"Once, there was a chance for me!"


def foobar(i):
    return Message("FooBar", BODY, tags="TAG1", keys="key-%d" % i)


def put_n(store, n, start=0):
    results = [store.put_message(foobar(start + i)) for i in range(n)]
    assert all(r.ok for r in results)
    return [r.append_result for r in results]


def damage(cfg, phys, data):
    """Overwrite CommitLog bytes at global offset `phys` (never across a segment)."""
    path = os.path.join(cfg.commitlog_dir, offset_to_file_name(phys - phys % SEG))
    with open(path, "r+b") as f:
        f.seek(phys % SEG)
        f.write(data)


def cut_commitlog(cfg, phys):
    """Zero everything from `phys` to the end of its segment and drop later segments' bytes."""
    seg_start = phys - phys % SEG
    for name in sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit()):
        start = int(name)
        if start + SEG <= phys:
            continue
        with open(os.path.join(cfg.commitlog_dir, name), "r+b") as f:
            lo = phys - start if start == seg_start else 0
            f.seek(lo)
            f.write(bytes(SEG - lo))


def state(store):
    return (store.get_max_phy_offset(), dict(store.cq_store.topic_queue_table()),
            store.get_min_phy_offset())


def test_recover(tiny_config, open_store):
    """DefaultMessageStoreTest.testRecover."""
    cfg = tiny_config(flush_disk_type="SYNC_FLUSH")
    st = open_store(cfg)
    put_n(st, 100)
    assert st.wait_for_dispatch()
    max_phy, max_cq = st.get_max_phy_offset(), st.get_max_offset_in_queue("FooBar", 0)
    st.shutdown()
    st = open_store(cfg)
    assert st.get_max_phy_offset() == max_phy
    assert st.get_max_offset_in_queue("FooBar", 0) == max_cq == 100

    for abnormal in (False, True):
        put_n(st, 100, start=1000)
        assert st.wait_for_dispatch()
        noted = (st.get_max_phy_offset(), st.get_max_offset_in_queue("FooBar", 0))
        last = put_n(st, 1, start=2000)[0]
        assert st.wait_for_dispatch()
        st.shutdown()
        assert not os.path.exists(cfg.abort_path)
        damage(cfg, last.wrote_offset + 84, bytes(16))        # body length and body
        if abnormal:
            open(cfg.abort_path, "w").close()
        st = open_store(cfg)
        assert st.recovery_report.abnormal is abnormal
        assert (st.get_max_phy_offset(), st.get_max_offset_in_queue("FooBar", 0)) == noted
        assert st.look_message_by_offset(last.wrote_offset) is None
        r = st.get_message("g", "FooBar", 0, noted[1], 1)
        assert r.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert st.query_message("FooBar", "key-2000", 32, 0, now_ms() + 1000).messages == []
        assert st.index_service.max_indexed_phy_offset() <= noted[0]

    res = put_n(st, 100, start=3000)
    assert res[0].wrote_offset == noted[0]
    assert res[0].logics_offset == noted[1]
    assert st.wait_for_dispatch()
    assert st.get_max_offset_in_queue("FooBar", 0) == noted[1] + 100
    got = st.get_message("g", "FooBar", 0, noted[1], 1).messages[0]
    assert got.keys == "key-3000"


@pytest.mark.parametrize("abnormal", [False, True])
def test_torn_tail_is_cut(tiny_config, open_store, abnormal):
    cfg = tiny_config()
    st = open_store(cfg)
    res = put_n(st, 30)
    st.shutdown()
    victim = res[-1]
    damage(cfg, victim.wrote_offset + 100, bytes(victim.wrote_bytes - 100))   # half written
    if abnormal:
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    assert st.get_max_phy_offset() == victim.wrote_offset
    assert st.get_max_offset_in_queue("FooBar", 0) == 29
    with open(os.path.join(cfg.commitlog_dir, offset_to_file_name(0)), "rb") as f:
        f.seek(victim.wrote_offset)
        assert f.read() == bytes(SEG - victim.wrote_offset)         # cut durably
    assert st.put_message(foobar(99)).append_result.wrote_offset == victim.wrote_offset


def test_restart_keeps_every_queue(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    for i in range(300):
        assert st.put_message(Message("Q%d" % (i % 3), b"x" * (50 + i), queue_id=i % 4)).ok
    assert st.wait_for_dispatch()
    before = state(st)
    st.shutdown()
    st = open_store(cfg)
    assert state(st) == before
    assert st.commitlog.topic_queue_table == before[1]
    st.shutdown()
    st = open_store(cfg)
    assert state(st) == before


def test_missing_consume_queues_are_rebuilt(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    put_n(st, 250)
    assert st.wait_for_dispatch()
    before = state(st)
    st.shutdown()
    shutil.rmtree(cfg.consumequeue_dir)
    st = open_store(cfg)
    assert state(st) == before
    r = st.get_message("g", "FooBar", 0, 200, 32)
    assert [m.keys for m in r.messages] == ["key-%d" % i for i in range(200, 232)]


def test_consume_queue_ahead_of_the_commitlog_is_cut(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    res = put_n(st, 120)
    assert st.wait_for_dispatch()
    st.shutdown()
    cut_commitlog(cfg, res[60].wrote_offset)
    st = open_store(cfg)
    assert st.get_max_phy_offset() == res[60].wrote_offset
    assert st.get_max_offset_in_queue("FooBar", 0) == 60
    assert st.commitlog.topic_queue_table[("FooBar", 0)] == 60
    assert st.put_message(foobar(7)).append_result.logics_offset == 60


def test_abnormal_recovery_starts_at_the_checkpointed_segment(tiny_config, open_store):
    cfg = tiny_config(message_index_enable=False)
    st = open_store(cfg)
    res = put_n(st, 400)
    assert st.wait_for_dispatch()
    end = st.get_max_phy_offset()
    st.shutdown()
    segments = sorted(int(n) for n in os.listdir(cfg.commitlog_dir) if n.isdigit())
    assert len(segments) >= 4
    ckpt = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)
    assert ckpt.valid and ckpt.dispatched_phy_offset == end
    # Claim everything up to now is durable in the consume queues, more than 3 s ago.
    ckpt.physic_msg_timestamp = ckpt.logics_msg_timestamp = now_ms() + 10_000
    ckpt.shutdown()
    open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    report = st.recovery_report
    assert report.abnormal
    last_start = (end // SEG) * SEG
    assert report.start_offset == last_start
    assert report.end_offset == end
    assert st.get_max_offset_in_queue("FooBar", 0) == 400
    assert st.get_message("g", "FooBar", 0, 399, 1).messages[0].keys == "key-399"
    assert res[-1].next_offset == end


def test_abnormal_recovery_with_a_torn_checkpoint_scans_everything(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    put_n(st, 300)
    assert st.wait_for_dispatch()
    before = state(st)
    st.shutdown()
    with open(cfg.checkpoint_path, "r+b") as f:
        f.seek(3)
        f.write(b"\xee")                                          # CRC no longer matches
    open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    assert not st.recovery_report.checkpoint_valid
    assert st.recovery_report.start_offset == 0
    assert state(st) == before


def test_abnormal_recovery_rebuilds_a_lost_index(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    put_n(st, 50)
    assert st.wait_for_dispatch()
    st.shutdown()
    shutil.rmtree(cfg.index_dir)
    open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    r = st.query_message("FooBar", "key-17", 32, 0, now_ms() + 1000)
    assert [m.keys for m in r.messages] == ["key-17"]


def test_recovery_progress_is_reported(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    put_n(st, 300)
    st.shutdown()
    open(cfg.abort_path, "w").close()
    seen = []
    st = open_store(cfg, progress=lambda done, total: seen.append((done, total)))
    assert seen
    assert all(0 <= d <= t for d, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.parametrize("abnormal", [False, True])
def test_recovery_progress_inside_one_segment_ends_at_the_log_end(tiny_config, open_store, abnormal):
    cfg = tiny_config(mapped_file_size_commitlog=1 << 20)
    st = open_store(cfg)
    put_n(st, 5000)                                    # one segment, more than a scan batch
    end = st.get_max_phy_offset()
    st.shutdown()
    if abnormal:
        open(cfg.abort_path, "w").close()
    seen = []
    open_store(cfg, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) >= 2 and seen[-1] == (end, end)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_normal_recovery_checks_three_written_segments_not_the_one_made_ahead(tiny_config, open_store):
    """RocketMQ checks the last three segments at a normal start; a segment made ahead of the
    writer and never written to is not one of them. A clean shutdown deletes those (as RocketMQ
    does); one stays when the allocator process was killed before a clean stop."""
    cfg = tiny_config()
    st = open_store(cfg)
    results = []
    while len({r.wrote_offset // SEG for r in results}) < 4:
        results += put_n(st, 50, start=len(results))
    st.shutdown()
    last = results[-1].wrote_offset // SEG
    REAL_FILE_OPS.create_file(os.path.join(cfg.commitlog_dir, offset_to_file_name((last + 1) * SEG)), SEG)
    victim = next(r for r in results if r.wrote_offset // SEG == last - 2 and r.wrote_offset % SEG)
    damage(cfg, victim.wrote_offset + 88 + 5, b"\xff")             # BODY starts at 88: its CRC fails
    st = open_store(cfg)
    assert [q.start for q in st.recovery_report.quarantined] == [victim.wrote_offset]  # it looked
    assert st.get_max_phy_offset() == results[-1].next_offset       # and kept what follows
    assert st.look_message_by_offset(victim.wrote_offset) is None


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_clean_shutdown_checkpoints_the_store_time_of_the_last_record(tiny_config, open_store, flush,
                                                                       wait_until):
    """physicMsgTimestamp after more than the least pages were flushed in the background and
    the store stopped within the thorough interval (it stayed 0 under ASYNC_FLUSH)."""
    cfg = tiny_config(flush_disk_type=flush, flush_commitlog_thorough_interval=60_000,
                      mapped_file_size_commitlog=1 << 20)
    st = open_store(cfg)
    last = [st.put_message(Message("T", b"x" * 1000)) for _ in range(20)][-1]
    assert st.wait_for_dispatch()
    end = st.get_max_phy_offset()
    assert wait_until(lambda: st.commitlog.queue.flushed_where == end)    # by the background flush
    st.shutdown()
    ckpt = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)
    assert ckpt.physic_msg_timestamp == last.append_result.store_timestamp
    ckpt.shutdown()


def test_empty_store_restarts(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    st.shutdown()
    st = open_store(cfg)
    assert st.get_max_phy_offset() == 0
    assert st.put_message(foobar(0)).append_result.wrote_offset == 0


def test_everything_cut_leaves_empty_queues(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    put_n(st, 5)
    assert st.wait_for_dispatch()
    st.shutdown()
    cut_commitlog(cfg, 0)
    st = open_store(cfg)
    assert st.get_max_phy_offset() == 0
    assert st.get_max_offset_in_queue("FooBar", 0) == 0
    assert st.get_message("g", "FooBar", 0, 0, 1).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert st.put_message(foobar(0)).append_result.logics_offset == 0


@pytest.mark.parametrize("abnormal", [False, True])
@pytest.mark.parametrize("where", [4, 40, 100])       # MAGIC, BORNTIMESTAMP, inside the body
def test_a_damaged_record_is_quarantined_and_the_records_after_it_kept(tiny_config, open_store,
                                                                       abnormal, where):
    """One flipped bit in a record in the middle of the log (below what the checkpoint says was
    flushed): recovery copies that record to quarantine/ with a report and keeps every record
    after it (DESIGN.md section 7); a pull answers MESSAGE_DAMAGED there (with its entry) and
    serves the rest."""
    cfg = tiny_config()
    st = open_store(cfg)
    res = put_n(st, 200)                                       # several segments
    assert st.wait_for_dispatch()
    end = st.get_max_phy_offset()
    st.shutdown()
    victim = res[50]
    with open(os.path.join(cfg.commitlog_dir, offset_to_file_name(victim.wrote_offset - victim.wrote_offset % SEG)),
              "r+b") as f:
        f.seek(victim.wrote_offset % SEG + where)
        byte = f.read(1)[0]
        f.seek(victim.wrote_offset % SEG + where)
        f.write(bytes([byte ^ 0x10]))
    if abnormal:
        open(cfg.abort_path, "w").close()
        cp = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)   # scan the whole log; all of
        cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 0   # it is
        cp.shutdown()                                               # flushed (flushed offset)
    st = open_store(cfg)
    report = st.recovery_report
    assert st.get_max_phy_offset() == end
    assert [(q.start, q.stop) for q in report.quarantined] == [
        (victim.wrote_offset, victim.wrote_offset + victim.wrote_bytes)]
    kept = report.quarantined[0].path
    assert open(kept, "rb").read()[where] == byte ^ 0x10
    assert "failed their check" in open(kept[:-4] + ".txt").read()
    assert st.wait_for_dispatch()
    assert st.get_max_offset_in_queue("FooBar", 0) == 200
    got, offset, damaged = [], 0, []
    while offset < 200:
        r = st.get_message("g", "FooBar", 0, offset, 32)
        if r.status is GetMessageStatus.MESSAGE_DAMAGED:
            damaged.append(offset)
        got += [m.keys for m in r.messages]
        offset = r.next_begin_offset
    assert got == ["key-%d" % i for i in range(200) if i != 50]
    assert damaged == [50]            # the queue's entry stays (re-dispatch finds it there)
    assert st.look_message_by_offset(victim.wrote_offset) is None


def test_a_hole_past_the_flushed_offset_is_a_torn_tail(tiny_config, open_store):
    """After a crash, what lies past the checkpoint's flushed offset may have reached the disk
    page by page in any order: zeros there with written pages after them are the torn tail,
    cut as before, never quarantined."""
    cfg = tiny_config()
    st = open_store(cfg)
    res = put_n(st, 120)
    st.shutdown()
    hole = res[100]
    cp = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)
    cp.flushed_phy_offset = hole.wrote_offset                  # flushed up to the hole
    cp.shutdown()
    damage(cfg, hole.wrote_offset, bytes(hole.wrote_bytes))   # a page that never reached the disk
    open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    assert st.recovery_report.quarantined == []
    assert st.get_max_phy_offset() == hole.wrote_offset
