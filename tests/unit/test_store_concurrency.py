"""`MessageStore` under concurrent use: producers and consumers at once over many tiny segments
with the smallest mapping window, pulls while segments expire, and restarts after expiry."""
from __future__ import annotations

import threading
import time

import pytest

from core.record.message import Message
from core.status import GetMessageStatus

G = GetMessageStatus


def body_of(q, i, size=300):
    head = b"q%d-%06d|" % (q, i)
    return head + b"." * (size - len(head))


def pull_all(store, topic, queue_id, expected, deadline_s=30.0, errors=None):
    """Pull from offset 0 until `expected` messages were seen; return their bodies."""
    bodies, offset = [], 0
    deadline = time.monotonic() + deadline_s
    while len(bodies) < expected and time.monotonic() < deadline:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r is None or r.status is not G.FOUND:
            time.sleep(0.001)
            continue
        for qo, m in zip(r.queue_offsets, r.messages):
            if m.queue_offset != qo and errors is not None:
                errors.append(("queue offset", qo, m.queue_offset))
        bodies.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
    return bodies


@pytest.mark.parametrize("flush, pool", [("ASYNC_FLUSH", False), ("SYNC_FLUSH", False),
                                         ("ASYNC_FLUSH", True)])
def test_producers_and_consumers_at_once(tiny_config, open_store, flush, pool):
    st = open_store(tiny_config(flush_disk_type=flush, max_mapped_files=4,
                                transient_store_pool_enable=pool))
    n, queues = 300, 3
    errors, pulled = [], {}

    def produce(q):
        for i in range(n):
            if i % 10 == 0:
                r = st.put_messages([Message("C", body_of(q, i + k), queue_id=q) for k in range(5)])
            elif i % 10 < 5:
                continue                                   # those went in the batch
            else:
                r = st.put_message(Message("C", body_of(q, i), queue_id=q))
            if not r.ok:
                errors.append(r.status)

    def consume(q):
        pulled[q] = pull_all(st, "C", q, n, errors=errors)

    threads = [threading.Thread(target=produce, args=(q,)) for q in range(queues)]
    threads += [threading.Thread(target=consume, args=(q,)) for q in range(queues)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for q in range(queues):
        assert pulled[q] == [body_of(q, i) for i in range(n)]
    assert len(st.commitlog.queue.files) > 10
    assert sum(mf.is_mapped for mf in st.commitlog.queue.files) <= 4


def test_pulls_while_segments_expire(tiny_config, open_store):
    st = open_store(tiny_config(max_mapped_files=4))
    n = 400
    for i in range(n):
        assert st.put_message(Message("X", body_of(0, i, 700))).ok
    assert st.wait_for_dispatch()
    stop = threading.Event()
    bad = []

    def reader():
        while not stop.is_set():
            for offset in range(0, n, 37):
                r = st.get_message("g", "X", 0, offset, 8)
                if r.status is G.FOUND:
                    for qo, m in zip(r.queue_offsets, r.messages):
                        if m.body != body_of(0, qo, 700):
                            bad.append((qo, m.body[:12]))
                elif r.status not in (G.OFFSET_TOO_SMALL, G.MESSAGE_WAS_REMOVING,
                                      G.OFFSET_FOUND_NULL):
                    # FOUND_NULL: a consume-queue file went before the queue's min moved.
                    bad.append((offset, r.status))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        deleted = 0
        while len(st.commitlog.queue.files) > 1:
            deleted += st.delete_expired_files(clean_immediately=True)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad
    assert deleted >= 10
    low = st.get_min_offset_in_queue("X", 0)
    r = st.get_message("g", "X", 0, low, 1)
    assert r.status is G.FOUND and r.messages[0].body == body_of(0, low, 700)
    assert st.get_message("g", "X", 0, 0, 1).status is G.OFFSET_TOO_SMALL


@pytest.mark.parametrize("abnormal", [False, True])
def test_restart_after_expiry(tiny_config, open_store, abnormal):
    cfg = tiny_config()
    st = open_store(cfg)
    for i in range(200):
        assert st.put_message(Message("X", body_of(0, i, 700), keys="k%d" % i)).ok
        if i % 3 == 0:
            assert st.put_message(Message("Y", body_of(1, i, 200))).ok
    assert st.wait_for_dispatch()
    st.flush()                      # else the flush thread may hold an old segment a moment
    assert st.delete_expired_files(clean_immediately=True) == 10
    before = (st.get_min_phy_offset(), st.get_max_phy_offset(),
              st.get_min_offset_in_queue("X", 0), st.get_max_offset_in_queue("X", 0),
              st.get_min_offset_in_queue("Y", 0), st.get_max_offset_in_queue("Y", 0))
    st.shutdown()
    if abnormal:
        open(cfg.abort_path, "w").close()
    st = open_store(cfg)
    after = (st.get_min_phy_offset(), st.get_max_phy_offset(),
             st.get_min_offset_in_queue("X", 0), st.get_max_offset_in_queue("X", 0),
             st.get_min_offset_in_queue("Y", 0), st.get_max_offset_in_queue("Y", 0))
    assert after == before
    assert st.get_message("g", "X", 0, 0, 1).status is G.OFFSET_TOO_SMALL
    low = after[2]
    assert st.get_message("g", "X", 0, low, 1).messages[0].body == body_of(0, low, 700)
    assert st.put_message(Message("X", b"next")).append_result.logics_offset == 200
