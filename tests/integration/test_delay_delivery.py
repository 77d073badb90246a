"""Delay levels in a real process tree (services/scheduler.py re-putting through the appender):
each level delivered no earlier than its delay and within a second after it, in order, with its
topic, queue, body, properties and UNIQ_KEY; SIGKILL of the scheduler and of the whole tree
while messages are pending: every one delivered after the restart, none lost."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from core.record.decode import decode_message
from tests.integration.harness import wait_for
from tests.integration.supervised import pid_gone, supervised_stores as store  # noqa: F401

LEVELS = "1s 2s 3s"


def pull_raw(s, topic: str, queue_id: int, offset: int = 0) -> list:
    """Every message of the queue from `offset`, decoded, each with the time it was pulled."""
    reader = s.call("hello")[0]["reader"]
    out = []
    while True:
        reply, frames = s.call("pull", endpoint=reader, group="d", topic=topic, queue_id=queue_id,
                               offset=offset, max_msgs=64, format="raw")
        if reply["status"] != "FOUND":
            return out
        data, pos, now = frames[0], 0, time.time() * 1000
        while pos < len(data):
            m = decode_message(data, pos)
            out.append((m, now))
            pos += m.store_size
        offset = reply["next_begin_offset"]


def collect(s, topic: str, queue_id: int, want: int, timeout: float = 20.0) -> list:
    """Poll the queue until `want` messages are there; (message, first seen ms) each."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += pull_raw(s, topic, queue_id, len(got))
        time.sleep(0.02)
    return got


@pytest.mark.slow
def test_levels_delivered_on_time_with_their_fields(store):
    s = store(message_delay_level=LEVELS).start()
    sent = []
    for level in (3, 1, 2):
        for i in range(4):
            reply = s.put("orders", b"L%d-%d" % (level, i), queue_id=1, tags="TA", keys=["k1", "k2"],
                          properties={"DELAY": str(level), "UNIQ_KEY": f"UK{level}{i}", "x": "y"})
            assert reply["status"] == "PUT_OK", reply
            assert reply["queue_id"] == level - 1 and reply["queue_offset"] == i
            sent.append((level, i, reply["store_timestamp"]))
    got = collect(s, "orders", 1, len(sent))
    assert len(got) == len(sent)
    by_body = {m.body: (m, seen) for m, seen in got}
    for level in (1, 2, 3):
        bodies = [m.body for m, _ in got if m.body.startswith(b"L%d-" % level)]
        assert bodies == [b"L%d-%d" % (level, i) for i in range(4)]          # in order
    for level, i, stored in sent:
        m, seen = by_body[b"L%d-%d" % (level, i)]
        due = stored + level * 1000
        assert m.store_timestamp >= due
        assert seen - due < 1000 + 300, (level, i, seen - due)
        assert m.topic == "orders" and m.queue_id == 1 and m.tags == "TA" and m.keys == "k1 k2"
        assert m.properties["UNIQ_KEY"] == f"UK{level}{i}" and m.properties["x"] == "y"
        assert "DELAY" not in m.properties and m.properties["REAL_TOPIC"] == "orders"
    reader = s.call("hello")[0]["reader"]
    reply, _ = s.call("query_by_key", endpoint=reader, topic="orders", key="UK21")
    assert reply["status"] == "OK" and len(reply["messages"]) >= 1, reply
    assert wait_for(lambda: json.load(open(s.path("config", "delayOffset.json")))["offsetTable"]
             == {"1": 4, "2": 4, "3": 4}, timeout=10)
    assert s.stop() == 0


def _put_pending(s, n: int, level: int, prefix: bytes) -> None:
    for i in range(n):
        reply = s.put("t", prefix + b"%d" % i, queue_id=0, properties={"DELAY": str(level)})
        assert reply["status"] == "PUT_OK", reply


def _bodies(s) -> list:
    return [m.body for m, _ in pull_raw(s, "t", 0)]


@pytest.mark.slow
def test_scheduler_killed_while_pending_delivers_all(store):
    s = store(message_delay_level=LEVELS).start()
    _put_pending(s, 20, 2, b"a")
    victim = s.service("scheduler")["pid"]
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: pid_gone(victim), timeout=10)
    _put_pending(s, 20, 1, b"b")
    s.wait_service("scheduler", "RUNNING", timeout=30)
    want = {b"a%d" % i for i in range(20)} | {b"b%d" % i for i in range(20)}
    assert wait_for(lambda: want <= set(_bodies(s)), timeout=20)
    assert s.stop() == 0


@pytest.mark.slow
def test_whole_tree_killed_while_pending_delivers_all(store):
    s = store(message_delay_level=LEVELS).start()
    _put_pending(s, 30, 3, b"c")
    _put_pending(s, 30, 1, b"d")
    assert wait_for(lambda: len(_bodies(s)) >= 10, timeout=20)       # some delivered, most pending
    s.kill_tree()
    s.start()
    want = {b"c%d" % i for i in range(30)} | {b"d%d" % i for i in range(30)}
    assert wait_for(lambda: want <= set(_bodies(s)), timeout=30)
    bodies = _bodies(s)
    assert set(bodies) == want                        # every one; duplicates allowed
    assert s.stop() == 0


@pytest.mark.slow
def test_timers_across_a_killed_tree(store):
    s = store().start()
    t0 = time.time_ns() // 1_000_000
    due = {}
    for i in range(30):
        at = t0 + 500 + (i * 137) % 3500
        body = b"t%02d" % i
        reply = s.put("t", body, queue_id=0, properties={"TIMER_DELIVER_MS": str(at),
                                                         "UNIQ_KEY": "T%d" % i})
        assert reply["status"] == "PUT_OK", reply
        due[body] = at
    assert wait_for(lambda: len(_bodies(s)) >= 3, timeout=20)
    s.kill_tree()
    s.start()
    assert wait_for(lambda: set(due) <= set(_bodies(s)), timeout=30)
    for m, _ in pull_raw(s, "t", 0):
        assert m.store_timestamp >= due[m.body]
        assert "TIMER_DELIVER_MS" not in m.properties and m.properties["UNIQ_KEY"] == "T%s" % int(m.body[1:])
    assert s.stop() == 0


@pytest.mark.slow
def test_status_and_metrics_show_what_is_pending(store):
    from supervisor.ports import free_port
    from tests.integration.supervised import cli
    port = free_port("127.0.0.1")
    s = store(message_delay_level="1s 2s 1h").start("--metrics-port", str(port))
    _put_pending(s, 5, 3, b"h")
    far = time.time_ns() // 1_000_000 + 3_600_000
    for i in range(4):
        reply = s.put("t", b"f%d" % i, queue_id=0, properties={"TIMER_DELIVER_MS": str(far)})
        assert reply["status"] == "PUT_OK", reply

    def delayed():
        return s.status().get("delayed", {})
    assert wait_for(lambda: delayed().get("levels", {}).get("3") == 5 and delayed().get("timers") == 4,
             timeout=15)
    out = cli("status", "--store", s.root)
    assert out.returncode == 0, out.stderr
    assert "delayed: 5 pending (level 3: 5); timers 4 pending" in out.stdout, out.stdout

    def scrape() -> str:
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    assert wait_for(lambda: 'mqstore_delay_pending{level="3"} 5.0' in scrape()
             and "mqstore_timer_pending 4.0" in scrape(), timeout=15)
    assert s.stop() == 0


@pytest.mark.slow
def test_a_delivery_refused_for_good_does_not_hold_its_level(store):
    s = store(message_delay_level="2s").start()
    hello = s.call("hello")[0]
    for q in (3, 0):
        reply = s.put("shrunk", b"q%d" % q, queue_id=q, properties={"DELAY": "1"})
        assert reply["status"] == "PUT_OK", reply
    reply, _ = s.call("create_topic", endpoint=hello["appender"], topic="shrunk", queues=2)
    assert reply["status"] == "OK", reply
    assert wait_for(lambda: [m.body for m, _ in pull_raw(s, "shrunk", 0)] == [b"q0"], timeout=15)
    assert pull_raw(s, "shrunk", 3) == []
    assert wait_for(lambda: json.load(open(s.path("config", "delayOffset.json")))["offsetTable"]
             == {"1": 2}, timeout=10)
    assert s.stop() == 0


@pytest.mark.slow
def test_producer_and_cli_send_delayed_messages(store):
    import datetime

    from ipc import Producer
    from tests.integration.supervised import cli
    s = store(message_delay_level="1s 2s").start()
    t0 = time.time()
    with Producer(s.address) as p:
        r = p.send("t", b"level", queue_id=0, delay_level=2)
        assert r.ok and r.queue_id == 1 and r.queue_offset == 0          # its schedule queue
        at = datetime.datetime.fromtimestamp(t0 + 1.5, tz=datetime.timezone.utc)
        assert p.send("t", b"at", queue_id=0, deliver_at=at).ok
        assert p.send_async("t", b"ms", queue_id=0, delay_ms=700).result(10).ok
    out = cli("produce", "--store", s.root, "--topic", "t", "--queue", "0", "--body", "cli-level",
              "--delay-level", "1")
    assert out.returncode == 0, out.stderr
    out = cli("produce", "--store", s.root, "--topic", "t", "--queue", "0", "--body", "cli-delay",
              "--delay", "1200ms")
    assert out.returncode == 0, out.stderr
    want = {b"level", b"at", b"ms", b"cli-level", b"cli-delay"}
    assert wait_for(lambda: set(_bodies(s)) == want, timeout=15), _bodies(s)
    got = {m.body: m for m, _ in pull_raw(s, "t", 0)}
    assert got[b"at"].store_timestamp >= int((t0 + 1.5) * 1000)
    assert got[b"level"].properties["REAL_QID"] == "0"
    assert s.stop() == 0


@pytest.mark.slow
def test_offsets_file_torn_between_runs_delivers_again_without_loss(store):
    s = store(message_delay_level="1s").start()
    _put_pending(s, 10, 1, b"e")
    assert wait_for(lambda: len(_bodies(s)) == 10, timeout=15)
    assert s.stop() == 0
    path = s.path("config", "delayOffset.json")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])            # torn, as a copy cut short
    s.start()
    _put_pending(s, 5, 1, b"f")
    want = {b"e%d" % i for i in range(10)} | {b"f%d" % i for i in range(5)}
    assert wait_for(lambda: len(_bodies(s)) >= 25 and set(_bodies(s)) == want, timeout=20)
    bodies = _bodies(s)
    assert len(bodies) - len(set(bodies)) == 10               # the ten delivered again, once each
    assert os.path.exists(path + ".corrupt")
    assert s.stop() == 0
