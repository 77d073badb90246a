"""The reput and reader processes, started for real (tests/integration/harness.py), with this
test process as the only CommitLog writer (core.log.commitlog.CommitLog on the same directory:
append, flush, then raise WROTE, COMMITTED, FLUSHED and CONFIRM in the control block).

Covered: pulls in order and byte for byte across many segment rolls, raw and fields formats,
tag filters, every pull status (long polling is in test_reader_long_polling.py), the
queries, consumer offsets across a restart, consumer lag, SIGKILL of reput and reader, bad
input, and that nothing past CONFIRM is ever served."""
from __future__ import annotations

import os
import signal
import struct
import time

import pytest
import zmq

from core.record.decode import decode_message
from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.log.consume_queue_store import ConsumeQueueStore
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from core.meta.topics import TopicTable
from ipc.control_block import Slot, Word
from ipc.protocol import ErrorCode, pack, unpack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from tests.integration.harness import RawClient, ServiceHarness, wait_for

SEG = 64 * 1024
CQ_FILE = 20 * 100


def make_config(tmp_path, **overrides) -> StoreConfig:
    values = dict(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=SEG,
                  mapped_file_size_consume_queue=CQ_FILE, max_hash_slot_num=64, max_index_num=256,
                  flush_interval_consume_queue=20, flush_consume_queue_thorough_interval=100)
    values.update(overrides)
    os.makedirs(values["store_path_root_dir"], exist_ok=True)
    return StoreConfig(**values)


class LogWriter:
    """The CommitLog writer for these tests, standing in for the appender."""

    def __init__(self, h: ServiceHarness):
        self.cb = h.cb
        self.commitlog = CommitLog(h.config, REAL_FILE_OPS)
        self.commitlog.queue.load()
        self.records: dict[tuple[str, int], list] = {}

    def put(self, n, topic="T", queue_id=0, tags=None, keys=None, confirm=True, size=60, first=0):
        results = []
        for i in range(first, first + n):
            body = (b"%s-%d-%06d|" % (topic.encode(), queue_id, i)) * (1 + size // 16)
            msg = Message(topic, body, queue_id=queue_id, tags=tags(i) if callable(tags) else tags,
                          keys=keys(i) if callable(keys) else keys, born_timestamp=1000 + i)
            res = self.commitlog.append(self.commitlog.prepare(msg))
            self.records.setdefault((topic, queue_id), []).append(res)
            results.append(res)
        while not self.commitlog.flush(0):
            pass
        if confirm:
            self.confirm()
        return results

    def confirm(self, upto=None):
        end = self.commitlog.get_max_offset() if upto is None else upto
        for word in (Word.WROTE, Word.COMMITTED, Word.FLUSHED, Word.CONFIRM):
            self.cb.raise_to(word, end)
        return end

    def record(self, res) -> bytes:
        return self.commitlog.read(res.wrote_offset, res.wrote_bytes)

    def wait_dispatched(self, timeout=20.0):
        end = self.cb.get(Word.CONFIRM)
        assert wait_for(lambda: self.cb.get(Word.DISPATCHED) >= end, timeout), \
            (self.cb.get(Word.DISPATCHED), end)


@pytest.fixture
def services(tmp_path):
    """(harness, writer, client) with reput and reader running."""
    def start(**overrides):
        h = ServiceHarness(make_config(tmp_path, **overrides), ["reput", "reader"])
        h.__enter__()
        started.append(h)
        return h, LogWriter(h), RawClient(h.endpoint("reader"))
    started = []
    yield start
    for h in started:
        h.__exit__(None, None, None)


def split_records(frame: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(frame):
        size = struct.unpack_from(">i", frame, pos)[0]
        out.append(frame[pos:pos + size])
        pos += size
    return out


def pull(client, topic="T", queue_id=0, offset=0, **kw):
    return client.call("pull", group="g", topic=topic, queue_id=queue_id, offset=offset, **kw)


def pull_all(client, topic="T", queue_id=0, fmt="raw", **kw):
    """Every message of a queue, pulled in batches: raw records or (metadata, body) pairs."""
    offset, out = 0, []
    while True:
        rep, frames = pull(client, topic, queue_id, offset, format=fmt, **kw)
        if rep["status"] == "FOUND":
            if fmt == "raw":
                out.extend(split_records(frames[0]))
            else:
                pos = 0
                for meta in rep["messages"]:
                    out.append((meta, frames[0][pos:pos + meta["body_size"]]))
                    pos += meta["body_size"]
        elif rep["status"] != "NO_MATCHED_MESSAGE":
            return out, rep
        offset = rep["next_begin_offset"]


def test_pulls_in_order_and_byte_identical_across_segment_rolls(services):
    h, w, c = services()
    w.put(1500, queue_id=0, tags="A")
    w.put(1500, queue_id=1, tags="B")
    w.put(1500, queue_id=0, tags="A", first=1500)
    assert len(w.commitlog.queue.files) > 8
    w.wait_dispatched()
    for queue_id, count in ((0, 3000), (1, 1500)):
        records, last = pull_all(c, queue_id=queue_id, fmt="raw", max_msgs=1024)
        assert last["status"] == "OFFSET_OVERFLOW_ONE" and last["next_begin_offset"] == count
        assert records == [w.record(r) for r in w.records["T", queue_id]]
        fields, _ = pull_all(c, queue_id=queue_id, fmt="fields", max_msgs=7)
        assert [m["queue_offset"] for m, _ in fields] == list(range(count))
        for (meta, body), res in zip(fields[::97], w.records["T", queue_id][::97]):
            msg = decode_message(w.record(res))
            assert body == msg.body and meta["msg_id"] == msg.msg_id == res.msg_id
            assert (meta["phys_offset"], meta["store_size"], meta["tags"], meta["queue_id"]) == \
                   (res.wrote_offset, res.wrote_bytes, msg.tags, queue_id)
    assert len(os.listdir(os.path.join(h.config.consumequeue_dir, "T", "0"))) == 30


def test_fields_format_carries_every_metadata_field(services):
    h, w, c = services()
    msg = Message("Meta", b"Once, there was a chance for me!", queue_id=2, flag=7, tags="TAG1",
                  keys="k1 k2", properties={"UNIQ_KEY": "U1", "color": "red"}, born_timestamp=42,
                  born_host=("10.0.0.9", 5555), reconsume_times=3)
    res = w.commitlog.append(w.commitlog.prepare(msg))
    w.put(0)
    w.wait_dispatched()
    rep, frames = pull(c, topic="Meta", queue_id=2)
    assert rep["status"] == "FOUND" and rep["count"] == 1 and frames == [msg.body]
    assert rep["messages"] == [{
        "topic": "Meta", "queue_id": 2, "queue_offset": 0, "phys_offset": 0,
        "store_size": res.wrote_bytes, "body_size": 32, "flag": 7, "tags": "TAG1", "keys": "k1 k2",
        "properties": {"UNIQ_KEY": "U1", "color": "red"}, "msg_id": res.msg_id,
        "born_timestamp": 42, "store_timestamp": res.store_timestamp, "born_host": "10.0.0.9:5555",
        "store_host": "127.0.0.1:10911", "sys_flag": 0, "reconsume_times": 3,
        "body_crc": decode_message(w.record(res)).body_crc}]


@pytest.mark.parametrize("at, bit", [(7, 4), (5, 1), (10, 3), (0, 6)])  # phys +16, far, size, sign
def test_a_damaged_entry_is_served_from_the_commitlog(services, at, bit):
    """A consume-queue entry damaged under the running reader: the pull finds its record in
    the CommitLog and serves it (core.read.rederive); the entry is the reput process's to write
    (`check --fix`), so the reader leaves its bytes."""
    h, w, c = services()
    for i in range(40):
        w.put(1, "T", i % 2, first=i, confirm=False)
    w.confirm()
    w.wait_dispatched()
    want, _ = pull_all(c, "T", 0, max_msgs=8)
    path = os.path.join(h.config.consumequeue_dir, "T", "0", "%020d" % 0)
    with open(path, "r+b") as f:
        f.seek(7 * 20 + at)
        b = f.read(1)[0]
        f.seek(7 * 20 + at)
        f.write(bytes([b ^ 1 << bit]))
    got, last = pull_all(c, "T", 0, max_msgs=8)
    assert got == want and last["status"] == "OFFSET_OVERFLOW_ONE", last
    rep, frames = pull(c, "T", 0, 7, max_msgs=1, format="raw")
    assert rep["status"] == "FOUND" and split_records(frames[0]) == want[7:8]


def test_tag_filter(services):
    h, w, c = services()
    w.put(300, tags=lambda i: "ABC"[i % 3])
    w.wait_dispatched()
    records, _ = pull_all(c, tag_filter="A || C", max_msgs=32)
    assert [decode_message(r).tags for r in records] == [t for t in "ABC" * 100 if t != "B"]
    rep, frames = pull(c, tag_filter="B", max_msgs=3, format="raw")
    assert rep["status"] == "FOUND" and rep["count"] == 3 and rep["next_begin_offset"] == 8
    assert [decode_message(r).queue_offset for r in split_records(frames[0])] == [1, 4, 7]
    rep, _ = pull(c, tag_filter="Z")
    assert rep["status"] == "NO_MATCHED_MESSAGE" and rep["next_begin_offset"] == 100   # one CQ file


def test_every_pull_status(services):
    h, w, c = services()
    w.put(250, tags="A", size=300)                         # queue 0: 3 CQ files, 2 segments
    w.put(250, queue_id=1, size=300)
    w.wait_dispatched()
    TopicTable.load(h.config.config_dir).set_queues("Empty", 2)
    h.cb.set(Word.TOPICS_VERSION, h.cb.get(Word.TOPICS_VERSION) + 1)
    status = lambda **kw: pull(c, **kw)[0]
    assert status(topic="Nope")["status"] == "NO_MATCHED_LOGIC_QUEUE"
    assert wait_for(lambda: status(topic="Empty", queue_id=1)["status"] == "NO_MESSAGE_IN_QUEUE")
    assert status(offset=250)["status"] == "OFFSET_OVERFLOW_ONE"
    rep = status(offset=999)
    assert (rep["status"], rep["next_begin_offset"]) == ("OFFSET_OVERFLOW_BADLY", 250)   # RocketMQ 5: max
    assert status(offset=3)["status"] == "FOUND"
    assert status(offset=3, tag_filter="B")["status"] == "NO_MATCHED_MESSAGE"
    # A consume-queue file that vanished: OFFSET_FOUND_NULL, continue at the next file.
    os.unlink(os.path.join(h.config.consumequeue_dir, "T", "0", "%020d" % CQ_FILE))
    rep = status(offset=150)
    assert (rep["status"], rep["next_begin_offset"]) == ("OFFSET_FOUND_NULL", 200)
    # A CommitLog segment that vanished before the reader mapped it: MESSAGE_WAS_REMOVING.
    first_segment = w.records["T", 1][0].wrote_offset // SEG * SEG
    os.unlink(os.path.join(h.config.commitlog_dir, "%020d" % first_segment))
    assert status(queue_id=1)["status"] == "MESSAGE_WAS_REMOVING"
    # Retention moved the log's start: the queue's min offset follows, OFFSET_TOO_SMALL below it.
    first_kept = w.records["T", 1][200].wrote_offset
    h.cb.set(Word.MIN_PHY, first_kept)
    rep = status(queue_id=1, offset=10)
    assert (rep["status"], rep["next_begin_offset"], rep["min_offset"]) == ("OFFSET_TOO_SMALL", 200, 200)


def test_queries(services):
    h, w, c = services()
    w.put(200, keys=lambda i: f"order-{i} batch-{i // 50}")
    w.put(20, queue_id=3, topic="Other", keys="order-5")
    w.wait_dispatched()
    rep, frames = c.call("query_by_key", topic="T", key="order-123")
    assert rep["status"] == "OK" and [m["queue_offset"] for m in rep["messages"]] == [123]
    assert frames == [decode_message(w.record(w.records["T", 0][123])).body]
    rep, _ = c.call("query_by_key", topic="T", key="batch-2", max_num=100)
    assert sorted(m["queue_offset"] for m in rep["messages"]) == list(range(100, 150))
    assert [m["queue_offset"] for m in c.call("query_by_key", topic="T", key="batch-2", max_num=3)[0]["messages"]] \
        == [149, 148, 147]                                 # newest first
    assert len(c.call("query_by_key", topic="Other", key="order-5")[0]["messages"]) == 20
    assert c.call("query_by_key", topic="T", key="none")[0]["messages"] == []
    res = w.records["T", 0][77]
    rep, frames = c.call("view_by_id", msg_id=res.msg_id)
    assert rep["messages"][0]["queue_offset"] == 77 and frames[0] == decode_message(w.record(res)).body
    assert c.call("view_by_id", msg_id=res.msg_id[:-1] + "F")[0]["code"] == 6
    assert c.call("view_by_id", msg_id="xyz")[0]["code"] == 3
    rep, _ = c.call("look_by_offset", phys_offset=res.wrote_offset)
    assert rep["messages"][0]["msg_id"] == res.msg_id
    assert c.call("look_by_offset", phys_offset=res.wrote_offset + 1)[0]["code"] == 6
    stamps = [r.store_timestamp for r in w.records["T", 0]]
    middle = stamps[100]
    rep, _ = c.call("offset_by_time", topic="T", queue_id=0, timestamp=middle)
    assert rep["offset"] == stamps.index(middle)
    assert c.call("offset_by_time", topic="T", queue_id=0, timestamp=0)[0]["offset"] == 0
    assert c.call("offset_by_time", topic="T", queue_id=0, timestamp=1 << 60)[0]["offset"] == 200
    assert c.call("queue_offsets", topic="T")[0]["queues"] == [{"queue_id": 0, "min_offset": 0, "max_offset": 200}]
    assert c.call("queue_offsets", topic="Other", queue_id=3)[0]["queues"] == \
        [{"queue_id": 3, "min_offset": 0, "max_offset": 20}]
    assert [q["max_offset"] for q in c.call("queue_offsets", topic="Other")[0]["queues"]] == [0, 0, 0, 20]
    assert c.call("queue_offsets", topic="Nope")[0]["code"] == 6
    assert c.call("topics")[0]["topics"] == [{"topic": "Other", "queues": 4}, {"topic": "T", "queues": 1}]
    assert c.call("topic_info", topic="Other")[0] == {"rid": c.rid, "status": "OK", "topic": "Other", "queues": 4,
                                                      "write_queues": 4}
    assert c.call("topic_info", topic="Nope")[0]["code"] == 6


def test_consumer_offsets_persist_across_reader_restarts_and_lag(services):
    h, w, c = services()
    w.put(30, queue_id=0)
    w.put(10, queue_id=1)
    w.wait_dispatched()
    assert c.call("fetch_offset", group="G1", topic="T", queue_id=0)[0]["offset"] == -1
    assert c.call("commit_offset", group="G1", topic="T", queue_id=0, offset=12)[0]["status"] == "OK"
    rep, _ = c.call("consumer_lag", group="G1", topic="T")
    assert rep["queues"] == [{"queue_id": 0, "consumer_offset": 12, "max_offset": 30, "lag": 18},
                             {"queue_id": 1, "consumer_offset": -1, "max_offset": 10, "lag": 10}]
    assert rep["total_lag"] == 28
    path = os.path.join(h.config.config_dir, "consumer_offsets.json")
    assert wait_for(lambda: os.path.exists(path) and b"12" in open(path, "rb").read(), 5)
    h.procs["reader"].send_signal(signal.SIGKILL)          # written already: survives a kill
    h.procs.pop("reader").wait()
    h.start("reader")
    assert c.call("fetch_offset", group="G1", topic="T", queue_id=0)[0]["offset"] == 12
    c.call("commit_offset", group="G1", topic="T", queue_id=1, offset=4)
    assert h.stop("reader") == 0                           # drain writes what is pending
    h.start("reader")
    assert c.call("fetch_offset", group="G1", topic="T", queue_id=1)[0]["offset"] == 4
    assert c.call("consumer_lag", group="G1", topic="T")[0]["total_lag"] == 24
    # Regression: a commit for a topic or queue the store does not have was saved (and
    # consumer_lag for it then answered NOT_FOUND); RocketMQ's broker refuses it too.
    for topic, queue_id in (("Nope", 0), ("T", 77)):
        rep, _ = c.call("commit_offset", group="G1", topic=topic, queue_id=queue_id, offset=1)
        assert (rep["status"], rep["code"]) == ("ERROR", ErrorCode.NOT_FOUND), rep
    assert h.stop("reader") == 0
    with open(path) as f:
        assert "Nope" not in f.read()


def test_bad_input_gets_error_replies_and_the_reader_keeps_serving(services):
    h, w, c = services()
    w.put(3)
    w.wait_dispatched()
    for frames, code in (([b"\xc1garbage"], 1), ([pack([1, 2])], 1), ([pack({"rid": 1})], 3),
                         ([b""], 1), ([pack({"op": "launch", "rid": 5})], 2)):
        c.sock.send_multipart(frames)
        assert c.sock.poll(5000)
        rep = unpack(c.sock.recv_multipart()[0])
        assert (rep["status"], rep["code"]) == ("ERROR", code), frames
    bad = [dict(topic="a/b"), dict(topic=""), dict(topic=5), dict(queue_id=-1), dict(offset="x"),
           dict(max_msgs=0), dict(max_msgs=5000), dict(format="xml"), dict(poll_ms=-1),
           dict(group="bad group")]
    for fields in bad:
        args = dict(group="g", topic="T", queue_id=0, offset=0)
        args.update(fields)
        rep, _ = c.call("pull", **args)
        assert rep["status"] == "ERROR" and rep["code"] in (3, 4), fields
    assert c.call("commit_offset", group="g", topic="T", queue_id=0, offset=-5)[0]["code"] == 3
    assert c.call("look_by_offset", phys_offset=(1 << 64) - 1)[0]["code"] == 3
    assert pull(c)[0]["status"] == "FOUND"
    assert h.procs["reader"].poll() is None


def test_nothing_beyond_confirm_is_served(services):
    h, w, c = services()
    first = w.put(10)
    hidden = w.put(10, first=10, confirm=False)            # written and flushed, not confirmed
    w.wait_dispatched()
    assert h.cb.get(Word.DISPATCHED) == first[-1].next_offset
    time.sleep(0.2)
    rep, frames = pull(c, max_msgs=32, format="raw")
    assert rep["count"] == 10 and rep["max_offset"] == 10
    assert c.call("look_by_offset", phys_offset=hidden[0].wrote_offset)[0]["code"] == 6
    assert c.call("view_by_id", msg_id=hidden[3].msg_id)[0]["code"] == 6
    w.confirm(hidden[4].next_offset)                       # half of them
    w.wait_dispatched()
    rep, _ = pull(c, offset=10, max_msgs=32)
    assert rep["count"] == 5 and rep["max_offset"] == 15
    assert c.call("look_by_offset", phys_offset=hidden[5].wrote_offset)[0]["code"] == 6


def consume_queue_entries(cfg, topic, queue_id):
    cqs = ConsumeQueueStore(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue, REAL_FILE_OPS)
    cqs.load()
    cq = cqs.find(topic, queue_id)
    cq.recover()
    n = cq.get_max_offset_in_queue()
    out = [cq.get_entry(i) for i in range(n)]
    cqs.shutdown()
    return out


def test_reput_and_reader_killed_and_restarted(services):
    h, w, c = services()
    for round_ in range(3):
        w.put(3000, queue_id=0, first=round_ * 3000, size=20)
        w.put(1000, queue_id=1, first=round_ * 1000, size=20)
        # Kill the reput while it dispatches this round (or right after it).
        assert wait_for(lambda: h.cb.get(Word.DISPATCHED) > w.records["T", 0][round_ * 3000].wrote_offset, 20)
        h.procs["reput"].send_signal(signal.SIGKILL)
        h.procs.pop("reput").wait()
        assert h.cb.get(Word.DISPATCHED_DURABLE) <= h.cb.get(Word.DISPATCHED)
        h.procs["reader"].send_signal(signal.SIGKILL)
        h.procs.pop("reader").wait()
        h.start("reput")
        h.start("reader")
        w.wait_dispatched(60)
    for queue_id, count in ((0, 9000), (1, 3000)):
        expect = [(r.wrote_offset, r.wrote_bytes) for r in w.records["T", queue_id]]
        assert [e[:2] for e in consume_queue_entries(h.config, "T", queue_id)] == expect
        records, last = pull_all(c, queue_id=queue_id, fmt="raw", max_msgs=1024)
        assert len(records) == count and last["max_offset"] == count
        assert records[::500] == [w.record(r) for r in w.records["T", queue_id][::500]]
    h.stop("reput")
    assert h.cb.get(Word.DISPATCHED_DURABLE) == h.cb.get(Word.CONFIRM)


def test_end_to_end_with_the_write_services(tmp_path):
    """Puts through the appender, pulls through the reader: a held pull wakes on the put."""
    cfg = make_config(tmp_path)
    with ServiceHarness(cfg, ["allocator", "flusher", "reput", "appender", "reader"]) as h:
        producer, consumer = RawClient(h.endpoint("appender")), RawClient(h.endpoint("reader"))
        assert producer.call("create_topic", topic="E2E", queues=2)[0]["status"] == "OK"
        consumer.sock.send(pack({"op": "pull", "rid": 9, "group": "g", "topic": "E2E", "queue_id": 1,
                                 "offset": 0, "poll_ms": 20000, "format": "raw"}))
        assert not consumer.sock.poll(200)
        t0 = time.monotonic()
        sent = []
        for i in range(40):
            bodies = [b"e2e-%03d-%03d" % (i, j) * 10 for j in range(50)]
            rep, _ = producer.call("put_batch", [b"".join(bodies)], topic="E2E", queue_id=1,
                                   sizes=[len(b) for b in bodies], messages=[{"tags": "X"}] * 50)
            assert rep["status"] == "PUT_OK", rep
            sent += bodies
        assert consumer.sock.poll(10000)
        first = unpack(consumer.sock.recv_multipart()[0])
        assert first["rid"] == 9 and first["status"] == "FOUND" and time.monotonic() - t0 < 10
        assert wait_for(lambda: pull(consumer, topic="E2E", queue_id=1, offset=1999)[0]["status"] == "FOUND")
        got, last = pull_all(consumer, topic="E2E", queue_id=1, fmt="fields", max_msgs=1024)
        assert [body for _, body in got] == sent and last["status"] == "OFFSET_OVERFLOW_ONE"
        assert h.stop("appender") == 0 and h.stop("flusher") == 0 and h.stop("reput") == 0
        assert h.cb.get(Word.DISPATCHED_DURABLE) == h.cb.get(Word.CONFIRM) == h.cb.get(Word.WROTE)


def test_reput_far_behind_reports_recovering_while_it_catches_up(tmp_path):
    cfg = make_config(tmp_path)
    with ServiceHarness(cfg, ["reader"]) as h:
        events = make_socket(zmq.Context.instance(), zmq.PULL)
        bind_ipc(events, ipc_endpoint(cfg.run_dir, "events"))
        w, c = LogWriter(h), RawClient(h.endpoint("reader"))
        TopicTable.load(cfg.config_dir).set_queues("T", 1)    # as the appender does on a first put
        h.cb.set(Word.TOPICS_VERSION, 1)
        w.put(6000, size=40)                               # far more than four segments
        assert w.cb.get(Word.CONFIRM) > 4 * SEG
        c.sock.send(pack({"op": "pull", "rid": 3, "group": "g", "topic": "T", "queue_id": 0,
                          "offset": 0, "poll_ms": 30000, "format": "raw"}))
        h.start("reput")
        seen = []
        while events.poll(10000):                          # until the reput says it runs
            event = unpack(events.recv())
            if event["service"] == "reput":
                seen.append(event)
                if event["event"] == "running":
                    break
        assert [e["event"] for e in seen][:3] == ["starting", "recovering", "running"]
        assert seen[1]["total"] == w.cb.get(Word.CONFIRM)
        total = h.cb.slot_get("reput", Slot.PROGRESS_TOTAL)
        assert total == seen[1]["total"] and h.cb.slot_get("reput", Slot.PROGRESS_DONE) == total
        assert h.cb.get(Word.DISPATCHED) == w.cb.get(Word.CONFIRM)
        assert c.sock.poll(10000)                          # the held pull was answered meanwhile
        assert unpack(c.sock.recv_multipart()[0])["status"] == "FOUND"
        events.close(0)
