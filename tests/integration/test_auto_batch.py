"""The auto-batching producer (ipc/accumulator.py, ipc/auto_batch.py) against a real store
started with `mqstore start`: many `send_async` calls (an oversized one among them, refused
alone), each with its own result, in queue order and consumed as sent; a message the store refuses on its own (oversized, a separator in
its tags, properties over 32,767 bytes) refused alone while its neighbours are stored; flush() and close()
send what lingers; a full buffer blocks send_async and then times out (the appender stopped
with SIGSTOP, so that nothing is answered)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from core.status import PutMessageStatus
from ipc import Admin, Consumer, Producer
from tests.integration.supervised import SupervisedStore

CONFIG = {"mapped_file_size_commitlog": 4 * 1024 * 1024, "max_message_size": 128 * 1024}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("autobatch"), **CONFIG).start()
    yield s
    s.ensure_stopped()


def read_all(store, topic: str, n: int, timeout: float = 60.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    with Consumer(store.address, "g-" + topic, topic, max_msgs=1024) as c:
        while len(out) < n and time.monotonic() < deadline:
            out += c.poll(200)
    return out


def check_sends(store, topic: str, n: int, queues: int = 4) -> None:
    with Admin(store.address) as a:
        a.create_topic(topic, queues)
    bodies = [b"m%07d" % i + b"x" * 200 for i in range(n)]
    with Producer(store.address) as p:
        futs = [p.send_async(topic, body, queue_id=i % queues) for i, body in enumerate(bodies[:n // 2])]
        big = p.send_async(topic, b"B" * (CONFIG["max_message_size"] + 1), queue_id=0)   # among them
        futs += [p.send_async(topic, body, queue_id=i % queues)
                 for i, body in enumerate(bodies[n // 2:], n // 2)]
        results = [f.result(60) for f in futs]
        assert big.result(60).status is PutMessageStatus.MESSAGE_ILLEGAL      # refused alone
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert all(r.count == 1 and len(r.msg_ids) == 1 and len(r.msg_id) == 32 for r in results)
    assert len({r.msg_id for r in results}) == n and len({r.uniq_key for r in results}) == n
    for q in range(queues):
        mine = results[q::queues]
        assert [r.queue_id for r in mine] == [q] * len(mine)
        assert [r.queue_offset for r in mine] == list(range(len(mine)))     # in send order
    got = read_all(store, topic, n)
    assert len(got) == n
    by_key = {r.uniq_key: (r, body) for r, body in zip(results, bodies)}
    for m in got:
        r, body = by_key[m.uniq_key]
        assert (m.body, m.queue_id, m.queue_offset, m.phys_offset, m.msg_id) == \
            (body, r.queue_id, r.queue_offset, r.phys_offset, r.msg_id)


def test_auto_batched_sends_have_their_own_results_in_queue_order(store):
    check_sends(store, "auto10k", 10_000)


@pytest.mark.slow
def test_100000_auto_batched_sends(store):
    check_sends(store, "auto100k", 100_000, queues=8)


def test_messages_the_store_refuses_are_refused_alone(store):
    big = b"B" * (CONFIG["max_message_size"] + 1)
    with Producer(store.address, linger_ms=1000) as p:       # all of them in one linger
        futs = [p.send_async("alone", b"before-%d" % i, queue_id=0) for i in range(5)]
        bad = [p.send_async("alone", big, queue_id=0),
               p.send_async("alone", b"t", tags="bad\x01tag", queue_id=0),
               p.send_async("alone", b"p", properties={"big": "v" * 40_000}, queue_id=0)]
        futs += [p.send_async("alone", b"after-%d" % i, queue_id=0) for i in range(5)]
        assert p.flush(30)
        good = [f.result(0) for f in futs]
        refused = [f.result(0) for f in bad]
    assert all(r.ok for r in good)
    assert [r.queue_offset for r in good] == list(range(10))
    assert refused[0].status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in refused[0].reason
    assert refused[1].status is PutMessageStatus.MESSAGE_ILLEGAL and "\\x01 or \\x02" in refused[1].reason
    assert refused[2].status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    got = read_all(store, "alone", 10)
    assert [m.body for m in got] == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]


def test_batches_stay_within_the_stores_limits(store):
    # 40 KiB bodies with batch_max_bytes 200 KiB: batches are kept to the store's
    # max_message_size (128 KiB, from hello), so none is refused as a whole.
    with Producer(store.address, linger_ms=1000, batch_max_bytes=200 * 1024) as p:
        futs = [p.send_async("split", b"%d" % i + b"s" * 40_000, queue_id=1) for i in range(6)]
        assert p.flush(30)
        results = [f.result(0) for f in futs]
    assert all(r.ok for r in results), results
    assert [r.queue_offset for r in results] == list(range(6))


def test_a_batch_refused_whole_is_sent_again_one_by_one(store):
    with Producer(store.address, linger_ms=1000, batch_max_bytes=400 * 1024) as p:
        p._batcher.acc.store_limits(None, None)            # as against a store whose hello
        p._batcher.acc._body_limit = 400 * 1024            # does not name its limits
        futs = [p.send_async("whole", b"%d" % i + b"w" * 40_000, queue_id=1) for i in range(6)]
        assert p.flush(30)
        results = [f.result(0) for f in futs]
    assert all(r.ok for r in results), results               # 240 KB > max_message_size: split
    assert [r.queue_offset for r in results] == list(range(6))


def test_flush_and_close_send_what_lingers(store):
    p = Producer(store.address, linger_ms=60_000)
    futs = [p.send_async("linger", b"f%d" % i, queue_id=0) for i in range(10)]
    time.sleep(0.2)                     # no wait for a process: a time in which nothing may go out
    assert not any(f.done() for f in futs)
    assert p.flush(10)
    assert all(f.result(0).ok for f in futs)
    later = [p.send_async("linger", b"c%d" % i, queue_id=0) for i in range(10)]
    p.close()
    assert all(f.result(0).ok for f in later)
    assert [f.result(0).queue_offset for f in futs + later] == list(range(20))


def test_send_is_not_held_by_the_linger(store):
    with Producer(store.address, linger_ms=60_000) as p:
        p.send_async("nolinger", b"lingering", queue_id=0)
        started = time.monotonic()
        r = p.send("nolinger", b"now", queue_id=1)
        assert r.ok and time.monotonic() - started < 5.0


def test_a_full_buffer_blocks_then_times_out(store):
    appender = store.service("appender")["pid"]
    with Producer(store.address, linger_ms=0, batch_max_bytes=16 * 1024,
                  buffer_max_bytes=64 * 1024, timeout=30) as p:
        assert p.send("full", b"warm", queue_id=0).ok
        os.kill(appender, signal.SIGSTOP)
        try:
            taken = []
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="buffer"):
                for i in range(100):
                    taken.append(p.send_async("full", b"y" * 4096, queue_id=0, timeout=1.0))
            blocked = time.monotonic() - started
            assert 1.0 <= blocked < 10 and 16 <= len(taken) <= 17     # 64 KiB of 4 KiB bodies
        finally:
            os.kill(appender, signal.SIGCONT)
        assert p.flush(30)
        assert all(f.result(0).ok for f in taken)
