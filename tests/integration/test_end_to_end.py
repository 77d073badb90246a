"""End to end: the real supervisor and its service processes (`python -m supervisor.cli start`
as a subprocess, through `tests.integration.supervised`), driven only by the client library
(`ipc.Producer`, `ipc.Consumer`, `ipc.Admin`), ending with a clean stop and a clean
`core.fsck.check`.

The workload: `producers` producer *processes*, each with its own `Producer`, send messages
to `topics` topics of 4 queues. A body names its topic, producer and sequence number, followed
by a filler whose length and bytes follow from the sequence number, so a consumer can rebuild
the exact bytes it must have received. Producer 0, 1, ... alternate between batches
(`send_batch_async`, 50 messages per request, several in flight) and single messages
(`send_async`, many in flight); each request names its queue. Every reply is kept: queue id,
queue offset, offset message id and UNIQ_KEY of each message (and, when asked, the FLUSHED
word of the control block read in the reply's callback, right after the reply arrived).

`check_delivery` then consumes every topic with a `Consumer` and checks that each queue is
read in queue order from offset 0 with no gap and no repeat, that every body is byte-identical
to what was sent, that the set of messages read is the set acknowledged (nothing lost, nothing
extra, no duplicate), that each message sits exactly where its acknowledgement said, and that
the messages one producer sent to one queue kept their sending order.

The store uses small files throughout (256 KiB CommitLog segments, 600-entry consume-queue
files, 8,192-entry index files), so every run rolls many segments of every kind. The chaos
test (tests/chaos/test_kill_while_producing.py) reuses the helpers here.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import struct
import threading
import time

import pytest

from core.fsck import check
from ipc import Admin, Consumer, Producer
from ipc.control_block import ControlBlock, Word, read_control_name
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore, cli

E2E_CONFIG = {
    "mapped_file_size_commitlog": 262144,
    "mapped_file_size_consume_queue": 12000,
    "max_hash_slot_num": 1024,
    "max_index_num": 8192,
}
QUEUES = 4
BATCH = 50
BATCH_WINDOW = 8                   # batches in flight per producer
SINGLE_WINDOW = 256                # single messages in flight per producer
FILLER = bytes(range(256)) * 12
BLANK_MAGIC = -875286124           # 0xCBD43194 as a Java int
_HEAD = re.compile(rb"^([A-Za-z0-9_-]+)\|p(\d+)\|(\d+)\|")
_SIZE_MAGIC = struct.Struct(">ii")


# ---- the messages ----------------------------------------------------------------------

def topic_name(i: int) -> str:
    return f"E2E_{i}"


def make_body(topic: str, producer: int, seq: int, max_filler: int = 180) -> bytes:
    """`topic|pP|SEQ|` then a filler of `seq * 37 % max_filler` bytes starting at `seq % 256`."""
    start = seq % 256
    return b"%s|p%d|%07d|" % (topic.encode(), producer, seq) + FILLER[start:start + seq * 37 % max_filler]


def parse_body(body: bytes) -> tuple[str, int, int]:
    m = _HEAD.match(body)
    assert m, f"a body that no producer sent: {body[:60]!r}"
    return m.group(1).decode(), int(m.group(2)), int(m.group(3))


class Ack:
    """What the store answered for one message."""
    __slots__ = ("queue_id", "queue_offset", "msg_id", "uniq_key", "flushed")

    def __init__(self, queue_id, queue_offset, msg_id, uniq_key, flushed=-1):
        self.queue_id, self.queue_offset = queue_id, queue_offset
        self.msg_id, self.uniq_key, self.flushed = msg_id, uniq_key, flushed

    def __reduce__(self):
        return Ack, (self.queue_id, self.queue_offset, self.msg_id, self.uniq_key, self.flushed)


# ---- producing -------------------------------------------------------------------------

def produce_share(address: str, run_dir: str | None, producer: int, topics: list, per_topic: int,
                  batched: bool, max_filler: int = 180, batch: int = BATCH) -> dict:
    """One producer's share (runs in its own process): `per_topic` messages to each topic,
    spread over the queues. Returns {(topic, producer, seq): Ack}. With `run_dir`, each Ack
    carries FLUSHED as read right after its reply arrived."""
    cb = ControlBlock(read_control_name(run_dir)) if run_dir else None
    acks: dict = {}
    failures: list = []
    lock = threading.Lock()
    with Producer(address, timeout=30.0, window=1024) as p:
        pending = []

        def on_reply(fut, topic, seqs):
            flushed = cb.get(Word.FLUSHED) if cb is not None else -1
            try:
                res = fut.result()
            except Exception as e:                 # a timeout or a lost connection
                with lock:
                    failures.append((topic, seqs[0], repr(e)))
                return
            with lock:
                if not res.ok:
                    failures.append((topic, seqs[0], res))
                    return
                for i, seq in enumerate(seqs):
                    acks[(topic, producer, seq)] = Ack(res.queue_id, res.queue_offset + i,
                                                       res.msg_ids[i], res.uniq_keys[i], flushed)

        window = BATCH_WINDOW if batched else SINGLE_WINDOW
        step = batch if batched else 1
        for start in range(0, per_topic, step):
            for topic in topics:
                seqs = list(range(start, min(start + step, per_topic)))
                queue = (start // step) % QUEUES
                bodies = [make_body(topic, producer, s, max_filler) for s in seqs]
                if batched:
                    fut = p.send_batch_async(topic, bodies, queue_id=queue)
                else:
                    fut = p.send_async(topic, bodies[0], queue_id=queue)
                fut.add_done_callback(lambda f, t=topic, s=seqs: on_reply(f, t, s))
                pending.append(fut)
            while len(pending) > window * len(topics):
                pending.pop(0).result()
        for fut in pending:
            fut.result()
    if cb is not None:
        cb.close()
    assert not failures, f"producer {producer}: puts not PUT_OK: {failures[:3]}"
    return acks


def producer_processes():
    """The multiprocessing context of the producer processes: a fork server that imported this
    module (with zmq, numpy and the client) once, and forks each pool's workers from it; a
    spawned worker imports all that again for every pool (about 0.7 s per pool of 4 on two
    cores). Nothing but the import is shared: the server has no socket, context or thread."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def produce(store: SupervisedStore, producers: int, topics: list, per_topic: int,
            read_flushed: bool = False, max_filler: int = 180, batch: int = BATCH) -> dict:
    """Run `producers` producer processes at once; every acknowledgement, merged."""
    ctx = producer_processes()
    run_dir = store.path("run") if read_flushed else None
    with ctx.Pool(producers) as pool:
        jobs = [pool.apply_async(produce_share, (store.address, run_dir, i, topics, per_topic,
                                                 i % 2 == 0, max_filler, batch))
                for i in range(producers)]
        results = [j.get(timeout=240) for j in jobs]
    acks: dict = {}
    for r in results:
        acks.update(r)
    assert len(acks) == producers * len(topics) * per_topic
    return acks


def create_topics(store: SupervisedStore, topics: list) -> None:
    with Admin(store.address) as admin:
        for t in topics:
            admin.create_topic(t, QUEUES)


# ---- consuming and checking ------------------------------------------------------------

def consume_topic(address: str, topic: str, expected: int, timeout: float = 120.0,
                  group: str = "e2e") -> list:
    """Every message of `topic` a fresh consumer group reads until it has `expected` and is
    caught up (or `timeout` passes)."""
    out = []
    deadline = time.monotonic() + timeout
    with Consumer(address, group, topic, max_msgs=512, long_poll_ms=1000, auto_commit=False) as c:
        while time.monotonic() < deadline:
            out.extend(c.poll(200))
            if len(out) >= expected and c.caught_up:
                out.extend(c.poll(0))
                break
    return out


def max_offsets(address: str, topic: str) -> dict:
    with Admin(address) as admin:
        return {q["queue_id"]: q["max_offset"] for q in admin.queue_offsets(topic)}


def check_delivery(address: str, acks: dict, topics: list, group: str = "e2e",
                   max_filler: int = 180) -> dict:
    """Consume every topic and compare with the acknowledgements (module docstring).
    Returns {(topic, producer, seq): ReceivedMessage}."""
    seen: dict = {}
    for topic in topics:
        expected = sum(1 for k in acks if k[0] == topic)
        msgs = consume_topic(address, topic, expected, group=group)
        per_queue: dict = {}
        last_seq: dict = {}
        for m in msgs:
            assert m.topic == topic
            per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
            body = bytes(m.body)
            t, producer, seq = parse_body(body)
            key = (t, producer, seq)
            assert t == topic, f"{topic} q{m.queue_id}@{m.queue_offset} holds a body of {t}"
            assert key not in seen, f"duplicate {key} at q{m.queue_id}@{m.queue_offset}"
            assert body == make_body(t, producer, seq, max_filler), \
                f"{key}: body differs from what was sent"
            ack = acks.get(key)
            assert ack is not None, f"{key} read but never acknowledged"
            assert (m.queue_id, m.queue_offset, m.msg_id, m.uniq_key) == \
                (ack.queue_id, ack.queue_offset, ack.msg_id, ack.uniq_key), f"{key} is not where its ack said"
            order_key = (m.queue_id, producer)
            assert last_seq.get(order_key, -1) < seq, f"{key} read after a later message of producer {producer}"
            last_seq[order_key] = seq
            seen[key] = m
        for q, offsets in per_queue.items():
            assert offsets == list(range(len(offsets))), \
                f"{topic} q{q}: queue offsets not read in order from 0 without gaps"
        stored = max_offsets(address, topic)
        assert sum(stored.values()) == expected, f"{topic}: {stored} stored for {expected} sent"
        assert {q: len(o) for q, o in per_queue.items()} == {q: n for q, n in stored.items() if n}
    missing = set(acks) - set(seen)
    assert not missing, f"{len(missing)} acknowledged messages never read, e.g. {sorted(missing)[:5]}"
    return seen


def stop_and_fsck(store: SupervisedStore):
    """Clean stop (exit 0, no abort file), then core.fsck.check clean; the report."""
    assert store.stop() == 0, store.stderr()
    assert not os.path.exists(store.path("abort")), "a clean stop left the abort file"
    report = check(store.root)
    assert report.ok, report.format_text()
    return report


def commitlog_segments(root: str) -> list:
    d = os.path.join(root, "commitlog")
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.isdigit())


def segment_tails(path: str) -> tuple[int, int, bool]:
    """(records, data end, ends with a blank reaching the file's end) of one segment."""
    with open(path, "rb") as f:
        data = f.read()
    pos = records = 0
    while pos + 8 <= len(data):
        total, magic = _SIZE_MAGIC.unpack_from(data, pos)
        if magic == BLANK_MAGIC:
            return records, pos, pos + total == len(data)
        if total <= 0:
            break
        records += 1
        pos += total
    return records, pos, False


@pytest.fixture
def started(tmp_path):
    """`started(**config)`: a running SupervisedStore with the small E2E files; stopped at
    teardown if the test did not stop it."""
    stores = []

    def make(**config) -> SupervisedStore:
        s = SupervisedStore(tmp_path, name=f"store{len(stores)}", **{**E2E_CONFIG, **config})
        stores.append(s)
        return s.start()

    yield make
    for s in stores:
        s.ensure_stopped()


# ---- the tests -------------------------------------------------------------------------

def run_volume(started, total: int, **config):
    s = started(**config)
    topics = [topic_name(i) for i in range(8)]
    create_topics(s, topics)
    producers = 4
    per_topic = total // (producers * len(topics))
    acks = produce(s, producers, topics, per_topic, read_flushed=config.get("flush_disk_type") == "SYNC_FLUSH")
    seen = check_delivery(s.address, acks, topics)
    assert len(seen) == total
    return s, acks, seen


@pytest.mark.slow
def test_20k_messages_four_producers_eight_topics(started):
    s, _, _ = run_volume(started, 20_000)
    report = stop_and_fsck(s)
    assert report.stats["records"] == 20_000
    assert report.stats["segments"] > 1


@pytest.mark.slow
def test_100k_messages_four_producers_eight_topics(started):
    s, _, _ = run_volume(started, 100_000)
    report = stop_and_fsck(s)
    assert report.stats["records"] == 100_000
    assert report.stats["segments"] >= 50 and report.stats["index_files"] >= 12


@pytest.mark.slow
def test_sync_flush_acks_only_flushed_records(started):
    s, acks, seen = run_volume(started, 20_000, flush_disk_type="SYNC_FLUSH")
    assert "sync_flush" in s.status()["flags"]
    late = [(k, ack.flushed, seen[k].phys_offset + seen[k].store_size)
            for k, ack in acks.items() if ack.flushed < seen[k].phys_offset + seen[k].store_size]
    assert not late, (f"{len(late)} acknowledgements arrived before FLUSHED covered their record "
                      f"((key, FLUSHED after the reply, record end), first ones): {late[:5]}")
    stop_and_fsck(s)


@pytest.mark.slow
def test_transient_store_pool(started):
    s, _, _ = run_volume(started, 20_000, transient_store_pool_enable=True)
    assert "transient_pool" in s.status()["flags"]
    stop_and_fsck(s)


@pytest.mark.slow
def test_tiny_segments_roll_with_blank_records(started):
    """16 KiB segments and bodies up to ~2 KiB: a segment holds a handful of records, so
    almost every batch meets a segment end; every full segment must end with a blank."""
    s = started(mapped_file_size_commitlog=16384, mapped_file_size_consume_queue=1000)
    topics = [topic_name(i) for i in range(2)]
    create_topics(s, topics)
    acks = produce(s, 2, topics, 600, max_filler=2000, batch=5)
    check_delivery(s.address, acks, topics, max_filler=2000)
    report = stop_and_fsck(s)
    segments = commitlog_segments(s.root)
    assert len(segments) == report.stats["segments"] and len(segments) >= 100
    end = report.stats["log_end"]
    records = 0
    for path in segments:
        start = int(os.path.basename(path))
        n, data_end, blank = segment_tails(path)
        records += n
        if start + 16384 <= end:
            assert blank, f"{path}: a full segment without a blank reaching its end (data ends at {data_end})"
        elif start <= end:
            assert start + data_end == end, f"{path}: the log ends at {end}, its records at {start + data_end}"
        else:
            assert n == 0, f"{path}: records past the end of the log"   # a segment made ahead
    assert records == report.stats["records"] == len(acks)


def test_long_poll_is_woken_by_new_data(started):
    s = started()
    create_topics(s, ["LongPoll"])
    with Admin(s.address) as admin, Producer(s.address) as p:
        conn = admin.connection
        poll_ms = 10_000
        t0 = time.monotonic()
        held = conn.request("reader", "pull", {"group": "lp", "topic": "LongPoll", "queue_id": 2,
                                              "offset": 0, "max_msgs": 8, "poll_ms": poll_ms},
                            timeout=poll_ms / 1000 + 10)
        assert not conn.wait(held.done, 0.3), f"the pull was not held: {held.result()}"
        r = p.send("LongPoll", b"wake up", queue_id=2)
        assert r.ok, r
        sent = time.monotonic()
        env, frames = held.result(poll_ms / 1000 + 5)
        woke = time.monotonic()
        assert env["status"] == "FOUND" and env["count"] == 1, env
        assert woke - sent < 1.0, f"the held pull answered {woke - sent:.3f}s after the put"
        assert woke - t0 < poll_ms / 1000 / 2

        # the same through Consumer: its poll blocks in a long pull, a put 300 ms later ends it
        with Consumer(s.address, "lp2", "LongPoll", queues=[1], long_poll_ms=poll_ms) as c:
            assert c.poll(300) == []
            timer = threading.Timer(0.3, lambda: p.send("LongPoll", b"again", queue_id=1))
            t1 = time.monotonic()
            timer.start()
            got = c.poll(poll_ms)
            waited = time.monotonic() - t1
            timer.join()
            assert [bytes(m.body) for m in got] == [b"again"]
            assert waited < 2.0, f"Consumer.poll returned {waited:.3f}s after it began"
    stop_and_fsck(s)


@pytest.mark.slow
def test_tailing_consumer_reads_every_message(started):
    """A consumer that keeps up with a producer (its pulls reach the end of each queue while
    new messages are dispatched) must still read every offset: a gap here is a message the
    group silently never gets."""
    s = started()
    create_topics(s, ["Tail"])
    total = 20_000
    sent = threading.Event()

    def produce_singles():
        try:
            with Producer(s.address) as p:
                for start in range(0, total, 64):
                    futs = [p.send_async("Tail", b"t%07d" % i, queue_id=i % QUEUES)
                            for i in range(start, min(start + 64, total))]
                    assert all(f.result().ok for f in futs)
        finally:
            sent.set()

    got = []

    def take(c, timeout_ms):
        got.extend((m.queue_id, m.queue_offset, bytes(m.body)) for m in c.poll(timeout_ms))

    with Consumer(s.address, "tail", "Tail", long_poll_ms=1000, auto_commit=False) as c:
        producer = threading.Thread(target=produce_singles, daemon=True)
        producer.start()
        deadline = time.monotonic() + 120
        while not sent.is_set() and time.monotonic() < deadline:
            take(c, 200)
        producer.join(30)
        assert wait_for(lambda: sum(max_offsets(s.address, "Tail").values()) == total, 30)
        deadline = time.monotonic() + 15           # then read what is left, until caught up
        while time.monotonic() < deadline and not (len(got) >= total and c.caught_up):
            take(c, 200)
    stored = max_offsets(s.address, "Tail")
    read = {(q, o) for q, o, _ in got}
    skipped = sorted({(q, o) for q, n in stored.items() for o in range(n)} - read)
    assert not skipped, (f"the tailing consumer skipped {len(skipped)} of {total} messages "
                         f"(queue, offset), first ones: {skipped[:10]}")
    assert len(got) == len(read) == total
    stop_and_fsck(s)


@pytest.mark.slow
def test_clean_stop_then_start_is_a_normal_recovery_with_all_data(started):
    s = started()
    topics = [topic_name(i) for i in range(3)]
    create_topics(s, topics)
    acks = produce(s, 2, topics, 1000)
    check_delivery(s.address, acks, topics, group="before")
    stop_and_fsck(s)
    s.start()
    st = s.status()
    assert st["supervisor"]["recovery"] == "normal", st["supervisor"]
    shown = cli("status", "--store", s.root, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["supervisor"]["recovery"] == "normal", shown.stdout
    assert os.path.exists(s.path("abort")), "a running store has no abort file"
    check_delivery(s.address, acks, topics, group="after")
    # the store goes on where it stopped: new messages get the next queue offsets
    acks.update(produce_share(s.address, None, 7, topics, 200, True))
    def stored():
        return {t: sum(max_offsets(s.address, t).values()) for t in topics}
    assert wait_for(lambda: stored() == dict.fromkeys(topics, 2200), 30), stored()
    check_delivery(s.address, acks, topics, group="after2")
    stop_and_fsck(s)
