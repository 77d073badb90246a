"""The client library (ipc.Producer, ipc.Consumer, ipc.Admin) and the client commands
(`mqstore produce|consume|query|topics`) against a real supervised store started with
`python -m supervisor.cli start --port 0`: what is produced is consumed byte for byte with its
metadata, queue selection, statuses for refused messages, group offsets across consumers,
tag filters, seeks, long polling, queries, topics, and a killed appender that the client
rides over."""
from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from core.record.message import Message
from core.status import PutMessageStatus
from ipc import Admin, Consumer, Producer
from ipc.connection import MQError, PeerUnreachable
from ipc.producer import shard_queue
from ipc.protocol import ErrorCode
from tests.integration.harness import wait_for
from tests.integration.supervised import REPO, SupervisedStore, free_port_block

CONFIG = {"mapped_file_size_commitlog": 512 * 1024, "max_message_size": 128 * 1024}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("clients"), **CONFIG).start()
    yield s
    s.ensure_stopped()


@pytest.fixture
def producer(store):
    with Producer(store.address) as p:
        yield p


@pytest.fixture
def admin(store):
    with Admin(store.address) as a:
        yield a


def consume(consumer: Consumer, n: int, timeout: float = 15.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += consumer.poll(200)
    return out


def test_roundtrip_with_metadata(store, producer):
    r = producer.send("rt", b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"})
    assert r.ok and r.count == 1 and len(r.msg_id) == 32 and len(r.uniq_key) == 32
    b = producer.send_batch("rt", [b"one", Message("rt", b"two", tags="TagB", keys="k3"), "three"], queue_id=r.queue_id)
    assert b.ok and b.count == 3 and len(b.msg_ids) == 3 and b.queue_id == r.queue_id
    with Consumer(store.address, "g-rt", "rt", auto_commit=False) as c:
        got = consume(c, 4)
    assert [m.body for m in got] == [b"hello", b"one", b"two", b"three"]
    first = got[0]
    assert (first.topic, first.tags, first.keys, first.properties["color"]) == ("rt", "TagA", "k1 k2", "red")
    assert first.uniq_key == r.uniq_key and first.msg_id == r.msg_id
    assert (first.queue_id, first.queue_offset, first.phys_offset) == (r.queue_id, r.queue_offset, r.phys_offset)
    assert [m.msg_id for m in got[1:]] == b.msg_ids
    assert [m.uniq_key for m in got[1:]] == b.uniq_keys
    assert got[2].tags == "TagB" and got[2].keys == "k3"
    assert [m.queue_offset for m in got] == list(range(r.queue_offset, r.queue_offset + 4))
    assert all(m.store_timestamp >= m.born_timestamp - 1000 for m in got)


def test_async_sends_keep_many_in_flight(store, producer):
    futs = [producer.send_batch_async("flight", [b"m%05d" % (i * 10 + j) for j in range(10)]) for i in range(200)]
    futs += [producer.send_async("flight", b"single%d" % i) for i in range(200)]
    results = [f.result() for f in futs]
    assert all(r.ok for r in results)
    ids = [i for r in results for i in r.msg_ids]
    assert len(set(ids)) == 2200
    with Consumer(store.address, "g-flight", "flight", max_msgs=64) as c:
        got = consume(c, 2200)
    assert len(got) == 2200 and len({m.uniq_key for m in got}) == 2200


def test_queue_selection(store, producer):
    keyed = [producer.send("sel", b"%d" % i, sharding_key="order-7") for i in range(20)]
    assert {r.queue_id for r in keyed} == {shard_queue("order-7", 4)}
    assert [r.queue_offset for r in keyed] == sorted(r.queue_offset for r in keyed)
    spread = [producer.send("sel", b"rr") for _ in range(8)]
    assert sorted(r.queue_id for r in spread) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert producer.send("sel", b"x", queue_id=2).queue_id == 2
    batch = producer.send_batch("sel", [b"a", b"b"], sharding_key="order-7")
    assert batch.queue_id == shard_queue("order-7", 4)
    created = producer.send("sel-new", b"x", sharding_key="k")     # unknown topic: created first
    assert created.ok and created.queue_id == shard_queue("k", 4)


def test_refused_messages_are_statuses(store, producer):
    r = producer.send("sel", b"x", queue_id=99)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.error_code is ErrorCode.BAD_FIELD
    for key in (None, "k"):
        r = producer.send("bad topic!", b"x", sharding_key=key)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.error_code is ErrorCode.BAD_TOPIC
    r = producer.send("big", b"x" * (CONFIG["max_message_size"] + 1))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.error_code is ErrorCode.BODY_TOO_LARGE
    r = producer.send_batch("big", [b"x" * 60_000] * 3, queue_id=0)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and not r.msg_ids
    for delayed in ([Message("big", b"a", properties={"DELAY": "2"}), b"b"],     # RocketMQ: no delay
                    [Message("big", b"%d" % i, properties={"DELAY": "2"}) for i in range(3)]):   # in a batch
        r = producer.send_batch("big", delayed, queue_id=0)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and not r.msg_ids
        assert r.reason.startswith("message 0 of the batch: a batch takes no delay level"), r
    for kw in ({"keys": "a\x01b"}, {"tags": "t\x02"}, {"properties": {"p": "\x01"}}):
        r = producer.send("big", b"x", **kw)            # RocketMQ's separators: refused, and why
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "\\x01 or \\x02" in r.reason, r
    with pytest.raises(TypeError):
        producer.send("big", 12345)
    assert producer.send("big", b"fine").ok                     # nothing above broke the producer


def test_group_offsets_resume_and_latest(store, producer):
    producer.send_batch("grp", [b"%d" % i for i in range(10)], queue_id=0)
    first = []
    with Consumer(store.address, "g-grp", "grp") as c:
        deadline = time.monotonic() + 10
        while len(first) < 4 and time.monotonic() < deadline:
            first += c.poll(200, max_records=4 - len(first))
        assert c.positions()[0] == 4
    assert [m.body for m in first] == [b"0", b"1", b"2", b"3"]
    with Consumer(store.address, "g-grp", "grp") as c:
        assert c.committed()[0] == 4
        rest = consume(c, 6)
    assert [m.body for m in rest] == [b"%d" % i for i in range(4, 10)]
    with Consumer(store.address, "g-grp-late", "grp", start="latest") as c:
        assert c.poll(300) == []
        producer.send("grp", b"new", queue_id=0)
        got = consume(c, 1)
    assert [m.body for m in got] == [b"new"]


def test_max_records_and_manual_commit(store, producer, admin):
    producer.send_batch("man", [b"%d" % i for i in range(8)], queue_id=1)
    with Consumer(store.address, "g-man", "man", queues=[1], auto_commit=False) as c:
        deadline = time.monotonic() + 10
        got = []
        while not got and time.monotonic() < deadline:
            got = c.poll(200, max_records=3)
        assert [m.body for m in got] == [b"0", b"1", b"2"]
        assert c.commit() == {1: 3}
    assert admin.fetch_offset("g-man", "man", 1) == 3
    lag = admin.consumer_lag("g-man", "man")
    assert lag["total_lag"] == 5 and {q["queue_id"]: q["lag"] for q in lag["queues"]}[1] == 5
    every = admin.consumer_lag("g-man")                   # the group's progress on every topic
    assert list(every["topics"]) == ["man"] and every["topics"]["man"] == lag and every["total_lag"] == 5


def test_tag_filter(store, producer):
    items = [Message("tags", b"%d" % i, tags=("TagA", "TagB", "TagC")[i % 3]) for i in range(30)]
    producer.send_batch("tags", items, queue_id=0)
    with Consumer(store.address, "g-tags", "tags", tag_filter="TagA || TagC") as c:
        got = consume(c, 20)
        assert c.poll(200) == []
    assert [m.tags for m in got] == [("TagA", "TagC")[i % 2] for i in range(20)]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_seek_to_timestamp_and_beginning(store, producer):
    old = producer.send_batch("seek", [b"old%d" % i for i in range(5)], queue_id=0)
    assert wait_for(lambda: now_ms() > old.store_timestamp)
    middle = now_ms()
    assert wait_for(lambda: now_ms() > middle)
    producer.send_batch("seek", [b"new%d" % i for i in range(3)], queue_id=0)
    with Consumer(store.address, "g-seek", "seek", auto_commit=False) as c:
        assert len(consume(c, 8)) == 8
        c.seek_to_timestamp(middle)
        assert [m.body for m in consume(c, 3)] == [b"new0", b"new1", b"new2"]
        c.seek_to_beginning()
        assert len(consume(c, 8)) == 8
        with pytest.raises(ValueError):
            c.seek(42, 0)


def dispatched(admin: Admin, result) -> bool:
    """Whether the message(s) of a SendResult are in their consume queue (visible to pulls)."""
    [q] = admin.queue_offsets(result.topic, result.queue_id)
    return q["max_offset"] >= result.queue_offset + result.count


def test_long_polling_wakes_on_arrival(store, producer, admin):
    before = producer.send("lp", b"before")
    assert wait_for(lambda: dispatched(admin, before))       # "latest" starts after it
    with Consumer(store.address, "g-lp", "lp", start="latest") as c:
        assert c.poll(300) == []                          # pulls of every queue now held
        timer = threading.Timer(0.3, lambda: producer.send("lp", b"late"))
        t0 = time.monotonic()
        timer.start()
        got = c.poll(5000)
        took = time.monotonic() - t0
        timer.join()
    assert [m.body for m in got] == [b"late"] and took < 2.0


def test_consumer_waits_for_a_topic_that_does_not_exist_yet(store, producer):
    with Consumer(store.address, "g-later", "later") as c:
        assert c.assignment() == [] and c.poll(100) == [] and c.caught_up
        producer.send("later", b"first")
        got = consume(c, 1)
    assert [m.body for m in got] == [b"first"]


def test_iteration(store, producer):
    producer.send_batch("iter", [b"%d" % i for i in range(5)], queue_id=0)
    seen = []
    with Consumer(store.address, "g-iter", "iter") as c:
        for m in c:
            seen.append(m.body)
            if len(seen) == 5:
                break
    assert seen == [b"%d" % i for i in range(5)]


def test_admin(store, producer, admin):
    assert admin.create_topic("adm", 3) == {"topic": "adm", "queues": 3}
    assert admin.topic_info("adm") == {"topic": "adm", "queues": 3, "write_queues": 3} and admin.topic_info("no-such") is None
    assert "adm" in admin.topics() and admin.topics()["adm"] == 3
    r = producer.send("adm", b"find me", keys="order-9 other", queue_id=2)
    assert wait_for(lambda: admin.query_by_key("adm", "order-9"), 10)
    [m] = admin.query_by_key("adm", "order-9")
    assert (m.body, m.msg_id, m.keys, m.queue_id) == (b"find me", r.msg_id, "order-9 other", 2)
    assert admin.query_by_key("adm", r.uniq_key)[0].msg_id == r.msg_id
    assert admin.view_by_id(r.msg_id).body == b"find me"
    # A queried message has phys_offset as a pulled one does (it had only commit_log_offset).
    assert m.phys_offset == m.commit_log_offset == admin.view_by_id(r.msg_id).phys_offset == r.phys_offset
    assert admin.look_by_offset(r.phys_offset).msg_id == r.msg_id
    assert admin.view_by_id("7F00000100002A9F7FFFFFFFFFFFFFFF") is None
    assert admin.offset_by_time("adm", 2, 0) == 0
    assert admin.queue_offsets("adm", 2) == [{"queue_id": 2, "min_offset": 0, "max_offset": 1}]
    admin.commit_offset("g-adm", "adm", 2, 1)
    assert admin.fetch_offset("g-adm", "adm", 2) == 1
    with pytest.raises(MQError) as info:
        admin.queue_offsets("no-such")
    assert info.value.code is ErrorCode.NOT_FOUND
    st = admin.status()
    assert {s["name"] for s in st["services"]} >= {"appender", "reader"} and "positions" in st


def run_cli(*args, stdin: str | None = None, timeout: float = 60.0):
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args], cwd=REPO, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_cli_produce_consume_query_topics(store, tmp_path):
    a = ["--address", store.address]
    p = run_cli("produce", "--topic", "cli", "--body", "hi there", "--tags", "T1", "--keys", "ck1",
                "--count", "3", *a)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("PUT_OK ") for line in lines)
    msg_id = lines[0].split()[1]
    p = run_cli("produce", "--topic", "cli", "--batch", "4", "--queue", "1", "--quiet", *a,
                stdin="l1\nl2\n\nl3\nl4\nl5\n")
    assert p.returncode == 0 and p.stdout == "" and "5 of 5 messages stored" in p.stderr
    assert "1 empty line skipped" in p.stderr, p.stderr          # was stored as an empty body
    c = run_cli("consume", "--topic", "cli", "--group", "gc", "--json", *a)
    assert c.returncode == 0, c.stderr
    rows = [json.loads(line) for line in c.stdout.splitlines()]
    assert sorted(r["body"] for r in rows) == ["hi there"] * 3 + ["l1", "l2", "l3", "l4", "l5"]
    assert {r["tags"] for r in rows if r["body"] == "hi there"} == {"T1"}
    again = run_cli("consume", "--topic", "cli", "--group", "gc", *a)
    assert again.returncode == 0 and again.stdout == ""               # offsets were committed
    capped = run_cli("consume", "--topic", "cli", "--group", "gc2", "--max", "2", *a)
    assert len(capped.stdout.splitlines()) == 2 and "\t" in capped.stdout
    q = run_cli("query", "--topic", "cli", "--key", "ck1", "--json", *a)
    assert q.returncode == 0 and len(q.stdout.splitlines()) == 3
    q = run_cli("query", "--id", msg_id, *a)
    assert q.returncode == 0 and "hi there" in q.stdout and msg_id in q.stdout
    q = run_cli("query", "--topic", "cli", "--key", "absent", *a)
    assert q.returncode == 1
    t = run_cli("topics", "--create", "cli-made", "--queues", "2", *a)
    assert t.returncode == 0 and "2 queues" in t.stdout
    # Regression: --create without --queues sent 4 and changed an existing topic's count.
    t = run_cli("topics", "--create", "cli-made", *a)
    assert t.returncode == 0 and "2 queues" in t.stdout, t.stdout
    t = run_cli("topics", "--json", *a)
    rows = {r["topic"]: r for r in map(json.loads, t.stdout.splitlines())}
    assert rows["cli-made"]["queues"] == 2 and rows["cli"]["messages"] == 8
    t = run_cli("topics", "--offsets", "--store", store.root)
    # Regression: offsets were printed half-open ("0..5" for 5 messages, "0..0" for none)
    # while produce prints them inclusive ("offsets 0..4 (5 messages)").
    last, count = map(int, re.search(r"queue 1: offsets 0\.\.(\d+) \((\d+) messages\)", t.stdout).groups())
    assert t.returncode == 0 and count == last + 1 >= 5, t.stdout
    assert re.search(r"cli-made +2 +0\n +queue 0: empty \(next offset 0\)\n +queue 1: empty "
                     r"\(next offset 0\)\n", t.stdout), t.stdout
    # Regression: a refused put printed "queue -1 offset -1 <ErrorCode.BODY_TOO_LARGE: 5>: ...",
    # and a refused batch no reason at all.
    big = tmp_path / "big"
    big.write_bytes(b"x" * (CONFIG["max_message_size"] + 1))
    p = run_cli("produce", "--topic", "cli", "--file", str(big), *a)
    assert p.returncode == 1 and "MESSAGE_ILLEGAL (BODY_TOO_LARGE): body of 131073 bytes is over " \
        "max_message_size 131072" in p.stdout + p.stderr, p
    p = run_cli("produce", "--topic", "cli", "--body", "x" * 60_000, "--count", "3", "--batch", "3", *a)
    assert p.returncode == 1 and "MESSAGE_ILLEGAL: a batch is one unit" in p.stdout + p.stderr, p
    # Regression: --quiet printed every refusal (500 identical lines in the walkthrough).
    p = run_cli("produce", "--topic", "cli", "--body", "x" * 60_000, "--count", "9", "--batch", "3",
                "--quiet", *a)
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and p.stdout == "" and len(lines) == 3, p.stderr
    assert lines[0].startswith("MESSAGE_ILLEGAL: a batch is one unit") and "more failures" in lines[1]
    assert "0 of 9 messages stored" in lines[2] and "9 refused" in lines[2]


def test_cli_consume_follow_and_produce_file(store, tmp_path, admin):
    a = ["--address", store.address]
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00\xffbinary")
    follow = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "consume", "--topic", "cli-f", "--group", "gf",
                               "--follow", "--json", *a], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        p = run_cli("produce", "--topic", "cli-f", "--file", str(body), "--count", "2", "--batch", "2", *a)
        assert p.returncode == 0 and "(2 messages)" in p.stdout, p.stderr
        rows = [json.loads(follow.stdout.readline()) for _ in range(2)]
        assert [r["body_base64"] for r in rows] == ["AP9iaW5hcnk="] * 2
        follow.send_signal(signal.SIGINT)
        assert follow.wait(30) == 0
        assert "2 messages" in follow.stderr.read()
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert admin.consumer_lag("gf", "cli-f")["total_lag"] == 0


@pytest.mark.parametrize("command, options", [
    ("produce", ["--topic", "--body", "--file", "--tags", "--keys", "--property", "--queue", "--sharding-key",
                 "--count", "--batch", "--in-flight", "--no-wait", "--timeout", "--quiet", "--store", "--address"]),
    ("consume", ["--topic", "--group", "--follow", "--from", "--tag-filter", "--queues", "--max", "--json",
                 "--no-commit", "--timeout", "--store", "--address"]),
    ("query", ["--key", "--id", "--offset", "--topic", "--max", "--begin", "--end", "--json", "--store", "--address"]),
    ("topics", ["--create", "--queues", "--offsets", "--json", "--store", "--address"]),
])
def test_cli_help_names_every_option(command, options):
    out = run_cli(command, "--help")
    assert out.returncode == 0
    for option in options:
        assert option in out.stdout, option


def test_cli_produce_says_what_was_not_sent_when_the_store_is_gone():
    # Regression: when the store went away, produce ended with the error alone: no summary,
    # and nothing said that the rest of the input was never sent.
    p = run_cli("produce", "--topic", "t", "--address", "tcp://127.0.0.1:1", "--timeout", "0.5",
                stdin="a\nb\n")
    assert p.returncode == 1
    assert "stopped early" in p.stderr and "the rest of the input was not sent" in p.stderr, p.stderr


def test_cli_without_a_store(tmp_path):
    for args in (["produce", "--topic", "t", "--body", "x"], ["consume", "--topic", "t", "--group", "g"],
                 ["query", "--id", "0" * 32], ["topics"]):
        out = run_cli(*args, "--store", str(tmp_path / "nothing"))
        assert out.returncode == 1 and "no store is running" in out.stderr, out


@pytest.mark.slow
def test_producer_rides_over_a_killed_appender(tmp_path):
    s = SupervisedStore(tmp_path, "kill", **CONFIG).start()
    try:
        # A put lost with the killed appender times out and is sent again until the restarted
        # one (started after the restart policy's 1 s delay) answers.
        with Producer(store=s.root, timeout=1.0, retries=15) as p:
            assert p.send("ride", b"before").ok
            pid = s.service("appender")["pid"]
            os.kill(pid, signal.SIGKILL)
            after = p.send("ride", b"after")
            assert after.ok
            assert s.service("appender")["pid"] != pid
        with Consumer(store=s.root, group="g", topic="ride") as c:
            got = consume(c, 2)
        assert [m.body for m in got].count(b"after") >= 1 and b"before" in [m.body for m in got]
    finally:
        s.ensure_stopped()


@pytest.mark.slow
def test_a_put_that_failed_while_the_store_was_down_is_not_stored_when_it_is_back(tmp_path):
    """A send that timed out because the store was down is not kept queued in the client and
    delivered once the store is back on the same ports (it was, before ZMQ_IMMEDIATE)."""
    port = free_port_block()
    s = SupervisedStore(tmp_path, "zombie", **CONFIG).start("--port", str(port))
    try:
        with Producer(s.address, timeout=1.0, retries=0) as p:
            assert p.send("zombie", b"before", queue_id=0).ok
            assert s.stop() == 0
            with pytest.raises(TimeoutError):
                p.send("zombie", b"failed", queue_id=0)
            s.start("--port", str(port))
            assert s.address == f"tcp://127.0.0.1:{port}"
            after = p.send("zombie", b"after", queue_id=0)
            assert after.ok and after.queue_offset == 1
        with Consumer(s.address, "g", "zombie") as c:
            got = consume(c, 3, timeout=3.0)
        assert [m.body for m in got] == [b"before", b"after"]
    finally:
        s.ensure_stopped()


@pytest.mark.slow
def test_a_send_to_a_stopped_store_is_one_attempt_and_one_hello(tmp_path):
    """Nothing can be sent while the store is down: the send fails after its timeout and one
    unanswered hello, instead of waiting its whole timeout once more for every retry."""
    s = SupervisedStore(tmp_path, "down", **CONFIG).start()
    try:
        with Admin(s.address) as admin:          # a known topic: its queue count is cached for
            admin.create_topic("down", 4)         # 30 s, so the send below is the put alone
        with Producer(s.address, timeout=1.0, retries=4) as p:
            assert p.send("down", b"up").ok
            assert s.stop() == 0
            conn, sent = p.connection, []
            request = conn.request
            conn.request = lambda name, op, *a, **k: (sent.append(op), request(name, op, *a, **k))[1]
            with pytest.raises(PeerUnreachable):
                p.send("down", b"lost")
            assert sent == ["put", "hello"]
    finally:
        s.ensure_stopped()


@pytest.mark.slow
def test_clients_follow_a_restarted_store_to_its_new_ports(tmp_path):
    s = SupervisedStore(tmp_path, "moved", **CONFIG).start()
    try:
        with Producer(store=s.root, timeout=1.0, retries=5) as p:
            assert p.send("moved", b"one", queue_id=0).ok
            old = s.address
            assert s.stop() == 0
            s.start()                                   # --port 0: new ports
            assert s.address != old
            r = p.send("moved", b"two", queue_id=0)     # times out, says hello again, resends
            assert r.ok and r.queue_offset == 1
            assert p.connection.address == s.address
    finally:
        s.ensure_stopped()


def test_a_sharding_key_creates_a_topic_with_the_stores_default_queue_count(tmp_path):
    # Regression: the producer created unknown topics with its own constant (4 queues) when a
    # sharding key was given, whatever the store's default_topic_queue_nums.
    s = SupervisedStore(tmp_path, "six", default_topic_queue_nums=6, **CONFIG).start()
    try:
        with Producer(s.address) as p, Admin(s.address) as a:
            r = p.send("keyed", b"x", sharding_key="k")
            assert r.ok and r.queue_id == shard_queue("k", 6)
            assert a.topic_info("keyed")["queues"] == 6
        out = run_cli("produce", "--topic", "keyed-cli", "--body", "x", "--sharding-key", "abc",
                      "--address", s.address)
        assert out.returncode == 0, out
        with Admin(s.address) as a:
            assert a.topic_info("keyed-cli")["queues"] == 6
    finally:
        s.ensure_stopped()


def test_stop_through_admin(tmp_path):
    s = SupervisedStore(tmp_path, "stop", **CONFIG).start()
    try:
        with Admin(s.address) as a:
            a.stop()
        assert s.wait_exit(60) == 0
        assert not os.path.exists(s.path("abort"))
    finally:
        s.ensure_stopped()


def test_a_store_on_every_interface_is_reached_at_the_clients_address(tmp_path):
    """`mqstore start --host 0.0.0.0`: hello names the services by the wildcard; the client
    connects to them at the host it reached the front door at."""
    s = SupervisedStore(tmp_path, name="wild", **CONFIG).start("--host", "0.0.0.0")
    try:
        port = s.address.rpartition(":")[2]
        with Producer(f"tcp://127.0.0.1:{port}") as p:
            assert p.send("Wild", b"reached").ok
            assert all(e.startswith("tcp://127.0.0.1:") for n, e in p._conn.endpoints.items()
                       if n != "front")
        with Consumer(f"127.0.0.1:{port}", "g", "Wild", auto_commit=False) as c:
            got = consume(c, 1)
        assert [m.body for m in got] == [b"reached"]
    finally:
        s.ensure_stopped()
