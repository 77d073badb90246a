"""The write side as real processes (allocator, flusher, committer, appender) on tiny segments:
puts and batches under ASYNC_FLUSH and SYNC_FLUSH, rolling with blank records, the transient
pool, every malformed request answered, topics, FLUSH_DISK_TIMEOUT with a stopped flusher,
CREATE_MAPPED_FILE_FAILED with a stopped allocator, an appender killed and restarted, a full
disk. What was acknowledged is read back afterwards with `core.MessageStore` and checked with
`core.fsck`."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import msgpack
import pytest
import zmq

from core import MessageStore, fsck
from core.log.checkpoint import StoreCheckpoint
from core.record.codec import SCHEDULE_TOPIC
from core.files.fileops import REAL_FILE_OPS
from core.status import GetMessageStatus
from core.meta.topics import TopicTable
from ipc.control_block import Word
from ipc.protocol import ErrorCode, unpack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from tests.integration.harness import RawClient, ServiceHarness, small_tmpfs, wait_for

WRITE = ["allocator", "flusher", "appender"]
WRITE_POOL = ["allocator", "flusher", "committer", "appender"]
SEGMENT = 64 * 1024


@pytest.fixture
def config(tiny_config):
    def make(**overrides):
        cfg = tiny_config(**{"mapped_file_size_commitlog": SEGMENT, **overrides})
        os.makedirs(cfg.store_path_root_dir, exist_ok=True)
        return cfg
    return make


def body_of(tag: str, i: int, size: int) -> bytes:
    head = f"{tag}-{i}-".encode()
    return (head * (size // len(head) + 1))[:size]


def record_end(phys: int, body: bytes, topic: str) -> int:
    return phys + 91 + len(body) + len(topic.encode())       # no properties


def phys_of(msg_id: str) -> int:
    return int(msg_id[-16:], 16)


def read_back(config, topic: str, queue_id: int) -> list:
    """Every message of a queue, through the engine (its load dispatches what no reput did)."""
    store = MessageStore(config)
    store.load()
    out = []
    while (res := store.get_message("check", topic, queue_id, len(out), 32)).status is GetMessageStatus.FOUND:
        out += res.messages
    store.shutdown()
    return out


def assert_clean(config) -> None:
    report = fsck.check(config.store_path_root_dir)
    assert report.ok, report.format_text()


def put_ok(client, topic, body, **fields):
    reply, _ = client.call("put", [body], topic=topic, **fields)
    assert reply["status"] == "PUT_OK", reply
    return reply


# -- puts and batches --------------------------------------------------------------------
def test_async_puts_and_batches_roll_segments(config):
    cfg = config(flush_commitlog_least_pages=0)
    sent_a, sent_b = [], {}
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        for i in range(150):
            body = body_of("a", i, 900 + i)
            r = put_ok(c, "A", body, queue_id=0, tags="TagA", keys=["k", str(i)])
            assert r["queue_offset"] == i and r["queue_id"] == 0
            sent_a.append((body, r))
        for j in range(24):
            bodies = [body_of("b", j * 10 + k, 300 + 37 * k) for k in range(10)]
            r, _ = c.call("put_batch", [b"".join(bodies)], topic="B", sizes=[len(b) for b in bodies])
            assert r["status"] == "PUT_OK" and r["count"] == 10 and len(r["msg_ids"]) == 10, r
            assert r["queue_offset"] == (j // 4) * 10 and r["queue_id"] == j % 4
            assert phys_of(r["msg_ids"][0]) == r["phys_offset"]
            sent_b.setdefault(r["queue_id"], []).extend(bodies)
            if j % 4 == 3:                    # alike in topic "C", its ids as offsets
                o, _ = c.call("put_batch", [b"".join(bodies)], topic="C", sizes=[len(b) for b in bodies],
                              id_format="offsets")
                offsets = [int.from_bytes(o["phys_offsets"][i:i + 8], "big") for i in range(0, 80, 8)]
                assert "msg_ids" not in o and o["store_host"].hex().upper() == r["msg_ids"][0][:16]
                assert [b - a for a, b in zip(offsets, offsets[1:])] == \
                    [phys_of(y) - phys_of(x) for x, y in zip(r["msg_ids"], r["msg_ids"][1:])]
                assert offsets[0] == o["phys_offset"] and o["count"] == 10
        wrote = h.cb.get(Word.WROTE)
        assert h.cb.get(Word.COMMITTED) == wrote == h.cb.get(Word.CONFIRM)
        assert wait_for(lambda: h.cb.get(Word.FLUSHED) == wrote, 5)
        assert wrote > 4 * SEGMENT
        c.close()
    got = read_back(cfg, "A", 0)
    assert [m.body for m in got] == [b for b, _ in sent_a]
    assert [m.commit_log_offset for m in got] == [r["phys_offset"] for _, r in sent_a]
    assert got[7].tags == "TagA" and got[7].keys == "k 7" and got[7].born_host[0] == "127.0.0.1"
    for qid, bodies in sent_b.items():
        assert [m.body for m in read_back(cfg, "B", qid)] == bodies
    assert_clean(cfg)


def test_sync_flush_replies_only_after_the_flush(config):
    cfg = config(flush_disk_type="SYNC_FLUSH")
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        sock, pending = c.sock, {}
        for rid in range(1, 161):
            if rid % 4:
                body = body_of("s", rid, 700)
                sock.send_multipart([msgpack.packb({"op": "put", "rid": rid, "topic": "S"}), body])
                pending[rid] = [body]
            else:
                bodies = [body_of("s", rid * 100 + k, 200) for k in range(8)]
                sock.send_multipart([msgpack.packb({"op": "put_batch", "rid": rid, "topic": "S",
                                                    "sizes": [200] * 8}), b"".join(bodies)])
                pending[rid] = bodies
            if rid % 16 == 0:
                while pending:
                    assert sock.poll(10_000)
                    reply = unpack(sock.recv_multipart()[0])
                    flushed = h.cb.get(Word.FLUSHED)
                    bodies = pending.pop(reply["rid"])
                    assert reply["status"] == "PUT_OK", reply
                    last = phys_of(reply["msg_ids"][-1]) if "msg_ids" in reply else reply["phys_offset"]
                    assert record_end(last, bodies[-1], "S") <= flushed
        assert h.cb.get(Word.CONFIRM) == h.cb.get(Word.FLUSHED) == h.cb.get(Word.WROTE)
        r, _ = c.call("put", [b"nowait"], topic="S", wait=False)
        assert r["status"] == "PUT_OK"
        c.close()
    assert sum(len(read_back(cfg, "S", q)) for q in range(4)) == 120 + 40 * 8 + 1
    assert_clean(cfg)


def test_transient_pool_with_committer(config):
    cfg = config(transient_store_pool_enable=True, transient_store_pool_size=3,
                 flush_commitlog_least_pages=0)
    sent = []
    with ServiceHarness(cfg, WRITE_POOL) as h:
        c = RawClient(h.endpoint("appender"))
        for i in range(40):
            bodies = [body_of("p", i * 5 + k, 1000) for k in range(5)]
            r, _ = c.call("put_batch", [b"".join(bodies)], topic="P", queue_id=2, sizes=[1000] * 5)
            assert r["status"] == "PUT_OK" and r["queue_offset"] == i * 5, r
            sent += bodies
        wrote = h.cb.get(Word.WROTE)
        assert wrote > 3 * SEGMENT                             # buffers were returned and reused
        assert wait_for(lambda: h.cb.get(Word.COMMITTED) == wrote == h.cb.get(Word.CONFIRM), 5)
        assert wait_for(lambda: h.cb.get(Word.FLUSHED) == wrote, 5)
        lent = [i for i in range(3) if not h.cb.pool_is_free(i)]
        assert [h.cb.pool_lent(i) for i in lent] == [wrote - wrote % SEGMENT]
        c.close()
        for name in ("appender", "committer", "flusher", "allocator"):     # SIGTERM: drain, exit 0
            assert h.stop(name) == 0, name
    ckpt = StoreCheckpoint(cfg.checkpoint_path, REAL_FILE_OPS)
    assert ckpt.valid and ckpt.flushed_phy_offset == wrote and ckpt.physic_msg_timestamp > 0
    ckpt.shutdown()
    assert [m.body for m in read_back(cfg, "P", 2)] == sent
    assert_clean(cfg)


# -- errors ------------------------------------------------------------------------------
def test_malformed_requests_get_errors_and_the_appender_keeps_serving(config):
    cfg = config(max_message_size=2048)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        sock = c.sock

        def raw(*frames):
            sock.send_multipart(list(frames))
            assert sock.poll(5000)
            return unpack(sock.recv_multipart()[0])

        assert raw(b"\xc1garbage")["code"] == ErrorCode.MALFORMED_FRAME
        assert raw(msgpack.packb([1, 2]))["code"] == ErrorCode.MALFORMED_FRAME
        assert raw(msgpack.packb({"rid": 3}))["code"] == ErrorCode.BAD_FIELD
        cases = [
            (("nope", []), {}, ErrorCode.UNKNOWN_OP),
            (("put", [b"x"]), {"topic": 5}, ErrorCode.BAD_FIELD),
            (("put", [b"x"]), {}, ErrorCode.BAD_FIELD),
            (("put", [b"x"]), {"topic": "bad topic"}, ErrorCode.BAD_TOPIC),
            (("put", [b"x"]), {"topic": ""}, ErrorCode.BAD_TOPIC),
            (("put", [b"x"]), {"topic": "T", "queue_id": "0"}, ErrorCode.BAD_FIELD),
            (("put", [b"x"]), {"topic": "T", "queue_id": 4}, ErrorCode.BAD_FIELD),
            (("put", [b"x"]), {"topic": "T", "properties": {"a": 1}}, ErrorCode.BAD_FIELD),
            (("put", []), {"topic": "T"}, ErrorCode.TOO_MANY_FRAMES),
            (("put", [b"x", b"y"]), {"topic": "T"}, ErrorCode.TOO_MANY_FRAMES),
            (("put_batch", [b"abc"]), {"topic": "T", "sizes": [1, 1]}, ErrorCode.BAD_FIELD),
            (("put_batch", [b"abc"]), {"topic": "T", "sizes": "3"}, ErrorCode.BAD_FIELD),
            (("put_batch", [b"a", b"b"]), {"topic": "T", "sizes": [1]}, ErrorCode.TOO_MANY_FRAMES),
            (("put_batch", [b"ab"]), {"topic": "T", "sizes": [1, 1], "uniq_key_block": b"k1k"}, ErrorCode.BAD_FIELD),
            (("create_topic", []), {"topic": "N", "queues": 0}, ErrorCode.BAD_FIELD),
            (("create_topic", []), {"topic": "a/b", "queues": 2}, ErrorCode.BAD_TOPIC),
            (("create_topic", []), {"topic": "TBW102", "queues": 2}, ErrorCode.BAD_TOPIC),
            (("create_topic", []), {"topic": SCHEDULE_TOPIC}, ErrorCode.BAD_TOPIC),
            (("topic_info", []), {"topic": "Unknown"}, ErrorCode.NOT_FOUND),
        ]
        for (op, frames), fields, code in cases:
            reply, _ = c.call(op, frames, **fields)
            assert reply["status"] == "ERROR" and reply["code"] == code, (op, fields, reply)
            assert reply["rid"] == c.rid and reply["reason"]
        r, _ = c.call("put", [b"x"], topic="T", properties={"K": "v\x01w"})
        assert r["status"] == "MESSAGE_ILLEGAL"
        r, _ = c.call("put", [b"x"], topic="T", properties={"K": "v" * 40000})
        assert r["status"] == "PROPERTIES_SIZE_EXCEEDED"
        r, _ = c.call("put_batch", [b"xy"], topic="T", sizes=[1, 1], uniq_key_block=b"k1k\x02")
        assert r["status"] == "MESSAGE_ILLEGAL" and "message 1 of the batch" in r["reason"], r
        r, _ = c.call("put_batch", [b"x" * 3000], topic="T", sizes=[1500, 1500])
        assert r["status"] == "MESSAGE_ILLEGAL" and "max_message_size 2048" in r["reason"]
        # DESIGN section 5: a topic over 127 bytes or a body over max_message_size is the put
        # status MESSAGE_ILLEGAL (it was the protocol error ERROR BAD_TOPIC / BODY_TOO_LARGE
        # on `put` and on a batch holding one such body), with the code and reason kept.
        for op, frames, fields, code in (
                ("put", [b"x"], {"topic": "x" * 128}, ErrorCode.BAD_TOPIC),
                ("put", [b"x" * 2049], {"topic": "T"}, ErrorCode.BODY_TOO_LARGE),
                ("put_batch", [b"x" * 2049], {"topic": "T", "sizes": [2049]}, ErrorCode.BODY_TOO_LARGE),
                ("put_batch", [b"x"], {"topic": "y" * 200, "sizes": [1]}, ErrorCode.BAD_TOPIC)):
            r, _ = c.call(op, frames, **fields)
            assert r["status"] == "MESSAGE_ILLEGAL" and r["code"] == code and r["reason"], r
        assert put_ok(c, "T", b"still serving", queue_id=0)["queue_offset"] == 0
        h.cb.set(Word.WRITABLE, 0)
        assert c.call("put", [b"x"], topic="T")[0]["status"] == "SERVICE_NOT_AVAILABLE"
        assert c.call("put", [b"x" * 2049], topic="T")[0]["status"] == "SERVICE_NOT_AVAILABLE"
        h.cb.set(Word.WRITABLE, 1)
        assert put_ok(c, "T", b"again", queue_id=0)["queue_offset"] == 1
        c.close()


def test_a_record_larger_than_a_segment_says_why_it_is_refused(config):
    # Regression: with segments smaller than max_message_size, a put or batch that could not
    # fit one segment answered a bare MESSAGE_ILLEGAL (no code, no reason, nothing logged).
    cfg = config(max_message_size=4 * SEGMENT)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        for op, frames, fields in (("put", [b"x" * (SEGMENT + 10)], {}),
                                   ("put_batch", [b"y" * 2 * SEGMENT], {"sizes": [SEGMENT] * 2})):
            r, _ = c.call(op, frames, topic="T", **fields)
            assert r["status"] == "MESSAGE_ILLEGAL" and "would not fit in a CommitLog segment of " \
                f"{SEGMENT} bytes" in r["reason"], r
        assert put_ok(c, "T", b"still serving", queue_id=0)["queue_offset"] == 0
        c.close()


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_sync_master_without_a_slave_stores_and_answers_slave_not_available(config, flush):
    # Regression: broker_role SYNC_MASTER answered PUT_OK with no replica anywhere. RocketMQ's
    # SYNC_MASTER with no slave connected stores the message and answers SLAVE_NOT_AVAILABLE
    # (unless the put does not wait for the store's answer: WAIT false).
    cfg = config(broker_role="SYNC_MASTER", flush_disk_type=flush)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        r, _ = c.call("put", [b"one"], topic="M", queue_id=0)
        assert r["status"] == "SLAVE_NOT_AVAILABLE" and r["queue_offset"] == 0 and r["msg_id"], r
        r, _ = c.call("put_batch", [b"twothree"], topic="M", queue_id=0, sizes=[3, 5])
        assert r["status"] == "SLAVE_NOT_AVAILABLE" and r["queue_offset"] == 1 and len(r["msg_ids"]) == 2
        r, _ = c.call("put", [b"four"], topic="M", queue_id=0, wait=False)
        assert r["status"] == "PUT_OK" and r["queue_offset"] == 3, r
        c.close()
    assert [bytes(m.body) for m in read_back(cfg, "M", 0)] == [b"one", b"two", b"three", b"four"]


def test_topics_auto_created_and_created(config):
    cfg = config(default_topic_queue_nums=3)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        v0 = h.cb.get(Word.TOPICS_VERSION)
        assert [put_ok(c, "Auto", b"m")["queue_id"] for _ in range(4)] == [0, 1, 2, 0]
        assert c.call("topic_info", topic="Auto")[0] == {"rid": c.rid, "status": "OK", "topic": "Auto",
                                                         "queues": 3}
        assert c.call("create_topic", topic="Made", queues=8)[0]["queues"] == 8
        assert put_ok(c, "Made", b"m", queue_id=7)["queue_offset"] == 0
        assert c.call("create_topic", topic="Made", queues=2)[0]["status"] == "OK"
        assert c.call("put", [b"m"], topic="Made", queue_id=7)[0]["code"] == ErrorCode.BAD_FIELD
        # Without `queues`, create_topic is get-or-create with the store's default (a client
        # with a sharding key made new topics with its own constant, 4).
        assert c.call("create_topic", topic="Keyed")[0]["queues"] == 3
        assert c.call("create_topic", topic="Made")[0]["queues"] == 2
        assert h.cb.get(Word.TOPICS_VERSION) == v0 + 4
        assert TopicTable.load(cfg.config_dir).as_list() == [{"topic": "Auto", "queues": 3},
                                                             {"topic": "Keyed", "queues": 3},
                                                             {"topic": "Made", "queues": 2}]
        c.close()


# -- faults ------------------------------------------------------------------------------
def test_flush_disk_timeout_while_the_flusher_is_stopped(config):
    cfg = config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=400)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        put_ok(c, "F", b"before")
        flusher = h.procs["flusher"]
        os.kill(flusher.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            r, _ = c.call("put", [b"stuck"], topic="F", queue_id=1)
            assert r["status"] == "FLUSH_DISK_TIMEOUT" and r["queue_offset"] == 0, r
            assert 0.35 <= time.monotonic() - started < 5
            assert h.cb.get(Word.FLUSHED) <= r["phys_offset"]
            r2, _ = c.call("put", [b"no wait"], topic="F", queue_id=1, wait=False)
            assert r2["status"] == "PUT_OK" and r2["queue_offset"] == 1
        finally:
            os.kill(flusher.pid, signal.SIGCONT)
        assert put_ok(c, "F", b"after", queue_id=1)["queue_offset"] == 2
        assert h.cb.get(Word.FLUSHED) == h.cb.get(Word.WROTE)
        c.close()
    assert [m.body for m in read_back(cfg, "F", 1)] == [b"stuck", b"no wait", b"after"]


def test_a_failed_flush_stops_writes_and_exits_3(config):
    cfg = config(flush_commitlog_least_pages=0)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        put_ok(c, "X", b"durable")
        assert wait_for(lambda: h.cb.get(Word.FLUSHED) == h.cb.get(Word.WROTE), 5)
        flusher = h.procs["flusher"]
        os.kill(flusher.pid, signal.SIGSTOP)
        try:
            while h.cb.get(Word.WROTE) < SEGMENT + 1000:      # the appender rolls to segment 1
                put_ok(c, "X", b"y" * 1000)
            os.unlink(os.path.join(cfg.commitlog_dir, f"{SEGMENT:020d}"))
        finally:
            os.kill(flusher.pid, signal.SIGCONT)
        assert flusher.wait(10) == 3
        assert h.cb.get(Word.FLUSH_FAILED) == 1 and h.cb.get(Word.FLUSHED) <= SEGMENT
        assert c.call("put", [b"z"], topic="X")[0]["status"] == "SERVICE_NOT_AVAILABLE"
        c.close()


@pytest.mark.slow                      # waits out the appender's 5 s allocation timeout
def test_create_mapped_file_failed_while_the_allocator_is_stopped(config):
    cfg = config()
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        allocator = h.procs["allocator"]
        put_ok(c, "R", b"first")
        os.kill(allocator.pid, signal.SIGSTOP)
        try:
            results = []
            for i in range(80):                      # 80 KiB: the roll needs a new segment
                r, _ = c.call("put", [body_of("r", i, 1000)], topic="R", queue_id=0, timeout=15)
                results.append(r["status"])
                if r["status"] != "PUT_OK":
                    break
            assert results[-1] == "CREATE_MAPPED_FILE_FAILED" and results.count("PUT_OK") >= 50
        finally:
            os.kill(allocator.pid, signal.SIGCONT)
        r = put_ok(c, "R", b"after", queue_id=0)
        assert r["queue_offset"] == len(results) and r["phys_offset"] % SEGMENT == 0
        c.close()
    assert len(read_back(cfg, "R", 0)) == len(results) + 1
    assert_clean(cfg)


@pytest.mark.parametrize("pool", [False, True], ids=["direct", "pool"])
def test_appender_killed_and_restarted_resumes_offsets(config, pool):
    cfg = config(transient_store_pool_enable=pool)
    acked = []
    with ServiceHarness(cfg, WRITE_POOL if pool else WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        for i in range(70):
            body = body_of("k", i, 1500)
            acked.append(body)
            assert put_ok(c, "K", body, queue_id=1)["queue_offset"] == i
        wrote = h.cb.get(Word.WROTE)
        old = h.procs["appender"]
        old.send_signal(signal.SIGKILL)
        assert old.wait(10) == -signal.SIGKILL
        h.start("appender")
        assert h.cb.get(Word.WROTE) == wrote
        for i in range(70, 100):
            body = body_of("k", i, 1500)
            acked.append(body)
            assert put_ok(c, "K", body, queue_id=1)["queue_offset"] == i
        c.close()
    got = read_back(cfg, "K", 1)
    assert [m.body for m in got] == acked
    assert [m.queue_offset for m in got] == list(range(100))
    assert_clean(cfg)


@pytest.mark.parametrize("pool", [False, True], ids=["direct", "pool"])
def test_appender_killed_mid_stream_loses_nothing_acknowledged(config, pool):
    """Requests in flight when the appender dies: every PUT_OK is in the log at its queue
    offset, the queue has no gap, and puts after the restart continue right after it."""
    cfg = config(transient_store_pool_enable=pool)
    acked = {}                                        # queue offset -> bodies of the batch
    sent = {}
    with ServiceHarness(cfg, WRITE_POOL if pool else WRITE) as h:
        c = RawClient(h.endpoint("appender"))

        def collect(timeout_ms, until_rid=None):
            """Take replies until none comes for `timeout_ms`, or until the one to `until_rid`
            (kept aside, not collected)."""
            while c.sock.poll(timeout_ms):
                r = unpack(c.sock.recv_multipart()[0])
                if r["rid"] == until_rid:
                    return r
                if r["status"] == "PUT_OK":
                    assert r["queue_offset"] not in acked
                    acked[r["queue_offset"]] = sent[r["rid"]]
            assert until_rid is None, f"no reply to request {until_rid}"

        for rid in range(1, 301):
            bodies = [body_of("m", rid * 10 + k, 400) for k in range(10)]
            sent[rid] = bodies
            c.sock.send_multipart([msgpack.packb({"op": "put_batch", "rid": rid, "topic": "M",
                                                  "queue_id": 0, "sizes": [400] * 10}), b"".join(bodies)])
            if rid == 150:
                assert c.sock.poll(10_000)
                old = h.procs["appender"]
                old.send_signal(signal.SIGKILL)
                old.wait(10)
        collect(200)
        h.start("appender")
        # Requests still queued reach the new one, in order, then this put: its reply comes
        # after theirs.
        c.sock.send_multipart([msgpack.packb({"op": "put", "rid": 1000, "topic": "M", "queue_id": 0}),
                               b"after restart"])
        r = collect(10_000, until_rid=1000)
        before = len(acked)
        assert r["status"] == "PUT_OK", r
        c.close()
    got = read_back(cfg, "M", 0)
    assert [m.queue_offset for m in got] == list(range(len(got)))
    assert before >= 1 and got[-1].body == b"after restart" and r["queue_offset"] == len(got) - 1
    for offset, bodies in acked.items():
        assert [m.body for m in got[offset:offset + 10]] == bodies
    assert_clean(cfg)


def test_disk_full_then_space_again(config, tmp_path):
    with small_tmpfs(tmp_path, "448k") as mnt:
        cfg = config(store_path_root_dir=str(mnt / "store"))
        with ServiceHarness(cfg, WRITE) as h:
            c = RawClient(h.endpoint("appender"))
            statuses = []
            for i in range(600):
                r, _ = c.call("put", [body_of("d", i, 1000)], topic="D", queue_id=0)
                statuses.append(r["status"])
                if r["status"] != "PUT_OK":
                    break
            assert statuses[-1] == "CREATE_MAPPED_FILE_FAILED", statuses[-3:]
            assert h.cb.get(Word.DISK_FULL) == 1
            assert c.call("put", [b"x"], topic="D")[0]["status"] == "SERVICE_NOT_AVAILABLE"
            subprocess.run(["mount", "-o", "remount,size=2m", str(mnt)], check=True)
            assert wait_for(lambda: h.cb.get(Word.DISK_FULL) == 0, 10)
            assert put_ok(c, "D", b"room again", queue_id=0)["queue_offset"] == len(statuses) - 1
            c.close()
        assert len(read_back(cfg, "D", 0)) == len(statuses)
        assert_clean(cfg)


def test_stats_events_reach_the_supervisor_socket(config):
    cfg = config()
    with ServiceHarness(cfg, WRITE) as h:
        pull = make_socket(zmq.Context.instance(), zmq.PULL)
        bind_ipc(pull, ipc_endpoint(cfg.run_dir, "events"))
        c = RawClient(h.endpoint("appender"))
        try:
            deadline = time.monotonic() + 15
            seen = {}
            while time.monotonic() < deadline:
                put_ok(c, "Stats", b"x" * 10)
                if pull.poll(50):
                    event = unpack(pull.recv())
                    if event["event"] == "stats" and event["service"] == "appender" and event["puts"]:
                        seen = event
                        break
            assert seen["puts"]["Stats"] >= 1 and seen["bytes"]["Stats"] == 10 * seen["puts"]["Stats"]
            assert sum(seen["latency"]["PUT_OK"].values()) >= 1
        finally:
            c.close()
            pull.close(0)
