"""Long polling in the reader, with the real reput and reader processes and this test process
as the CommitLog writer (tests/integration/test_read_services.py has the harness): held pulls
woken by new data, also after the reput idled; waiting for a matching tag and for a new
queue; timing out with the empty status; arrivals published only while pulls are held."""
from __future__ import annotations

import time

import zmq

from core.log.dispatch import IDLE_AFTER_S
from core.meta.topics import TopicTable
from ipc.control_block import Word
from ipc.protocol import pack, unpack
from ipc.sockets import ipc_endpoint, make_socket
from tests.integration.harness import RawClient, wait_for
from tests.integration.test_read_services import pull, services, split_records  # noqa: F401


def test_long_polling_is_woken_by_new_data(services):
    h, w, c = services()
    w.put(5)
    w.wait_dispatched()
    t0 = time.monotonic()
    c.sock.send(pack({"op": "pull", "rid": 77, "group": "g", "topic": "T", "queue_id": 0,
                      "offset": 5, "poll_ms": 20000, "format": "raw"}))
    assert not c.sock.poll(300)                            # held: nothing to answer yet
    w.put(3, first=5)
    assert c.sock.poll(10000)
    rep, frames = unpack((reply := c.sock.recv_multipart())[0]), reply[1:]
    assert time.monotonic() - t0 < 5
    assert (rep["rid"], rep["status"], rep["count"]) == (77, "FOUND", 3)
    assert split_records(frames[0]) == [w.record(r) for r in w.records["T", 0][5:]]


def test_arrivals_are_published_only_while_the_reader_holds_pulls(services):
    """PULLS_HELD: with no pull held the reput publishes no arrivals (each one woke the reader
    for nothing); once a pull is held it does, and the held pull is answered."""
    h, w, c = services()
    w.put(2)
    w.wait_dispatched()
    sub = make_socket(zmq.Context.instance(), zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(ipc_endpoint(h.config.run_dir, "reput.pub"))
    try:
        time.sleep(0.3)                                        # the subscription reaches reput
        assert h.cb.get(Word.PULLS_HELD) == 0
        w.put(3, first=2)
        w.wait_dispatched()
        assert not sub.poll(300)                               # nobody waits: nothing sent
        c.sock.send(pack({"op": "pull", "rid": 79, "group": "g", "topic": "T", "queue_id": 0,
                          "offset": 5, "poll_ms": 20000, "format": "raw"}))
        assert wait_for(lambda: h.cb.get(Word.PULLS_HELD) == 1, 10)
        w.put(1, first=5)
        assert sub.poll(10000)
        assert unpack(sub.recv())["arrivals"] == [["T", 0, 6]]
        assert c.sock.poll(10000)
        rep = unpack(c.sock.recv_multipart()[0])
        assert (rep["rid"], rep["status"], rep["count"]) == (79, "FOUND", 1)
        assert wait_for(lambda: h.cb.get(Word.PULLS_HELD) == 0, 10)
    finally:
        sub.close(0)


def test_an_idle_reput_still_wakes_a_long_poll(services):
    """After a quiet IDLE_AFTER_S the reput reads CONFIRM every IDLE_INTERVAL_MS instead of
    every millisecond: a record written then still reaches a held pull."""
    h, w, c = services()
    w.put(2)
    w.wait_dispatched()
    c.sock.send(pack({"op": "pull", "rid": 78, "group": "g", "topic": "T", "queue_id": 0,
                      "offset": 2, "poll_ms": 20000, "format": "raw"}))
    assert not c.sock.poll(int((IDLE_AFTER_S + 0.3) * 1000))     # held while the reput idles
    w.put(1, first=2)
    assert c.sock.poll(10000)
    rep, frames = unpack((reply := c.sock.recv_multipart())[0]), reply[1:]
    assert (rep["rid"], rep["status"], rep["count"]) == (78, "FOUND", 1)
    assert split_records(frames[0]) == [w.record(w.records["T", 0][2])]


def test_long_polling_waits_for_a_matching_tag_and_for_a_new_queue(services):
    h, w, c = services()
    TopicTable.load(h.config.config_dir).set_queues("Fresh", 1)
    h.cb.set(Word.TOPICS_VERSION, 1)
    w.put(2, tags="A")
    w.wait_dispatched()
    c.sock.send(pack({"op": "pull", "rid": 1, "group": "g", "topic": "T", "queue_id": 0,
                      "offset": 0, "tag_filter": "B", "poll_ms": 20000}))
    assert wait_for(lambda: pull(c, topic="Fresh")[0]["status"] == "NO_MESSAGE_IN_QUEUE")
    c.sock.send(pack({"op": "pull", "rid": 2, "group": "g", "topic": "Fresh", "queue_id": 0,
                      "offset": 0, "poll_ms": 20000}))
    w.put(2, tags="A", first=2)                            # no match yet: still held
    w.wait_dispatched()
    assert not c.sock.poll(300)
    w.put(1, tags="B", first=4)
    w.put(1, topic="Fresh")
    got = {}
    for _ in range(2):
        assert c.sock.poll(10000)
        rep = unpack(c.sock.recv_multipart()[0])
        got[rep["rid"]] = rep
    assert (got[1]["status"], got[1]["count"], got[1]["messages"][0]["queue_offset"]) == ("FOUND", 1, 4)
    assert (got[2]["status"], got[2]["count"]) == ("FOUND", 1)


def test_long_polling_times_out_with_the_empty_status(services):
    h, w, c = services()
    w.put(2)
    w.wait_dispatched()
    t0 = time.monotonic()
    rep, frames = pull(c, offset=2, poll_ms=400)
    waited = time.monotonic() - t0
    assert (rep["status"], rep["next_begin_offset"], frames) == ("OFFSET_OVERFLOW_ONE", 2, [b""])
    assert 0.39 <= waited < 5
    rep, _ = pull(c, offset=0, tag_filter="X", poll_ms=300)
    assert (rep["status"], rep["next_begin_offset"]) == ("NO_MATCHED_MESSAGE", 2)


def test_a_consumer_that_left_with_a_held_pull_is_not_a_warning(services):
    # Regression: every `mqstore consume` that exits with a long poll held left a WARNING
    # "reply to a gone or full peer dropped (Host unreachable)" in reader.log; a consumer
    # leaving is ordinary, and the noise hid real problems.
    import os
    h, w, c = services()
    w.put(1)
    w.wait_dispatched()
    gone = RawClient(h.endpoint("reader"))
    gone.sock.send(pack({"op": "pull", "rid": 5, "group": "g", "topic": "T", "queue_id": 0,
                         "offset": 1, "poll_ms": 400, "format": "raw"}))
    assert wait_for(lambda: h.cb.get(Word.PULLS_HELD) == 1, 10)
    gone.close()
    assert wait_for(lambda: h.cb.get(Word.PULLS_HELD) == 0, 10)    # answered into the void
    assert pull(c, offset=0)[0]["status"] == "FOUND"                 # and still serving
    with open(os.path.join(h.config.logs_dir, "reader.log")) as f:
        assert "WARNING" not in f.read()
