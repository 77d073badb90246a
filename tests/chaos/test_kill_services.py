"""Faults on a running store (DESIGN.md section 7, anchors B4 F3/F6/F13/F14): SIGKILL of each
service while the store runs (the supervisor restarts it, the new process resumes from the
control block and no acknowledged message is lost), a service that crashes again and again
(BACKOFF instead of a tight loop), a hung service (SIGSTOP: killed once its heartbeat is 10 s
old, then restarted), and a failed flush (an EIO injected into the real flusher's fdatasync:
every service stopped, abnormal recovery, every service started again), and a service that
cannot start (the start stops and says why)."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore, pid_gone

FAULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults")


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("chaos")).start()
    yield s
    s.ensure_stopped()


def put_until_ok(s: SupervisedStore, topic: str, body: bytes, timeout: float = 20.0) -> dict:
    """A put, retried while the store is not ready (a service restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = s.put(topic, body)
            if reply["status"] == "PUT_OK":
                return reply
        except TimeoutError:
            reply = None
        if time.monotonic() > deadline:
            raise AssertionError(f"no PUT_OK within {timeout}s: {reply}")
        time.sleep(0.05)


def pulled_bodies(s: SupervisedStore, topic: str, queues: int = 4) -> dict:
    """{(queue_id, queue_offset): body} of everything a consumer can read from `topic`."""
    reader = s.call("hello")[0]["reader"]
    found = {}
    for q in range(queues):
        offset = 0
        while True:
            reply, frames = s.call("pull", endpoint=reader, group="chaos", topic=topic,
                                   queue_id=q, offset=offset, max_msgs=64)
            if reply["status"] != "FOUND":
                break
            data, pos = frames[0], 0
            for meta in reply["messages"]:
                found[(q, meta["queue_offset"])] = data[pos:pos + meta["body_size"]]
                pos += meta["body_size"]
            offset = reply["next_begin_offset"]
    return found


@pytest.mark.parametrize("name", ["allocator", "flusher", "reput", "ha", "appender", "reader",
                                  "scheduler"])
def test_sigkill_of_a_service_is_restarted(running, name):
    acked = {}
    for i in range(20):
        r = put_until_ok(running, "Chaos", b"%s-before-%d" % (name.encode(), i))
        acked[(r["queue_id"], r["queue_offset"])] = b"%s-before-%d" % (name.encode(), i)
    old = running.service(name)
    os.kill(old["pid"], signal.SIGKILL)
    new = running.wait_service(name, "RUNNING", restarts=old["restarts"] + 1)
    assert new["pid"] != old["pid"] and pid_gone(old["pid"])
    assert open(running.path("run", f"{name}.pid")).read().strip() == str(new["pid"])
    for i in range(20):
        r = put_until_ok(running, "Chaos", b"%s-after-%d" % (name.encode(), i))
        acked[(r["queue_id"], r["queue_offset"])] = b"%s-after-%d" % (name.encode(), i)
    assert wait_for(lambda: running.status()["lags"]["dispatch"] == 0, 10)
    found = pulled_bodies(running, "Chaos")
    missing = {k: v for k, v in acked.items() if found.get(k) != v}
    assert not missing, f"acknowledged messages not readable after killing {name}: {missing}"
    assert all(x["state"] == "RUNNING" for x in running.status()["services"])


@pytest.mark.slow
def test_committer_is_restarted_with_the_transient_pool(tmp_path):
    s = SupervisedStore(tmp_path, transient_store_pool_enable=True).start()
    try:
        assert "committer" in [x["name"] for x in s.status()["services"]]
        before = [put_until_ok(s, "Pool", b"p%d" % i) for i in range(10)]
        old = s.service("committer")
        os.kill(old["pid"], signal.SIGKILL)
        s.wait_service("committer", "RUNNING", restarts=1)
        after = [put_until_ok(s, "Pool", b"q%d" % i) for i in range(10)]
        assert wait_for(lambda: s.status()["positions"]["dispatched"] > after[-1]["phys_offset"], 10)
        found = pulled_bodies(s, "Pool")
        assert len([r for r in before + after if (r["queue_id"], r["queue_offset"]) in found]) == 20
        assert s.stop() == 0
        assert not os.path.exists(s.path("abort"))
    finally:
        s.ensure_stopped()


@pytest.mark.slow                  # the back-off itself takes 1 + 2 + 4 + 8 s
def test_a_service_that_keeps_crashing_is_backed_off(tmp_path):
    s = SupervisedStore(tmp_path).start()
    try:
        for restarts in range(4):
            entry = s.wait_service("reader", "RUNNING", timeout=30, restarts=restarts)
            os.kill(entry["pid"], signal.SIGKILL)
        entry = s.wait_service("reader", "RUNNING", timeout=30, restarts=4)
        os.kill(entry["pid"], signal.SIGKILL)                    # the 5th death within 60 s
        s.wait_service("reader", "BACKOFF", timeout=10)
        time.sleep(1.5)                                          # no restart comes
        st = s.status()
        reader = next(x for x in st["services"] if x["name"] == "reader")
        assert reader["state"] == "BACKOFF" and reader["restarts"] == 4 and reader["pid"] is None
        assert any("reader" in e and "BACKOFF" in e for e in st["errors"])
        assert all(x["state"] == "RUNNING" for x in st["services"] if x["name"] != "reader")
        assert put_until_ok(s, "StillWritable", b"x")["status"] == "PUT_OK"
        assert s.stop() == 0
    finally:
        s.ensure_stopped()


@pytest.mark.slow                  # a heartbeat must be 10 s old
def test_a_hung_service_is_killed_and_restarted(running):
    old = running.wait_service("flusher", "RUNNING")
    os.kill(old["pid"], signal.SIGSTOP)
    try:
        new = running.wait_service("flusher", "RUNNING", timeout=30, restarts=old["restarts"] + 1)
    finally:
        if not pid_gone(old["pid"]):
            os.kill(old["pid"], signal.SIGCONT)
    assert new["pid"] != old["pid"]
    r = put_until_ok(running, "Hung", b"after")
    assert wait_for(lambda: running.status()["positions"]["flushed"] > r["phys_offset"], 10)


@pytest.mark.slow
def test_failed_flush_runs_abnormal_recovery_and_restarts_everything(tmp_path):
    trigger = str(tmp_path / "fail-next-flush")
    env = {"PYTHONPATH": FAULTS_DIR, "FAULT_FDATASYNC_SERVICE": "flusher",
           "FAULT_FDATASYNC_TRIGGER": trigger}
    s = SupervisedStore(tmp_path, env=env).start()
    try:
        before = [put_until_ok(s, "Durable", b"d%d" % i) for i in range(15)]
        assert wait_for(lambda: s.status()["lags"]["flush"] == 0, 10)
        open(trigger, "w").close()
        put_until_ok(s, "Durable", b"wakes the flusher")
        assert wait_for(lambda: not os.path.exists(trigger), 10), "the fault never fired"
        for name in ("allocator", "flusher", "reput", "ha", "appender", "reader"):
            s.wait_service(name, "RUNNING", timeout=60, restarts=1)
        st = s.status()
        assert "flush_failed" not in st["flags"] and "writable" in st["flags"]
        after = put_until_ok(s, "Durable", b"after recovery")
        assert wait_for(lambda: s.status()["positions"]["flushed"] > after["phys_offset"], 10)
        found = pulled_bodies(s, "Durable")
        assert all((r["queue_id"], r["queue_offset"]) in found for r in before + [after])
        assert "failed flush" in open(s.path("logs", "supervisor.log")).read()
        assert s.stop() == 0
        assert not os.path.exists(s.path("abort"))
    finally:
        s.ensure_stopped()


def test_a_service_that_cannot_start_stops_the_start(tmp_path):
    env = {"PYTHONPATH": FAULTS_DIR, "FAULT_START_SERVICE": "reput"}
    s = SupervisedStore(tmp_path, env=env).start(wait_ready=False)
    try:
        assert s.wait_exit(60) == 1
        err = s.stderr()
        assert "reput did not start (exit code 1)" in err and "injected start-up failure" in err
        assert "ready" not in "\n".join(s.stdout)
        assert not os.path.exists(s.path("run", "address"))
        assert not os.path.exists(s.path("abort"))          # nothing was written: a clean stop
        assert not any("services." in " ".join(p.info["cmdline"] or []) and s.root in
                       " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
    finally:
        s.ensure_stopped()
