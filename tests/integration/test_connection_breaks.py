"""A client's connection to a service that breaks (the service killed with SIGKILL, or stopped)
while requests are in flight, against a real supervised store: the requests in flight fail at
once with ConnectionLost instead of waiting for their timeout, replies that arrived before the
break are still delivered, and the client goes on with the restarted service."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ipc import Admin, Consumer, MQError, Producer
from ipc.connection import Connection, ConnectionLost
from tests.integration.harness import wait_for
from tests.integration.supervised import REPO, SupervisedStore

CONFIG = {"mapped_file_size_commitlog": 512 * 1024}


@pytest.fixture
def store(tmp_path):
    s = SupervisedStore(tmp_path, "breaks", **CONFIG).start()
    yield s
    s.ensure_stopped()


def bodies(store: SupervisedStore, topic: str, n: int, timeout: float = 15.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    with Consumer(store.address, "g", topic, auto_commit=False) as c:
        while len(out) < n and time.monotonic() < deadline:
            out += [m.body for m in c.poll(200)]
    return out


@pytest.mark.slow
def test_puts_in_flight_to_a_killed_appender_fail_at_once(store):
    with Producer(store.address, timeout=60.0, retries=0) as p:
        assert p.send("lost", b"before", queue_id=0).ok
        old = store.service("appender")
        os.kill(old["pid"], signal.SIGSTOP)            # the puts below stay unanswered
        futures = [p.send_async("lost", b"stuck-%d" % i, queue_id=0) for i in range(5)]
        time.sleep(0.3)
        os.kill(old["pid"], signal.SIGKILL)
        for fut in futures:
            # Before: each waited for its 60 s timeout (this raised TimeoutError after 20 s).
            with pytest.raises(ConnectionLost, match="may or may not have been stored"):
                fut.result(timeout=20.0)
        store.wait_service("appender", "RUNNING", restarts=old["restarts"] + 1)
        assert p.send("lost", b"after", queue_id=0).ok
    # The stopped appender never read them: only the two answered puts are in the queue.
    assert bodies(store, "lost", 3, timeout=3.0) == [b"before", b"after"]


def test_a_synchronous_send_is_retried_on_the_restarted_appender(store):
    with Producer(store.address, timeout=60.0, retries=2) as p:
        assert p.send("retried", b"first", queue_id=0).ok
        old = store.service("appender")
        os.kill(old["pid"], signal.SIGSTOP)
        killer = _later(0.3, lambda: os.kill(old["pid"], signal.SIGKILL))
        started = time.monotonic()
        r = p.send("retried", b"second", queue_id=0)   # lost with the appender, then sent again
        took = time.monotonic() - started
        killer.join()
        assert r.ok and r.queue_offset == 1
        assert took < 30.0, f"the retry waited {took:.1f} s: for the 60 s timeout, not the break"
    assert bodies(store, "retried", 2) == [b"first", b"second"]


def test_replies_that_arrived_before_the_appender_died_are_delivered(store):
    """Nobody reads the replies until after the appender is gone (no background thread): they
    were dropped with the broken connection (ZMQ_IMMEDIATE), and the puts timed out although
    they were stored and answered."""
    conn = Connection(store.address, timeout=5.0, background=False)
    try:
        p = Producer(connection=conn)
        futures = [p.send_async("answered", b"a-%d" % i, queue_id=0) for i in range(5)]
        with Admin(store.address) as a:
            assert wait_for(lambda: max_offset(a, "answered") == 5, 10)
        time.sleep(0.3)                                 # the replies are on their way, unread
        old = store.service("appender")
        os.kill(old["pid"], signal.SIGKILL)
        time.sleep(0.3)                                 # the connection breaks, unread
        results = [fut.result(timeout=10.0) for fut in futures]
        assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
        assert all(r.ok for r in results)
    finally:
        conn.close()


@pytest.mark.slow
def test_produce_goes_on_past_a_killed_appender(store):
    """`mqstore produce` while the appender is killed: the puts it had in flight are counted
    unconfirmed at once and the rest of the input is stored by the restarted appender. It
    waited the whole --timeout for the lost puts before (finding 8 of a new-user walkthrough)."""
    cmd = [sys.executable, "-m", "supervisor.cli", "produce", "--topic", "cli-lost", "--queue", "0",
           "--in-flight", "4", "--timeout", "60", "--quiet", "--address", store.address]
    with Admin(store.address) as a:
        a.create_topic("cli-lost", 1)
        proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        lines = [f"m{i}\n" for i in range(20)]
        proc.stdin.write("".join(lines[:4]))
        proc.stdin.flush()
        assert wait_for(lambda: max_offset(a, "cli-lost") == 4, 30)    # connected and storing
    old = store.service("appender")
    os.kill(old["pid"], signal.SIGSTOP)                 # the next four puts stay unanswered
    started = time.monotonic()
    proc.stdin.write("".join(lines[4:8]))
    proc.stdin.flush()
    time.sleep(1.0)
    os.kill(old["pid"], signal.SIGKILL)
    out, err = proc.communicate("".join(lines[8:]), timeout=120)
    took = time.monotonic() - started
    assert proc.returncode == 1, err                    # some are unconfirmed
    assert took < 45.0, f"produce took {took:.0f} s: it waited for the 60 s --timeout"
    summary = err.strip().splitlines()[-1]
    assert "16 of 20 messages stored" in summary and "4 unconfirmed" in summary, err
    expected = [line.strip().encode() for line in lines[:4] + lines[8:]]
    assert bodies(store, "cli-lost", 17, timeout=3.0) == expected


def max_offset(admin: Admin, topic: str) -> int:
    try:
        return admin.queue_offsets(topic, 0)[0]["max_offset"]
    except MQError:                                     # the topic is not there yet
        return -1


def _later(delay: float, fn):
    import threading
    t = threading.Timer(delay, fn)
    t.start()
    return t
