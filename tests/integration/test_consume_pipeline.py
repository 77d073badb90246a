"""Pipelined consumption against a real supervised store (`python -m supervisor.cli start`):
the Consumer keeps several pulls in flight per queue, the reader answers them from its fast
path (adjacent records copied as runs, sent from the mapping) or its general walk, and still
every message arrives exactly once, complete, in queue order per queue; seeks drop what was
prefetched; a queue with a deep backlog does not starve the others. Segments are small so
that pulls cross segment ends and batch boundaries."""
from __future__ import annotations

import threading
import time

import pytest

from core.record.message import Message
from ipc import Admin, Consumer, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore

CONFIG = {"mapped_file_size_commitlog": 256 * 1024, "mapped_file_size_consume_queue": 20 * 700}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("pipeline"), **CONFIG).start()
    yield s
    s.ensure_stopped()


def body(q: int, k: int) -> bytes:
    return b"%d:%d|" % (q, k) * (1 + k % 11)


def produce(address: str, topic: str, counts: dict, tags_every: int = 0) -> dict:
    """Batches of varying sizes (1..97) per queue, queues interleaved; returns queue -> bodies."""
    sent = {q: [] for q in counts}
    with Producer(address) as p:
        futs = []
        i = 0
        while any(len(sent[q]) < n for q, n in counts.items()):
            for q, n in counts.items():
                k0 = len(sent[q])
                size = min(1 + (i * 13) % 97, n - k0)
                if size <= 0:
                    continue
                items = [Message(topic, body(q, k), tags="T%d" % (k % 3) if tags_every else None)
                         for k in range(k0, k0 + size)]
                futs.append(p.send_batch_async(topic, items, queue_id=q))
                sent[q] += [m.body for m in items]
                i += 1
        assert all(f.result().ok for f in futs)
    return sent


def all_dispatched(address: str, topic: str, counts: dict) -> bool:
    with Admin(address) as a:
        return {e["queue_id"]: e["max_offset"] for e in a.queue_offsets(topic)} == counts


def read(c: Consumer, until, timeout: float = 60.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(out):
        out += c.poll(200)
    return out


def per_queue(msgs) -> dict:
    out: dict = {}
    for m in msgs:
        out.setdefault(m.queue_id, []).append(m)
    return out


def test_every_message_once_complete_and_in_queue_order(store):
    counts = {0: 3000, 1: 1700, 2: 450, 3: 1}
    with Admin(store.address) as a:
        a.create_topic("pipe", 4)
    sent = produce(store.address, "pipe", counts)
    assert wait_for(lambda: all_dispatched(store.address, "pipe", counts), timeout=30)
    with Consumer(store.address, "g-pipe", "pipe", max_msgs=1024, auto_commit=False) as c:
        got = read(c, lambda out: len(out) >= sum(counts.values()))
        assert c.positions() == counts and c.poll(300) == [] and c.caught_up
    queues = per_queue(got)
    for q, n in counts.items():
        assert [m.queue_offset for m in queues[q]] == list(range(n))
        assert [m.body for m in queues[q]] == sent[q]
        assert all(m.topic == "pipe" and m.store_size > len(m.body) for m in queues[q])


def test_reading_while_producing(store):
    counts = {0: 1200, 1: 1200}
    with Admin(store.address) as a:
        a.create_topic("live", 2)
    with Consumer(store.address, "g-live", "live", max_msgs=1024, auto_commit=False,
                  long_poll_ms=500) as c:
        sent: dict = {}
        t = threading.Thread(target=lambda: sent.update(produce(store.address, "live", counts)))
        t.start()
        got = read(c, lambda out: len(out) >= 2400)
        t.join()
    queues = per_queue(got)
    for q in counts:
        assert [m.queue_offset for m in queues[q]] == list(range(1200))
        assert [m.body for m in queues[q]] == sent[q]


def test_seeks_drop_prefetched_messages(store):
    counts = {0: 2500, 1: 2500}
    with Admin(store.address) as a:
        a.create_topic("seekp", 2)
    sent = produce(store.address, "seekp", counts)
    assert wait_for(lambda: all_dispatched(store.address, "seekp", counts), timeout=30)
    with Consumer(store.address, "g-seekp", "seekp", max_msgs=1024, auto_commit=False) as c:
        first = read(c, lambda out: len(out) >= 100)
        time.sleep(0.2)                                  # replies of pipelined pulls come in
        c.seek(0, 2000)
        c.seek(1, 3)
        after = read(c, lambda out: sum(m.queue_id == 0 for m in out) >= 500
                     and sum(m.queue_id == 1 for m in out) >= 2497)
        assert c.positions() == {0: 2500, 1: 2500}
    assert first
    queues = per_queue(after)
    assert [m.queue_offset for m in queues[0]] == list(range(2000, 2500))
    assert [m.queue_offset for m in queues[1]] == list(range(3, 2500))
    assert [m.body for m in queues[1]] == sent[1][3:]


def test_a_backlog_does_not_starve_the_other_queues(store):
    counts = {0: 8000, 1: 20, 2: 20, 3: 20}
    with Admin(store.address) as a:
        a.create_topic("starve", 4)
    produce(store.address, "starve", counts)
    assert wait_for(lambda: all_dispatched(store.address, "starve", counts), timeout=60)
    with Consumer(store.address, "g-starve", "starve", max_msgs=1024, auto_commit=False) as c:
        got = read(c, lambda out: all(len(per_queue(out).get(q, ())) >= 20 for q in (1, 2, 3)))
    queues = per_queue(got)
    assert all([m.queue_offset for m in queues[q]] == list(range(20)) for q in (1, 2, 3))
    assert [m.queue_offset for m in queues.get(0, [])] == list(range(len(queues.get(0, []))))
    # The short queues were not kept waiting: their messages came before most of the backlog
    # (counted by position in what polls returned; one poll may bring several big replies).
    last_short = max(i for i, m in enumerate(got) if m.queue_id != 0)
    assert sum(1 for m in got[:last_short] if m.queue_id == 0) < 4000


def test_tag_filter_with_pipelining(store):
    counts = {0: 600}
    with Admin(store.address) as a:
        a.create_topic("tagp", 1)
    produce(store.address, "tagp", counts, tags_every=1)
    assert wait_for(lambda: all_dispatched(store.address, "tagp", counts), timeout=30)
    with Consumer(store.address, "g-tagp", "tagp", tag_filter="T0 || T2", max_msgs=1024,
                  auto_commit=False) as c:
        got = read(c, lambda out: len(out) >= 400)
        assert c.poll(300) == [] and c.positions() == {0: 600}
    assert [m.queue_offset for m in got] == [k for k in range(600) if k % 3 != 1]
    assert all(m.tags in ("T0", "T2") for m in got)
