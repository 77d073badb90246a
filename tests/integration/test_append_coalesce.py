"""Combined put replies (docs/PROTOCOL.md, "Combined replies"), with the real write services:
under SYNC_FLUSH, puts parked while the flusher is stopped are answered in one round when it
resumes, so a client that asked for it gets them in one message, and a client that did not
gets one message per reply."""
from __future__ import annotations

import os
import signal
import time

from ipc.control_block import Word
from ipc.protocol import pack, unpack
from tests.integration.harness import RawClient, ServiceHarness, wait_for
from tests.integration.test_write_services import WRITE, config, put_ok, read_back, record_end  # noqa: F401


def park_puts(h, client, rids, coalesce):
    """Send puts (the last one a batch) while the flusher is stopped, then let it go."""
    flusher = h.procs["flusher"]
    os.kill(flusher.pid, signal.SIGSTOP)
    try:
        end = h.cb.get(Word.WROTE)
        for rid in rids[:-1]:
            client.sock.send_multipart([pack({"op": "put", "rid": rid, "topic": "C", "queue_id": 0,
                                              "coalesce": coalesce}), b"body-%d" % rid])
            end = record_end(end, b"body-%d" % rid, "C")
        client.sock.send_multipart([pack({"op": "put_batch", "rid": rids[-1], "topic": "C",
                                          "queue_id": 0, "sizes": [2, 2], "coalesce": coalesce}),
                                    b"b1b2"])
        end = record_end(record_end(end, b"b1", "C"), b"b2", "C")
        assert wait_for(lambda: h.cb.get(Word.WROTE) >= end)      # all appended and parked
        assert not client.sock.poll(100)                           # none answered
    finally:
        os.kill(flusher.pid, signal.SIGCONT)


def receive(client, timeout=10.0) -> list:
    assert client.sock.poll(timeout * 1000)
    return client.sock.recv_multipart()


def test_parked_replies_come_in_one_message_to_a_client_that_asks(config):
    cfg = config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=10_000)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        first = put_ok(c, "C", b"first", queue_id=0, coalesce=True)   # one reply: a single message
        park_puts(h, c, [101, 102, 103, 104], True)
        frames = receive(c)
        assert frames[0] == b""
        replies = [unpack(f) for f in frames[1:]]
        assert [r["rid"] for r in replies] == [101, 102, 103, 104]
        assert all(r["status"] == "PUT_OK" for r in replies)
        assert [r["queue_offset"] for r in replies] == [1, 2, 3, 4]
        assert replies[-1]["count"] == 2 and len(replies[-1]["msg_ids"]) == 2
        assert first["queue_offset"] == 0
        # Another client, which did not ask: one message per reply.
        other = RawClient(h.endpoint("appender"))
        park_puts(h, other, [201, 202, 203], False)
        singles = [receive(other) for _ in range(3)]
        assert all(len(m) == 1 for m in singles)
        assert sorted(unpack(m[0])["rid"] for m in singles) == [201, 202, 203]
        c.close()
        other.close()
    bodies = [m.body for m in read_back(cfg, "C", 0)]
    assert bodies == [b"first", b"body-101", b"body-102", b"body-103", b"b1", b"b2",
                      b"body-201", b"body-202", b"b1", b"b2"]


def test_the_producer_takes_combined_replies(tmp_path):
    """ipc.Producer asks for combined replies: puts parked while the flusher is stopped come
    back in one message, and every future gets its own result."""
    from ipc import Producer
    from tests.integration.supervised import SupervisedStore
    store = SupervisedStore(tmp_path, flush_disk_type="SYNC_FLUSH", sync_flush_timeout=10_000).start()
    try:
        with Producer(store.address, auto_batch=False) as p:     # one put per send_async
            warm = p.send("P", b"warm", queue_id=0)
            assert warm.ok
            wrote = store.status()["positions"]["wrote"]
            record = wrote - warm.phys_offset - 2       # each of the 8 below: a body 2 bytes shorter
            flusher = store.service("flusher")["pid"]
            os.kill(flusher, signal.SIGSTOP)
            try:
                futures = [p.send_async("P", b"m%d" % i, queue_id=0) for i in range(5)]
                futures.append(p.send_batch_async("P", [b"b1", b"b2", b"b3"], queue_id=0))
                assert wait_for(lambda: store.status()["positions"]["wrote"] >= wrote + 8 * record)
                time.sleep(0.1)                          # all appended and parked: none answered
                assert not any(f.done() for f in futures)
            finally:
                os.kill(flusher, signal.SIGCONT)
            results = [f.result(timeout=10) for f in futures]
        assert all(r.ok for r in results)
        assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5, 6]
        assert results[-1].count == 3 and len(results[-1].msg_ids) == 3
    finally:
        store.ensure_stopped()


def test_a_long_async_round_is_answered_before_its_end(config):
    """Under ASYNC_FLUSH a client with EARLY_REPLIES requests in a round gets their replies
    then, not at the round's end: 120 batches queued while the appender was stopped (one
    round) come back in several messages, so a producer with a window in flight can send
    again while the rest is appended."""
    cfg = config(mapped_file_size_commitlog=64 << 20)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        put_ok(c, "L", b"first", queue_id=0, coalesce=True)
        appender = h.procs["appender"]
        bodies = b"".join(b"%04d" % i * 256 for i in range(32))
        os.kill(appender.pid, signal.SIGSTOP)
        try:
            for rid in range(1, 121):
                c.sock.send_multipart([pack({"op": "put_batch", "rid": rid, "topic": "L", "queue_id": 0,
                                             "sizes": [1024] * 32, "coalesce": True}), bodies])
            time.sleep(0.5)                                  # all of them queued at the appender
        finally:
            os.kill(appender.pid, signal.SIGCONT)
        replies, messages = [], 0
        while len(replies) < 120:
            frames = receive(c)
            messages += 1
            replies.extend(unpack(f) for f in (frames[1:] if frames[0] == b"" else frames))
        assert [r["rid"] for r in replies] == list(range(1, 121))
        assert all(r["status"] == "PUT_OK" for r in replies)
        assert messages > 1                                  # answered before the round ended
