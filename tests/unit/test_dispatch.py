"""`Dispatcher.run`: reput over a CommitLog range into consume queues and the index. Records
straddling the limit wait (PARTIAL), blanks jump to the next segment, an invalid record stops
the run, transaction types choose what is queued and indexed, and a re-run is harmless."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.log.commitlog import CommitLog
from core.log.consume_queue import BLANK_SIZE
from core.log.consume_queue_store import ConsumeQueueStore
from core.log.dispatch import Dispatcher, DispatchStop
from core.files.fileops import REAL_FILE_OPS
from core.log.index_service import IndexService
from core.record.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK, Message,
)

SEG = 4096 * 4


class Parts:
    """A CommitLog, consume queues and an index on tiny segments, wired to a Dispatcher."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.log = CommitLog(cfg, REAL_FILE_OPS)
        self.log.queue.load()
        self.cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue,
                                     REAL_FILE_OPS)
        self.cqs.load()
        self.index = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num,
                                  REAL_FILE_OPS)
        self.index.load(True, 0)
        self.arrived = []
        self.dispatcher = Dispatcher(self.log, self.cqs, self.index,
                                     lambda *arrival: self.arrived.append(arrival))

    def put(self, msg):
        return self.log.append(self.log.prepare(msg))

    def close(self):
        self.index.shutdown()
        self.cqs.shutdown()
        self.log.shutdown()


@pytest.fixture
def parts(tiny_config):
    p = Parts(tiny_config())
    yield p
    p.close()


def test_dispatch_everything(parts):
    res = [parts.put(Message("T", b"%d" % i, queue_id=i % 2, tags="t", keys="k%d" % i))
           for i in range(10)]
    end = parts.log.get_max_offset()
    offset, stop = parts.dispatcher.run(0, end)
    assert (offset, stop) == (end, DispatchStop.DONE)
    assert parts.cqs.topic_queue_table() == {("T", 0): 5, ("T", 1): 5}
    assert parts.cqs.find("T", 1).get_entry(2)[0] == res[5].wrote_offset
    assert sorted(parts.arrived) == [("T", 0, 5), ("T", 1, 5)]       # once per queue and batch
    assert parts.index.query_offset("T", "k7", 10, 0, 1 << 62)[0] == [res[7].wrote_offset]
    assert parts.dispatcher.last_store_timestamp == res[-1].store_timestamp


def test_a_record_straddling_the_limit_waits(parts):
    res = [parts.put(Message("T", b"x" * 100)) for _ in range(3)]
    limit = res[1].wrote_offset + 50
    offset, stop = parts.dispatcher.run(0, limit)
    assert (offset, stop) == (res[1].wrote_offset, DispatchStop.PARTIAL)
    assert parts.cqs.find("T", 0).get_max_offset_in_queue() == 1
    offset, stop = parts.dispatcher.run(offset, parts.log.get_max_offset())
    assert stop is DispatchStop.DONE
    assert parts.cqs.find("T", 0).get_max_offset_in_queue() == 3


def test_blank_jumps_to_the_next_segment(parts):
    res = []
    while len(parts.log.queue.files) < 3:
        res.append(parts.put(Message("T", b"y" * 1500)))
    end = parts.log.get_max_offset()
    offset, stop = parts.dispatcher.run(0, end)
    assert (offset, stop) == (end, DispatchStop.DONE)
    cq = parts.cqs.find("T", 0)
    assert [cq.get_entry(i)[0] for i in range(len(res))] == [r.wrote_offset for r in res]


def test_run_stops_at_the_end_of_written_data(parts):
    parts.put(Message("T", b"z"))
    end = parts.log.get_max_offset()
    offset, stop = parts.dispatcher.run(0, SEG)        # a limit past what is written
    assert offset == end
    assert stop is DispatchStop.PARTIAL                # the segment can still grow


def test_run_stops_at_an_invalid_record(parts):
    res = [parts.put(Message("T", b"w" * 100)) for _ in range(5)]
    mf = parts.log.queue.files[0]
    buf = parts.log.queue.hold(mf)
    try:
        buf[res[2].wrote_offset + 4] ^= 0xFF           # magic of the third record
    finally:
        mf.release()
    offset, stop = parts.dispatcher.run(0, parts.log.get_max_offset())
    assert (offset, stop) == (res[2].wrote_offset, DispatchStop.PARTIAL)
    offset, stop = parts.dispatcher.run(0, parts.log.get_max_offset(), check_crc=True)
    assert offset == res[2].wrote_offset
    assert parts.cqs.find("T", 0).get_max_offset_in_queue() == 2


def test_run_stops_at_a_crc_mismatch_only_when_checking(parts):
    res = [parts.put(Message("T", b"v" * 100)) for _ in range(3)]
    mf = parts.log.queue.files[0]
    buf = parts.log.queue.hold(mf)
    try:
        buf[res[1].wrote_offset + 90] ^= 0x01          # a body byte
    finally:
        mf.release()
    end = parts.log.get_max_offset()
    assert parts.dispatcher.run(0, end, check_crc=True, apply=False) == (
        res[1].wrote_offset, DispatchStop.INVALID)
    assert parts.dispatcher.run(0, end, check_crc=False, apply=False) == (end, DispatchStop.DONE)


def test_run_refuses_a_record_at_the_wrong_offset(parts):
    res = [parts.put(Message("T", b"u" * 100)) for _ in range(3)]
    mf = parts.log.queue.files[0]
    buf = parts.log.queue.hold(mf)
    try:
        pos = res[1].wrote_offset + 28                 # PHYSICALOFFSET field
        buf[pos:pos + 8] = (12345).to_bytes(8, "big")
    finally:
        mf.release()
    offset, stop = parts.dispatcher.run(0, parts.log.get_max_offset())
    assert (offset, stop) == (res[1].wrote_offset, DispatchStop.INVALID)


def test_apply_false_only_walks(parts):
    for _ in range(5):
        parts.put(Message("T", b"t"))
    end = parts.log.get_max_offset()
    assert parts.dispatcher.run(0, end, apply=False) == (end, DispatchStop.DONE)
    assert parts.cqs.queues == {}
    assert parts.arrived == []


def test_progress_is_reported_per_segment(parts):
    while len(parts.log.queue.files) < 3:
        parts.put(Message("T", b"p" * 2000))
    seen = []
    end = parts.log.get_max_offset()
    parts.dispatcher.run(0, end, progress=seen.append)
    assert seen[:2] == [SEG, 2 * SEG]
    assert seen[-1] == end


def test_transaction_types(parts):
    parts.put(Message("T", b"normal", keys="n"))
    parts.put(Message("T", b"prepared", keys="p", sys_flag=SYSFLAG_TRANSACTION_PREPARED))
    parts.put(Message("T", b"commit", keys="c", sys_flag=SYSFLAG_TRANSACTION_COMMIT))
    parts.put(Message("T", b"rollback", keys="r", sys_flag=SYSFLAG_TRANSACTION_ROLLBACK))
    parts.dispatcher.run(0, parts.log.get_max_offset())
    cq = parts.cqs.find("T", 0)
    assert cq.get_max_offset_in_queue() == 2           # normal and commit only
    # RocketMQ's index service skips rolled-back records only; prepared ones are indexed
    for key, indexed in (("n", True), ("p", True), ("c", True), ("r", False)):
        assert bool(parts.index.query_offset("T", key, 10, 0, 1 << 62)[0]) is indexed, key
    assert parts.arrived == [("T", 0, 2)]             # only what reached the queue


def test_transaction_types_in_a_large_batch(parts):
    """The numpy path of `Dispatcher.apply` (a batch of many records) skips the same ones."""
    flags = (0, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK)
    for i in range(200):
        parts.put(Message("T", b"m", keys="k%d" % i, sys_flag=flags[i % 4]))
    parts.dispatcher.run(0, parts.log.get_max_offset())
    assert parts.cqs.find("T", 0).get_max_offset_in_queue() == 100
    hits = [i for i in range(200) if parts.index.query_offset("T", "k%d" % i, 10, 0, 1 << 62)[0]]
    assert hits == [i for i in range(200) if i % 4 != 3]


def test_dispatching_twice_changes_nothing(parts):
    for i in range(120):
        parts.put(Message("T%d" % (i % 3), b"r" * 200, keys="k%d" % i))
    end = parts.log.get_max_offset()
    parts.dispatcher.run(0, end)
    table = parts.cqs.topic_queue_table()
    entries = {k: [cq.get_entry(i) for i in range(cq.get_max_offset_in_queue())]
               for k, cq in parts.cqs.queues.items()}
    hits = parts.index.query_offset("T1", "k4", 64, 0, 1 << 62)[0]
    parts.dispatcher.run(0, end)
    assert parts.cqs.topic_queue_table() == table
    assert {k: [cq.get_entry(i) for i in range(cq.get_max_offset_in_queue())]
            for k, cq in parts.cqs.queues.items()} == entries
    assert parts.index.query_offset("T1", "k4", 64, 0, 1 << 62)[0] == hits


def _damage_queue_offset(parts, phys: int, value: int) -> None:
    """Write `value` over the QUEUEOFFSET of the record at `phys`, in its segment file (the
    mapping is shared, so the log reads it): a damaged header, which the body CRC cannot see."""
    from core.record.codec import QUEUE_OFFSET_POS
    size = parts.cfg.mapped_file_size_commitlog
    path = os.path.join(parts.cfg.commitlog_dir, "%020d" % (phys - phys % size))
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, value.to_bytes(8, "big"), phys % size + QUEUE_OFFSET_POS)
    finally:
        os.close(fd)


@pytest.fixture
def rocketmq_parts(tiny_config):
    """`parts` writing records without the CRC property, as RocketMQ does by default: a header
    flip then passes the body CRC, and dispatch alone must guard against it."""
    p = Parts(tiny_config(enabled_append_prop_crc=False))
    yield p
    p.close()


def test_the_record_crc_catches_a_damaged_queue_offset(parts):
    res = [parts.put(Message("T", b"body %d" % i, queue_id=0)) for i in range(20)]
    _damage_queue_offset(parts, res[19].wrote_offset, 19 + (1 << 12))
    end = parts.log.get_max_offset()
    assert parts.dispatcher.run(0, end, check_crc=True)[0] == res[19].wrote_offset
    assert parts.cqs.find("T", 0).get_max_offset_in_queue() == 19


@pytest.mark.parametrize("batch_records", [1, 1024])
def test_a_damaged_queue_offset_is_not_entered_nor_filled_up_to(rocketmq_parts, monkeypatch,
                                                                 batch_records):
    """A record whose QUEUEOFFSET had a bit flipped (19 became 19 + 2^12) asks for an entry far
    past the queue's end. It is not entered, and no filler entries are written up to it (a
    flip in a higher byte asked for 2^28 of them: 5 GB); the queue goes on at the next record,
    with a filler entry where the damaged one stood."""
    import core.log.dispatch
    parts = rocketmq_parts
    monkeypatch.setattr(core.log.dispatch, "BATCH_RECORDS", batch_records)
    res = [parts.put(Message("T", b"body %d" % i, queue_id=0)) for i in range(20)]
    _damage_queue_offset(parts, res[19].wrote_offset, 19 + (1 << 12))
    end = parts.log.get_max_offset()
    assert parts.dispatcher.run(0, end, check_crc=True) == (end, DispatchStop.DONE)
    cq = parts.cqs.find("T", 0)
    assert cq.get_max_offset_in_queue() == 19
    assert [cq.get_entry(i)[0] for i in range(19)] == [r.wrote_offset for r in res[:19]]

    later = parts.put(Message("T", b"body 20", queue_id=0))
    assert later.logics_offset == 20
    assert parts.dispatcher.run(end, later.next_offset) == (later.next_offset, DispatchStop.DONE)
    assert cq.get_max_offset_in_queue() == 21
    assert cq.get_entry(19)[1] == BLANK_SIZE
    assert cq.get_entry(20)[0] == later.wrote_offset


def test_small_batches_give_the_same_queues_and_index(parts, monkeypatch, tiny_config):
    """Dispatch in batches of 3 records (runs of one queue cut at every batch edge) builds
    what one big batch builds."""
    import core.log.dispatch
    for i in range(40):
        parts.put(Message("T%d" % (i % 2), b"r%d" % i, queue_id=i % 3, tags="t%d" % (i % 4),
                          keys="a%d b%d" % (i, i)))
    end = parts.log.get_max_offset()
    parts.dispatcher.run(0, end)
    table = parts.cqs.topic_queue_table()
    entries = {k: cq.get_entries(0, 100) for k, cq in parts.cqs.queues.items()}
    other = Parts(tiny_config(store_path_root_dir=parts.cfg.store_path_root_dir + "-small"))
    try:
        for i in range(40):
            other.put(Message("T%d" % (i % 2), b"r%d" % i, queue_id=i % 3, tags="t%d" % (i % 4),
                              keys="a%d b%d" % (i, i)))
        monkeypatch.setattr(core.log.dispatch, "BATCH_RECORDS", 3)
        assert other.dispatcher.run(0, end) == (end, DispatchStop.DONE)
        assert other.cqs.topic_queue_table() == table
        assert {k: cq.get_entries(0, 100) for k, cq in other.cqs.queues.items()} == entries
        for i in range(40):
            topic = "T%d" % (i % 2)
            assert other.index.query_offset(topic, "b%d" % i, 5, 0, 1 << 62)[0] == \
                parts.index.query_offset(topic, "b%d" % i, 5, 0, 1 << 62)[0] != []
    finally:
        other.close()


@pytest.mark.parametrize("batch_records", [1, 7, 1024])
def test_plain_batches_of_one_queue_write_what_record_by_record_dispatch_writes(
        parts, monkeypatch, batch_records):
    """Batches of plain messages that are one run of one queue (the usual producer batch) take
    the unsorted path and their UNIQ_KEYs are hashed from bytes: the entries, arrivals and
    index hits are those of record-by-record dispatch."""
    import core.log.dispatch
    from core.record.codec import check_record
    from core.log.consume_queue import ENTRY
    monkeypatch.setattr(core.log.dispatch, "BATCH_RECORDS", batch_records)
    res = [parts.put(Message("T", b"body", queue_id=0 if i < 40 else 1, tags="t%d" % (i % 3),
                             properties={"UNIQ_KEY": "%032X" % i})) for i in range(50)]
    end = parts.log.get_max_offset()
    assert parts.dispatcher.run(0, end) == (end, DispatchStop.DONE)
    want = {0: b"", 1: b""}
    for r in res:
        req, _ = check_record(parts.log.read(r.wrote_offset, r.wrote_bytes), 0, r.wrote_bytes,
                              True)
        want[req.queue_id] += ENTRY.pack(req.commit_log_offset, req.msg_size, req.tags_code)
    for q in (0, 1):
        assert parts.cqs.find("T", q).get_entries(0, 100) == want[q]
    assert max(a[2] for a in parts.arrived if a[:2] == ("T", 0)) == 40
    for i in (0, 17, 39, 40, 49):
        assert parts.index.query_offset("T", "%032X" % i, 5, 0, 1 << 62)[0] == [res[i].wrote_offset]


def _files(root: str) -> dict:
    """Every consume-queue file by path and the index files' contents in name order."""
    out = {}
    for sub in ("consumequeue", "index"):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, sub))):
            for i, name in enumerate(sorted(names)):
                path = os.path.join(dirpath, name)
                key = (sub, i) if sub == "index" else os.path.relpath(path, root)
                with open(path, "rb") as f:
                    out[key] = f.read()
    return out


_GROUP = st.fixed_dictionaries({
    "count": st.integers(1, 40),
    "alike": st.booleans(),                     # one body for all (a producer's batch)
    "body": st.sampled_from([0, 3, 100, 199, 200, 201, 300]),
    "topic": st.sampled_from(["T", "Other", "T\u00e9"]),
    "queue": st.sampled_from([0, 1, None]),     # None: round robin over the queues
    "tags": st.sampled_from([None, "t", "TagA"]),
    "keys": st.sampled_from([None, "", "k1", "a  b"]),
    "uniq": st.sampled_from(["hex", "short", None]),
    "sys_flag": st.sampled_from([0, 0, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED,
                                 SYSFLAG_TRANSACTION_ROLLBACK]),
})


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_GROUP, min_size=1, max_size=6), st.booleans(),
       st.one_of(st.none(), st.floats(0, 1, exclude_max=True)))
def test_runs_write_what_record_by_record_dispatch_writes(tiny_config, groups, check_crc, flip):
    """The vectorised path (strided runs, numpy columns, table CRCs, UNIQ_KEYs hashed from
    bytes, index entries put together) writes consume-queue and index files byte for byte
    equal to dispatch one record at a time through the per-record parse, and stops where it
    stops when a byte of the log is flipped."""
    import core.log.dispatch
    import core.record.scan
    seq = 0
    msgs = []
    for g in groups:
        for i in range(g["count"]):
            seq += 1
            body = b"%07d" % seq * 50 if not g["alike"] else b"x" * 300
            uniq = {"hex": {"UNIQ_KEY": "%032X" % (seq * 2654435761)},
                    "short": {"UNIQ_KEY": "u%d" % seq}, None: {}}[g["uniq"]]
            msgs.append(Message(g["topic"], body[:g["body"]],
                                queue_id=seq % 2 if g["queue"] is None else g["queue"],
                                tags=g["tags"], keys=g["keys"], properties=uniq,
                                sys_flag=g["sys_flag"], born_timestamp=1_700_000_000_000))
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Parts(tiny_config(store_path_root_dir=tmp + "/log"))
        for m in msgs:
            log.put(m)
        end = log.log.get_max_offset()
        segment = log.cfg.mapped_file_size_commitlog
        log.close()
        if flip is not None:
            at = int(flip * end)
            path = os.path.join(tmp, "log", "commitlog", "%020d" % (at - at % segment))
            with open(path, "r+b") as f:
                f.seek(at % segment)
                byte = f.read(1)[0]
                f.seek(at % segment)
                f.write(bytes([byte ^ 0x10]))
        for one_by_one in (False, True):
            root = tmp + "/%d" % one_by_one
            shutil.copytree(tmp + "/log", root)
            p = Parts(tiny_config(store_path_root_dir=root))
            try:
                with pytest.MonkeyPatch.context() as mp:
                    if one_by_one:
                        mp.setattr(core.log.dispatch, "BATCH_RECORDS", 1)
                        mp.setattr(core.record.scan, "NUMPY_MIN_RECORDS", 1 << 30)
                    reached = p.dispatcher.run(0, end, check_crc=check_crc)
                p.cqs.flush()
                p.index.flush()
                written.append((reached, _files(root), p.arrived,
                                p.dispatcher.last_store_timestamp))
            finally:
                p.close()
    (reached, files, arrived, last), (reached_1, files_1, arrived_1, last_1) = written
    assert reached == reached_1 and files == files_1 and last == last_1
    if flip is None:
        assert reached == (end, DispatchStop.DONE)
    assert {a: max(b[2] for b in arrived if b[:2] == a) for a in {b[:2] for b in arrived}} == \
        {a: max(b[2] for b in arrived_1 if b[:2] == a) for a in {b[:2] for b in arrived_1}}


@pytest.mark.parametrize("count", [5, 200])           # the plain-Python and the numpy step
def test_dispatch_gives_way_between_its_steps(parts, count):
    steps = []
    parts.dispatcher.give_way = lambda: steps.append("give way")
    parts.dispatcher.on_arrive = lambda *arrival: steps.append("queue")
    for i in range(count):
        parts.put(Message("T", b"%05d" % i, queue_id=i % 2, keys="k%05d" % i))
    assert parts.dispatcher.run(0, parts.log.get_max_offset())[1] is DispatchStop.DONE
    batches = steps.count("give way") // 2
    assert batches >= 1 and steps[0] == "give way" and steps[-1] == "give way"
    assert steps == (["give way", "queue", "queue", "give way"] * batches)   # scan | queues | index
    assert parts.index.query_offset("T", "k%05d" % (count - 1), 10, 0, 1 << 62)[0]


def test_a_short_range_is_dispatched_in_short_steps_and_a_long_one_in_one_batch(tiny_config,
                                                                                 tmp_path):
    def batches_for(count: int) -> tuple[int, int, int]:
        p = Parts(tiny_config(store_path_root_dir=str(tmp_path / str(count))))
        try:
            scans = []
            p.dispatcher = Dispatcher(p.log, p.cqs, p.index, give_way=lambda: scans.append(1),
                                      short_steps=(64 << 10, 8))
            for i in range(count):
                p.put(Message("T", b"%05d" % i, queue_id=i % 2, keys="k%05d" % i))
            end = p.log.get_max_offset()
            assert p.dispatcher.run(0, end)[1] is DispatchStop.DONE
            assert p.cqs.topic_queue_table() == {("T", 0): (count + 1) // 2, ("T", 1): count // 2}
            assert p.index.query_offset("T", "k%05d" % (count - 1), 10, 0, 1 << 62)[0]
            return len(scans) // 2, end, len(p.log.queue.files)   # a batch: scan | queues | index
        finally:
            p.close()

    few, _, segments = batches_for(20)
    assert (few, segments) == (3, 1)                            # 8 + 8 + 4 records
    many, end, segments = batches_for(1000)
    assert end > 64 << 10 and many == segments                  # one batch per 16 KiB segment
