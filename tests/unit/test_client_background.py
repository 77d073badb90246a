"""The client's background leader (ipc.client_background) against a scripted peer on real
ZeroMQ sockets: it naps longer and longer while a user thread keeps doing I/O (few wakeups),
still completes futures nobody waits for once user threads go quiet, and a close ends its nap
at once. Futures of ipc.client_common.ReplyFuture read their state without the lock."""
from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from ipc.client_background import NAP_MAX_S
from ipc.connection import Connection
from tests.unit.scripted_peer import Peer


@pytest.fixture
def peer():
    p = Peer(lambda env, frames: None if env.get("hold") else {"status": "OK", "echo": env.get("x")})
    yield p
    p.close()


def counting(conn):
    """Count the background thread's checks (users_active calls from that thread)."""
    calls = []
    real = conn.users_active

    def users_active():
        if threading.get_ident() == conn._bg_ident:
            calls.append(time.monotonic())
        return real()
    conn.users_active = users_active
    return calls


def test_few_checks_while_a_user_thread_waits(peer):
    with Connection(peer.endpoint) as c:
        calls = counting(c)
        fut = c.request("reader", "op", {"hold": True})
        assert not fut.done()
        t0 = time.monotonic()
        assert c.wait(lambda: False, 0.6) is False            # a user thread waits 0.6 s
        during = [t for t in calls if t >= t0]
        assert len(during) <= 0.6 / NAP_MAX_S + 6, len(during)   # 200 a second before
        peer.release()
        assert fut.result(5)[0]["status"] == "OK"


def test_callbacks_run_after_the_user_goes_quiet(peer):
    with Connection(peer.endpoint) as c:
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:                    # keep the thread at its longest nap
            assert c.call("reader", "op", x=1)["echo"] == 1
        seen = threading.Event()
        fut = c.request("reader", "op", {"x": 2})
        fut.add_done_callback(lambda f: seen.set())
        t0 = time.monotonic()
        assert seen.wait(5)                                   # nobody waits for it
        assert time.monotonic() - t0 < 0.5
        assert fut.result(0)[0]["echo"] == 2


def test_close_ends_a_nap_at_once(peer):
    c = Connection(peer.endpoint)
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        c.call("reader", "op", x=1)
    t0 = time.monotonic()
    c.close()
    assert time.monotonic() - t0 < NAP_MAX_S / 2 + 0.1
    assert not c._bg._thread.is_alive()


def test_reply_future_states(peer):
    with Connection(peer.endpoint) as c:
        ok = c.request("reader", "op", {"x": 3})
        assert ok.result(5)[0]["echo"] == 3 and ok.done()
        assert ok.result(0)[0]["echo"] == 3                   # a finished future: no waiting
        bad = c.request("reader", "op", {"x": 4}, transform=lambda env, frames: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            bad.result(5)
        assert bad.done() and isinstance(bad.exception(0), ZeroDivisionError)
        held = c.request("reader", "op", {"hold": True})
        assert not held.done() and held.cancel() and held.done()
        with pytest.raises(concurrent.futures.CancelledError):
            held.result(0)
        peer.release()                                        # its late reply is dropped
        assert c.call("reader", "op", x=5)["echo"] == 5
