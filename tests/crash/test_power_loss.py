"""Power-loss tests of `core.MessageStore` under SYNC_FLUSH, built on the recording seam
(tests/crash/recording.py): run a workload over a `RecordingFileOps`, remember which puts
answered PUT_OK, materialize the states a power cut could leave (enumerated for small
workloads, random and torn otherwise, and before every flush), recover each copy with a plain
store (the abort file is in the copy, so recovery is abnormal) and check anchors B2.5:

- every PUT_OK message is at its physical offset byte for byte, and get_message,
  view_message_by_id and query_message find it;
- nothing served fails its CRC or points past the recovered CommitLog end (consume queues,
  index, checkpoint), and nothing is left past the cut that a later recovery could revive;
- `core.fsck.check` is clean;
- recovery is idempotent and survives a power cut during recovery itself.

A failure names the crash state (`PageChoice`, and the flush it preceded): the reproduction.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import random
import struct
import threading
import time

import pytest

import core.log.commitlog
from core import Message, MessageStore, PutMessageStatus, StoreConfig
from core.record.codec import DispatchRequest, check_record
from core.log.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE
from core.fsck import check as fsck_check
from recording import RecordingFileOps, SimulatedCrash

FORMAT = dict(flush_disk_type="SYNC_FLUSH", mapped_file_size_commitlog=4 * 4096,
              mapped_file_size_consume_queue=20 * 64, max_hash_slot_num=64, max_index_num=256)
FREQUENT_CHECKPOINTS = dict(flush_interval_consume_queue=1, flush_consume_queue_thorough_interval=1,
                            flush_consume_queue_least_pages=0)
TOPICS = ("TopicA", "TopicB")
FAR_FUTURE = 1 << 62
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_ENTRY = struct.Struct(">iqii")
CKPT_OFFSETS = 64                # flushed and dispatched physical offsets, 8 bytes each


def config_for(root: str, **overrides) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, **FORMAT, **overrides)


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def make_message(i: int, wait: bool = True) -> Message:
    rng = random.Random(i)
    body = f"message {i} ".encode() + bytes(rng.randrange(256) for _ in range(rng.randrange(40, 600)))
    props = {"UNIQ_KEY": f"U{i:06d}", **({} if wait else {"WAIT": "false"})}
    return Message(topic=TOPICS[i % 2], body=body, queue_id=(i // 2) % 2, tags=f"T{i % 3}",
                   keys=f"key-{i} group-{i % 5}", properties=props)


@dataclasses.dataclass(frozen=True)
class Acked:
    """A put that answered PUT_OK."""
    key: str
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    msg_id: str
    record: bytes = dataclasses.field(repr=False)


class Workload:
    """A SYNC_FLUSH store over a RecordingFileOps, and the PUT_OK answers it gave: `acked`
    (waited for the flush, so durable) and `written` (WAIT=false ones too)."""

    def __init__(self, root: str, **overrides):
        self.ops = RecordingFileOps(root)
        self.store = MessageStore(config_for(root, **overrides), fileops=self.ops)
        self.store.load()
        self.store.start()
        self.acked: list[Acked] = []
        self.written: list[Acked] = []
        self.statuses: list[PutMessageStatus] = []
        self.next = 0

    def put(self, count: int, wait: bool = True) -> None:
        for _ in range(count):
            i, self.next = self.next, self.next + 1
            self.put_one(i, wait)

    def put_one(self, i: int, wait: bool = True) -> None:
        """Put message `i`; safe from several threads (list appends are atomic)."""
        msg = make_message(i, wait)
        result = self.store.put_message(msg)
        self.statuses.append(result.status)
        if result.status is PutMessageStatus.PUT_OK:
            ar = result.append_result
            done = Acked(f"key-{i}", msg.topic, msg.queue_id, ar.logics_offset, ar.wrote_offset,
                         ar.msg_id, self.store.commitlog.read(ar.wrote_offset, ar.wrote_bytes))
            self.written.append(done)
            if wait:
                self.acked.append(done)

    def close(self) -> None:
        self.store.shutdown()


class FastClock:
    """Stands in for the `time` module of core.log.commitlog: each store timestamp is 2 s after the
    previous one, so that the checkpoint's minimum timestamp (less its 3 s margin) falls inside
    the log and abnormal recovery starts from a later segment."""

    def __init__(self):
        self._ns = time.time_ns()

    def time_ns(self) -> int:
        self._ns += 2_000_000_000
        return self._ns

    def __getattr__(self, name):
        return getattr(time, name)


# -- checks on a recovered copy -----------------------------------------------------------
def recover_and_check(root: str, acked, label, index: bool = True, state: bool = False):
    """Recover the copy at `root` with a plain store and check every property; return where
    recovery started, or with `state` what `capture_state` sees. `index=False` recovers,
    checks and fscks with the index disabled."""
    cfg = config_for(root, message_index_enable=index)
    try:
        store = MessageStore(cfg)
        store.load()
        try:
            assert store.recovery_report.abnormal, "the abort file was in the copy"
            end = store.get_max_phy_offset()
            check_acked(store, acked, end, index)
            check_served_records(store, root, end)
            check_index(root, end)
            check_checkpoint(root, end)
            check_nothing_past_the_cut(root, end)
            result = capture_state(store, root, acked) if state else store.recovery_report.start_offset
        finally:
            store.shutdown()
        report = fsck_check(root, config=cfg)
        assert report.ok, f"fsck is not clean: {report.problems}"
    except AssertionError as exc:
        raise AssertionError(f"crash state {label}:\n{exc}") from None
    return result


def check_acked(store, acked, end: int, index: bool) -> None:
    for a in acked:
        assert a.phys + len(a.record) <= end, \
            f"PUT_OK {a.key} at {a.phys} (+{len(a.record)}) lost: recovered CommitLog ends at {end}"
        same = store.commitlog.read(a.phys, len(a.record)) == a.record
        assert same, f"PUT_OK {a.key} at {a.phys} is not byte-identical after recovery"
        got = store.get_message("g", a.topic, a.queue_id, a.queue_offset, 1)
        served = got is not None and got.buffers[:1] == [a.record]
        assert served, f"get_message({a.topic}, {a.queue_id}, {a.queue_offset}) does not serve " \
                       f"{a.key}: {None if got is None else (got.status, got.queue_offsets)}"
        viewed = store.view_message_by_id(a.msg_id)
        assert viewed is not None and viewed.commit_log_offset == a.phys, \
            f"view_message_by_id({a.msg_id}) does not find {a.key}"
        if index:
            found = [m.commit_log_offset for m in
                     store.query_message(a.topic, a.key, 32, 0, FAR_FUTURE).messages]
            assert a.phys in found, f"query_message({a.topic}, {a.key}) misses {a.phys}: {found}"


def queue_files(root: str):
    """(topic, queue id, segment path) of every consume-queue file, in order."""
    base = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for qid in sorted(os.listdir(os.path.join(base, topic))):
            for name in sorted(os.listdir(os.path.join(base, topic, qid))):
                yield topic, int(qid), os.path.join(base, topic, qid, name)


def check_served_records(store, root: str, end: int) -> None:
    """Every record a pull serves, from each queue's min to max offset, passes its CRC, belongs
    to that topic, queue and queue offset, and ends below the end; so does every consume-queue
    entry on disk."""
    for topic, qid in sorted({(t, q) for t, q, _ in queue_files(root)}):
        offset = max(store.get_min_offset_in_queue(topic, qid), 0)
        top = store.get_max_offset_in_queue(topic, qid)
        while offset < top:
            got = store.get_message("g", topic, qid, offset, 32)
            assert got.status.name == "FOUND", f"{topic}-{qid} at {offset} < max {top}: {got.status}"
            for buf, qoff in zip(got.buffers, got.queue_offsets):
                req, size = check_record(buf, 0, len(buf), True)
                valid = isinstance(req, DispatchRequest) and size == len(buf)
                assert valid, f"{topic}-{qid} offset {qoff} serves an invalid record ({req})"
                assert (req.topic, req.queue_id, req.consume_queue_offset) == (topic, qid, qoff)
                assert req.commit_log_offset + size <= end, f"{topic}-{qid} serves past {end}"
            offset = got.next_begin_offset
    for topic, qid, path in queue_files(root):
        for i, (phys, size, _tags) in enumerate(ENTRY.iter_unpack(read_bytes(path))):
            assert size in (0, BLANK_SIZE) or phys + size <= end, \
                f"{topic}-{qid} entry {int(os.path.basename(path)) // UNIT_SIZE + i} points at " \
                f"{phys}+{size}, past {end}"


def check_index(root: str, end: int) -> None:
    slots_num = FORMAT["max_hash_slot_num"]
    index_dir = os.path.join(root, "index")
    for name in sorted(os.listdir(index_dir)) if os.path.isdir(index_dir) else []:
        data = read_bytes(os.path.join(index_dir, name))
        *_, end_phy, _slots, count = INDEX_HEADER.unpack_from(data, 0)
        assert end_phy <= end, f"index {name} header ends at {end_phy} past {end}"
        slots = struct.unpack_from(f">{slots_num}i", data, 40)
        assert all(0 <= s < max(count, 1) for s in slots), f"index {name}: a slot points past count {count}"
        for n in range(1, count):
            _h, phys, _t, prev = INDEX_ENTRY.unpack_from(data, 40 + slots_num * 4 + n * INDEX_ENTRY.size)
            assert 0 <= phys < end, f"index {name} entry {n} points at {phys}, end is {end}"
            assert 0 <= prev < n, f"index {name} entry {n} chains forward to {prev}"


def check_checkpoint(root: str, end: int) -> None:
    flushed, dispatched = struct.unpack_from(">qq", read_bytes(os.path.join(root, "checkpoint")), CKPT_OFFSETS)
    assert flushed <= end and dispatched <= end, \
        f"checkpoint runs ahead: flushed {flushed}, dispatched {dispatched}, end {end}"


def check_nothing_past_the_cut(root: str, end: int) -> None:
    """Recovery zeroes what it cuts: no bytes past the CommitLog end, no entries past a queue's
    end, that a later crash and recovery could bring back (DESIGN.md section 4)."""
    size = FORMAT["mapped_file_size_commitlog"]
    cl_dir = os.path.join(root, "commitlog")
    for name in sorted(os.listdir(cl_dir)):
        cut = min(max(end - int(name), 0), size)
        clean = read_bytes(os.path.join(cl_dir, name))[cut:] == bytes(size - cut)
        assert clean, f"commitlog {name}: non-zero bytes past the recovered end {end}"
    tail = {}
    for topic, qid, path in queue_files(root):
        for i, (_phys, size, _tags) in enumerate(ENTRY.iter_unpack(read_bytes(path))):
            assert size == 0 or not tail.get((topic, qid)), \
                f"{topic}-{qid}: entry {int(os.path.basename(path)) // UNIT_SIZE + i} past the queue end"
            tail[topic, qid] = size == 0


def capture_state(store, root: str, acked) -> dict:
    """What a second recovery must reproduce: log end and start, CommitLog and consume-queue
    bytes, queue bounds, and what the index answers for every acknowledged key."""
    files = {}
    for sub in ("commitlog", "consumequeue"):
        for cur, _dirs, names in os.walk(os.path.join(root, sub)):
            for name in names:
                files[os.path.relpath(os.path.join(cur, name), root)] = \
                    hashlib.sha256(read_bytes(os.path.join(cur, name))).hexdigest()
    queues = {(t, q) for t, q, _ in queue_files(root)}
    return {
        "start": store.recovery_report.start_offset,
        "end": store.get_max_phy_offset(),
        "files": files,
        "queues": {(t, q): (store.get_min_offset_in_queue(t, q), store.get_max_offset_in_queue(t, q))
                   for t, q in queues},
        "index": {a.key: sorted(m.commit_log_offset for m in
                                store.query_message(a.topic, a.key, 32, 0, FAR_FUTURE).messages)
                  for a in acked},
    }


# -- the tests ------------------------------------------------------------------------------
@pytest.mark.parametrize("rounds", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_every_enumerated_crash_state_keeps_acknowledged_messages(store_root, crash_dir, rounds):
    """After each round of 50 acknowledged puts and an unacknowledged (often unflushed) tail:
    every subset of the dirty pages when there are at most 7, else 15 random states."""
    w = Workload(store_root)
    points = []
    for _ in range(rounds):
        w.put(50)                           # rolls a CommitLog segment
        w.put(3, wait=False)
        points.append((list(w.acked), w.ops.snapshot()))
    w.close()
    rng = random.Random(1)
    for acked, snap in points:
        states = (snap.enumerate_states(limit=0) if len(snap.pages()) <= 7 else
                  [snap.random_choice(rng, 0.2, f"random #{i}") for i in range(15)])
        for choose in states:
            target = crash_dir()
            snap.materialize(target, choose)
            recover_and_check(target, acked, choose)


def test_random_torn_states_while_puts_run(store_root, crash_dir):
    w = Workload(store_root)
    stop = threading.Event()

    def producer():
        while not stop.is_set() and w.next < 400:
            w.put(1, wait=w.next % 7 != 3)

    thread = threading.Thread(target=producer)
    thread.start()
    points = []
    try:
        while len(points) < 6 and thread.is_alive():
            acked = list(w.acked)               # all of these answered before the snapshot
            if len(acked) >= 40 * (len(points) + 1):
                points.append((acked, w.ops.snapshot()))
            stop.wait(0.002)
    finally:
        stop.set()
        thread.join()
        w.close()
    assert points, "the producer finished before any crash point"
    rng = random.Random(7)
    for acked, snap in points:
        for _ in range(8):
            target = crash_dir()
            recover_and_check(target, acked, snap.materialize_random(target, rng, torn_probability=0.3))


def test_power_cut_right_after_each_acknowledgement(store_root, crash_dir):
    """Only what was flushed survives, cut right after each PUT_OK: the flush that answered a
    put must have covered all of its record, wherever it crosses a page."""
    w = Workload(store_root)
    for _ in range(45):
        w.put(1)
        target = crash_dir()
        choice = w.ops.materialize_all_old(target)
        recover_and_check(target, w.acked, f"{choice} after PUT_OK of {w.acked[-1].key}")
    w.close()


def test_process_kill_keeps_every_written_message(store_root, crash_dir):
    """The page cache outlives a killed process: every PUT_OK survives, WAIT=false ones too."""
    w = Workload(store_root)
    w.put(40)
    w.put(5, wait=False)
    target = crash_dir()
    choice = w.ops.materialize_all_new(target)
    w.close()
    assert len(w.written) == 45
    recover_and_check(target, w.written, choice)


def test_recovery_is_idempotent(store_root, crash_dir):
    w = Workload(store_root)
    w.put(60)
    w.put(2, wait=False)
    snap = w.ops.snapshot()
    w.close()
    rng = random.Random(3)
    for _ in range(5):
        target = crash_dir()
        choice = snap.materialize_random(target, rng)
        first = recover_and_check(target, w.acked, choice, state=True)
        second = recover_and_check(target, w.acked, f"{choice}, recovered a second time", state=True)
        first.pop("start"), second.pop("start")
        assert first == second, f"{choice}: a second recovery changed the state"


def check_crash_points_before_flushes(store_root, crash_dir, puts: int, commitlog_every: int,
                                      index: bool = True) -> None:
    """A crash point before every flush of consume queues, index and checkpoint and before
    every `commitlog_every`-th flush call if it is the CommitLog's; each state recovered with
    only flushed data or with a random mix, alternately."""
    w = Workload(store_root, message_index_enable=index, **FREQUENT_CHECKPOINTS)
    points = []
    commitlog_dir = os.path.join(w.ops.root, "commitlog")

    def before_flush(n, path, lo, hi):
        if not path.startswith(commitlog_dir) or n % commitlog_every == 0:
            points.append((n, path, list(w.acked), w.ops.snapshot()))

    w.ops.before_flush = before_flush
    w.put(puts)
    w.ops.before_flush = None
    w.close()
    rng = random.Random(23)
    starts = set()
    for i, (n, path, acked, snap) in enumerate(points):
        target = crash_dir()
        choice = snap.materialize_all_old(target) if i % 2 else snap.materialize_random(target, rng)
        label = f"{choice} before flush #{n} of {os.path.relpath(path, w.ops.root)}"
        starts.add(recover_and_check(target, acked, label, index))
    assert max(starts) > 0, "every recovery scanned from offset 0: the late-start path was not exercised"


@pytest.mark.parametrize("puts, commitlog_every, index", [
    (150, 8, True),
    (120, 5, False),          # no older index time to hide a late start (enough puts that a
                              # checkpoint lands mid-run even on a loaded machine)
    pytest.param(200, 2, True, marks=pytest.mark.slow),
])
def test_power_cut_before_flushes_of_a_running_store(store_root, crash_dir, monkeypatch,
                                                     puts, commitlog_every, index):
    """Frequent checkpoints and store time running fast: recovery starts late, so the order
    of the flushes of CommitLog, consume queues, index and checkpoint matters."""
    monkeypatch.setattr(core.log.commitlog, "time", FastClock())
    check_crash_points_before_flushes(store_root, crash_dir, puts, commitlog_every, index)


def recover_with_power_cut(copy: str, k: int | None):
    """Recover `copy` over a recorder that cuts the power at its k-th flush (None: never).
    Returns the crash point (the state after recovery if it needed fewer flushes) and the
    number of flushes recovery made."""
    ops = RecordingFileOps(copy, crash_at_flush=k)
    store = MessageStore(config_for(copy), fileops=ops)
    try:
        store.load()
    except SimulatedCrash:
        return ops.snapshot(), ops.flush_count
    snap, count = ops.snapshot(), ops.flush_count
    store.shutdown()
    return snap, count


def check_power_cuts_during_recovery(snap, acked, crash_dir, rng, every_flush: bool) -> None:
    """Recover one crash state of `snap`, cutting the power at the k-th flush of recovery,
    for several k (or every k); then recover each of those states again and check it."""
    first = snap.random_choice(rng, 0.3)
    probe = crash_dir()
    snap.materialize(probe, first)
    _, total = recover_with_power_cut(probe, None)
    assert total > 0, "recovery flushed nothing"
    cuts = range(1, total + 1) if every_flush else sorted({1, 2, 3, total // 2, total - 1, total} - {0})
    for k in cuts:
        copy = crash_dir()
        snap.materialize(copy, first)
        cut, _ = recover_with_power_cut(copy, k)
        for how in ("old", "random"):
            target = crash_dir()
            second = cut.materialize_all_old(target) if how == "old" else cut.materialize_random(target, rng)
            recover_and_check(target, acked, f"{first}, then a power cut at flush {k}/{total} of "
                                             f"recovery, leaving {second}")


@pytest.mark.parametrize("puts, rounds, every_flush", [
    (100, 3, False),
    pytest.param(200, 2, True, marks=pytest.mark.slow),
])
def test_recovery_survives_a_power_cut_during_recovery(store_root, crash_dir, puts, rounds, every_flush):
    w = Workload(store_root)
    w.put(puts)
    w.put(3, wait=False)
    snap = w.ops.snapshot()
    w.close()
    rng = random.Random(11)
    for _ in range(rounds):
        check_power_cuts_during_recovery(snap, w.acked, crash_dir, rng, every_flush)


def test_failed_flush_never_acknowledges(store_root, crash_dir):
    """The first CommitLog flush after five puts fails with EIO: no PUT_OK from then on, the
    flush is not retried, and what was acknowledged before survives."""
    w = Workload(store_root)
    w.put(5)
    commitlog_dir = os.path.join(w.ops.root, "commitlog")
    calls = []

    def fail_first_commitlog_flush(n, path, lo, hi):
        if path.startswith(commitlog_dir):
            if not calls:
                w.ops.fail_flush_at = n
            calls.append(n)

    w.ops.before_flush = fail_first_commitlog_flush
    w.put(5)
    assert calls and PutMessageStatus.PUT_OK not in w.statuses[5:], w.statuses
    assert len(calls) == 1, f"a failed CommitLog flush was retried: flush calls {calls}"
    target = crash_dir()
    choice = w.ops.materialize_all_old(target)
    w.ops.before_flush = None
    w.close()
    recover_and_check(target, w.acked, choice)
