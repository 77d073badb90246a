"""Recovery under damage, with Hypothesis: random workloads (topics, queues, sizes, batches,
IPv6 hosts) on tiny segments, a clean stop or an abort file left behind, then the CommitLog
cut at a random byte (everything after it zeroed) or one checked byte corrupted.

After reopening: every record wholly before the damage is intact and readable through
get_message; nothing from the damaged record on is served; consume queues and the index never
point past the recovered end; appends continue where the log ends; recovering again gives
the same state; and `core.fsck.check` finds the store clean. A third kind of run lets the
store's process exit without shutting down (consume queues, index and checkpoint as far as
the services had got) before the damage.

Only bytes a check covers are corrupted: the sizes, magic and body CRC, the physical offset,
the body length and body, and the topic and properties lengths (a blank's magic for blanks).
RocketMQ's format has no check over the other header fields, so damage there goes unseen.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core import fsck
from core.record.codec import BLANK_SIZE
from core.log.commitlog import now_ms
from core.config import StoreConfig
from core.files.mapped_file import offset_to_file_name
from core.record.message import Message
from core.status import GetMessageStatus
from core.store import MessageStore
from tests.unit.recovery_workload import Record, open_store, put_workload

SEG = 4096 * 4
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOPICS = ("A", "B", "Topic-C")
TINY = dict(mapped_file_size_commitlog=SEG, mapped_file_size_consume_queue=20 * 50,
            max_hash_slot_num=64, max_index_num=512, flush_interval_commitlog=10,
            flush_interval_consume_queue=10, flush_consume_queue_thorough_interval=50)
FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- workloads -----------------------------------------------------------------------------

message_specs = st.tuples(st.sampled_from(TOPICS), st.integers(0, 2), st.integers(0, 2500),
                          st.booleans())
operations = st.one_of(
    message_specs.map(lambda m: [m]),
    st.lists(st.tuples(st.integers(0, 800), st.booleans()), min_size=2, max_size=5).flatmap(
        lambda bodies: st.tuples(st.sampled_from(TOPICS), st.integers(0, 2)).map(
            lambda tq: [(tq[0], tq[1], size, v6) for size, v6 in bodies])))
workloads = st.lists(operations, min_size=1, max_size=40)


def new_config(root: str, flush: str) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, flush_disk_type=flush, **TINY)


def run_workload(cfg, workload) -> list[Record]:
    st = open_store(cfg)
    try:
        records = put_workload(st, workload)
        assert st.wait_for_dispatch()
    finally:
        st.shutdown()
    return records


CHILD = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from core.config import StoreConfig
from tests.unit.recovery_workload import open_store, put_workload
cfg = StoreConfig(**json.loads(sys.argv[2]))
st = open_store(cfg)
records = put_workload(st, json.loads(sys.argv[3]))
if sys.argv[4] == "drained":
    st.wait_for_dispatch()
print(json.dumps([dict(vars(r), body=r.body.hex()) for r in records]), flush=True)
os._exit(0)          # a crash: no final flush, no checkpoint, the abort file stays
"""


def run_workload_and_crash(cfg, workload, drained: bool) -> list[Record]:
    """Run the workload in a child process that exits without shutting the store down."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, REPO, json.dumps(cfg.to_dict()), json.dumps(workload),
         "drained" if drained else "not-drained"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert os.path.exists(cfg.abort_path)
    return [Record(**dict(r, body=bytes.fromhex(r["body"]))) for r in json.loads(out.stdout)]


def blanks_of(records: list[Record]) -> list[int]:
    """Start offsets of the blank records: wherever the next record starts a new segment."""
    return [a.end for a, b in zip(records, records[1:]) if b.phys // SEG != a.end // SEG]


def cut(cfg, offset: int) -> None:
    for name in sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit()):
        start = int(name)
        if start + SEG <= offset:
            continue
        lo = max(offset - start, 0)
        with open(os.path.join(cfg.commitlog_dir, name), "r+b") as f:
            f.seek(lo)
            f.write(bytes(SEG - lo))


def corrupt(cfg, offset: int, xor: int) -> None:
    path = os.path.join(cfg.commitlog_dir, offset_to_file_name(offset - offset % SEG))
    with open(path, "r+b") as f:
        f.seek(offset % SEG)
        old = f.read(1)[0]
        f.seek(offset % SEG)
        f.write(bytes([old ^ xor]))


def expected_end_after_cut(records, blanks, offset: int) -> int:
    """The start of the first record or blank header that the cut reaches into."""
    units = sorted([(r.phys, r.size) for r in records] + [(b, BLANK_SIZE) for b in blanks])
    for start, length in units:
        if start + length > offset:
            return start
    raise AssertionError("cut past the end of the log")


# -- checks --------------------------------------------------------------------------------

def snapshot(st: MessageStore) -> dict:
    queues = {}
    for key, cq in st.cq_store.queues.items():
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        queues[key] = (lo, hi, [cq.get_entry(i) for i in range(lo, hi)])
    return {"max_phy": st.get_max_phy_offset(), "queues": queues,
            "table": dict(st.commitlog.topic_queue_table),
            "index_end": st.index_service.max_indexed_phy_offset()}


def check_recovered(st: MessageStore, records: list[Record], end: int) -> None:
    assert st.get_max_phy_offset() == end
    kept = [r for r in records if r.end <= end]
    gone = [r for r in records if r.end > end]
    assert all(r.phys >= end for r in gone)
    for r in kept:
        got = st.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
        assert got.status is GetMessageStatus.FOUND, (r, got.status)
        m = got.messages[0]
        assert (m.body, m.commit_log_offset, m.keys) == (r.body, r.phys, r.key)
    for topic in TOPICS:
        for qid in range(3):
            count = sum(1 for r in kept if (r.topic, r.queue_id) == (topic, qid))
            assert st.get_max_offset_in_queue(topic, qid) == count
            assert st.commitlog.topic_queue_table.get((topic, qid), 0) == count
            if count or st.cq_store.find(topic, qid) is not None:
                status = st.get_message("g", topic, qid, count, 1).status
                assert status in (GetMessageStatus.OFFSET_OVERFLOW_ONE,
                                  GetMessageStatus.NO_MESSAGE_IN_QUEUE)
    for cq in st.cq_store.queues.values():
        assert cq.max_physic_offset <= end
        last = cq.last_entry()
        assert last is None or last[0] + last[1] <= end
    for r in gone:
        assert st.look_message_by_offset(r.phys) is None
    assert st.index_service.max_indexed_phy_offset() <= end
    until = now_ms() + 60_000
    for r in records[:: max(1, len(records) // 8)] + records[-3:]:
        hits = st.query_message(r.topic, r.key, 32, 0, until).messages
        assert [m.commit_log_offset for m in hits] == ([r.phys] if r.end <= end else [])


def reopen_and_check(cfg, records, end, abnormal: bool) -> None:
    if abnormal and not os.path.exists(cfg.abort_path):
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    try:
        assert st.recovery_report.abnormal is abnormal
        check_recovered(st, records, end)
        first = snapshot(st)
    finally:
        st.shutdown()
    if abnormal:
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    try:
        assert snapshot(st) == first                       # recovering again changes nothing
        check_recovered(st, records, end)
        r = st.put_message(Message("A", b"after", queue_id=0, keys="after"))
        assert r.ok and r.append_result.logics_offset == first["table"].get(("A", 0), 0)
        if end % SEG + r.append_result.wrote_bytes + BLANK_SIZE <= SEG:
            assert r.append_result.wrote_offset == end
        assert st.wait_for_dispatch()
        got = st.get_message("g", "A", 0, r.append_result.logics_offset, 1)
        assert got.messages[0].body == b"after"
    finally:
        st.shutdown()
    report = fsck.check(cfg.store_path_root_dir)
    assert report.ok, report.format_text()


@contextlib.contextmanager
def scratch():
    """A fresh store root per Hypothesis example (function fixtures are shared by examples)."""
    root = tempfile.mkdtemp(prefix="mqstore-recovery-")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cut_case(workload, flush, abnormal, where):
    with scratch() as root:
        cut_in(new_config(root, flush), workload, abnormal, where)


def normal_scan_start(cfg) -> int:
    """Where a normal recovery starts walking: the third segment from the end (DESIGN.md 7).
    Damage before it is outside what a normal (clean-shutdown) recovery checks, as in RocketMQ;
    `mqstore check` finds it."""
    names = sorted(n for n in os.listdir(cfg.commitlog_dir) if n.isdigit())
    return int(names[max(0, len(names) - 3)]) if names else 0


def cut_in(cfg, workload, abnormal, where):
    records = run_workload(cfg, workload)
    total = records[-1].end
    offset = min(int(where * total), total - 1)
    if not abnormal:
        offset = max(offset, min(normal_scan_start(cfg), total - 1))
    end = expected_end_after_cut(records, blanks_of(records), offset)
    cut(cfg, offset)
    reopen_and_check(cfg, records, end, abnormal)


def corrupt_case(workload, flush, abnormal, pick, xor):
    with scratch() as root:
        corrupt_in(new_config(root, flush), workload, abnormal, pick, xor)


def corrupt_in(cfg, workload, abnormal, pick, xor):
    records = run_workload(cfg, workload)
    targets = [(r.phys, lo, hi) for r in records for lo, hi in r.protected_ranges()]
    targets += [(b, b + 4, b + 8) for b in blanks_of(records)]        # a blank's magic
    if not abnormal:
        scanned = [t for t in targets if t[0] >= normal_scan_start(cfg)]
        targets = scanned or targets[-1:]
    start, lo, hi = targets[int(pick * len(targets)) % len(targets)]
    offset = lo + int(pick * 7919) % (hi - lo)
    victim = next((r for r in records if r.phys == start), None)
    if victim is not None and victim.phys + 88 + 12 * victim.v6_hosts <= offset < \
            victim.phys + 88 + 12 * victim.v6_hosts + len(victim.body):
        i = offset - victim.phys - 88 - 12 * victim.v6_hosts
        body = bytearray(victim.body)
        body[i] ^= xor
        assume(zlib.crc32(bytes(body)) & 0x7FFFFFFF != zlib.crc32(victim.body) & 0x7FFFFFFF)
    corrupt(cfg, offset, xor)
    if start >= records[-1].phys:                 # the last record: nothing intact behind it
        reopen_and_check(cfg, records, start, abnormal)
    else:
        reopen_and_check_quarantined(cfg, records, start, abnormal)


def reopen_and_check_quarantined(cfg, records, start: int, abnormal: bool) -> None:
    """A damaged record (or blank) at `start` with records behind it: recovery quarantines it
    and keeps every other record; a pull of it answers MESSAGE_DAMAGED; recovering again changes
    nothing; `check` reports the damage."""
    if abnormal:
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    try:
        assert [q.start for q in st.recovery_report.quarantined] == [start]
        assert os.path.exists(st.recovery_report.quarantined[0].path)
        assert st.get_max_phy_offset() == records[-1].end
        for r in records:
            got = st.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
            if r.phys == start:
                assert got.status is GetMessageStatus.MESSAGE_DAMAGED and not got.buffers
                assert st.look_message_by_offset(r.phys) is None
            else:
                assert got.status is GetMessageStatus.FOUND, (r, got.status)
                m = got.messages[0]
                assert (m.body, m.commit_log_offset, m.keys) == (r.body, r.phys, r.key)
        first = snapshot(st)
    finally:
        st.shutdown()
    st = open_store(cfg)
    try:
        assert snapshot(st) == first
    finally:
        st.shutdown()
    report = fsck.check(cfg.store_path_root_dir)
    assert not report.ok and any(p.offset == start for p in report.problems), report.format_text()


flushes = st.sampled_from(["ASYNC_FLUSH", "SYNC_FLUSH"])


@FAST
@given(workloads, flushes, st.booleans(), st.floats(0, 1, exclude_max=True))
def test_cut_at_a_random_byte(workload, flush, abnormal, where):
    cut_case(workload, flush, abnormal, where)


@FAST
@given(workloads, flushes, st.booleans(), st.floats(0, 1, exclude_max=True),
       st.integers(1, 255))
def test_corrupt_a_random_checked_byte(workload, flush, abnormal, pick, xor):
    corrupt_case(workload, flush, abnormal, pick, xor)


def crash_case(workload, flush, drained, damage):
    with scratch() as root:
        cfg = new_config(root, flush)
        records = run_workload_and_crash(cfg, workload, drained)
        total = records[-1].end
        end = total
        if damage is not None:
            offset = min(int(damage * total), total - 1)
            end = expected_end_after_cut(records, blanks_of(records), offset)
            cut(cfg, offset)
        reopen_and_check(cfg, records, end, abnormal=True)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(workloads, flushes, st.booleans(), st.none() | st.floats(0, 1, exclude_max=True))
def test_process_crash_then_cut(workload, flush, drained, damage):
    """The store's process exits without shutting down (consume queues, index and checkpoint
    as far as the services had got), and the CommitLog may also be cut."""
    crash_case(workload, flush, drained, damage)


@pytest.mark.slow
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(workloads, flushes, st.booleans(), st.none() | st.floats(0, 1, exclude_max=True))
def test_process_crash_then_cut_many(workload, flush, drained, damage):
    crash_case(workload, flush, drained, damage)


@pytest.mark.slow
@SLOW
@given(workloads, flushes, st.booleans(), st.floats(0, 1, exclude_max=True))
def test_cut_at_a_random_byte_many(workload, flush, abnormal, where):
    cut_case(workload, flush, abnormal, where)


@pytest.mark.slow
@SLOW
@given(workloads, flushes, st.booleans(), st.floats(0, 1, exclude_max=True),
       st.integers(1, 255))
def test_corrupt_a_random_checked_byte_many(workload, flush, abnormal, pick, xor):
    corrupt_case(workload, flush, abnormal, pick, xor)


def test_cut_inside_a_blank_filler_keeps_the_segment(tmp_path):
    """A cut inside a blank's filler leaves the blank header: the log ends at the next
    segment's start, and nothing before it is lost."""
    cfg = new_config(str(tmp_path), "ASYNC_FLUSH")
    records = run_workload(cfg, [[("A", 0, 2000, False)]] * 12)
    blank = blanks_of(records)[0]
    assert SEG - blank % SEG > BLANK_SIZE + 1
    cut(cfg, blank + BLANK_SIZE)
    reopen_and_check(cfg, records, blank - blank % SEG + SEG, abnormal=True)
