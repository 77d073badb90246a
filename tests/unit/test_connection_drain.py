"""ipc.connection.Connection reads only the sockets that have requests in flight or whose
descriptor fired: a late reply on an idle socket is read (not left to keep the descriptor
readable, which would make the leader spin) and dropped, requests on every socket still
complete, and `request(future=...)` completes a caller's own object instead of a Future. Real
ZeroMQ sockets against scripted peers (tests.unit.scripted_peer)."""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from ipc.connection import Connection, ConnectionClosed
from tests.unit.scripted_peer import hold


class Ticket:
    """What the Consumer hands to request(future=...): completion without a Future."""

    def __init__(self):
        self.done = threading.Event()
        self.value = self.exc = None

    def set_result(self, value):
        self.value = value
        self.done.set()

    def set_exception(self, exc):
        self.exc = exc
        self.done.set()


def test_late_reply_on_an_idle_socket_is_read_without_spinning(peers):
    front = peers(hold)
    other = peers()
    front.reader = other.endpoint                       # reader elsewhere, appender held here
    with Connection(front.endpoint, timeout=0.2, background=False) as c:
        late = c.request("appender", "op", {"x": 1})
        with pytest.raises(TimeoutError):
            late.result()
        assert c._busy.get("appender") == 0
        front.release()                                 # the late reply lands on an idle socket
        cpu = time.process_time()
        assert not c.wait(lambda: False, 0.5)           # leads for 0.5 s with nothing in flight
        assert time.process_time() - cpu < 0.25         # slept on the descriptors, did not spin
        assert c.call("reader", "op", x=3)["echo"] == 3


def test_requests_on_every_socket_complete_while_one_is_busy(peers):
    p = peers(lambda env, frames: None if env.get("x", 0) < 0 else {"status": "OK", "echo": env.get("x")})
    with Connection(p.endpoint, timeout=5) as c:
        held = [c.request("reader", "op", {"x": -i - 1}) for i in range(20)]
        assert c.wait(lambda: len(p.held) == 20, 5)
        for i in range(30):
            name = ("front", "appender", "reader")[i % 3]
            assert c.call(name, "op", x=i)["echo"] == i
        p.release(lambda env: {"status": "OK", "echo": env["x"]}, reverse=True)
        assert [f.result(5)[0]["echo"] for f in held] == [-i - 1 for i in range(20)]
        assert c._busy == {"front": 0, "appender": 0, "reader": 0} and c.in_flight == 0


def test_request_completes_the_callers_own_object(peers):
    p = peers()
    with Connection(p.endpoint, background=False) as c:
        tickets = [Ticket() for _ in range(10)]
        for i, t in enumerate(tickets):
            assert c.request("reader", "op", {"x": i}, future=t) is t
        assert c.wait(lambda: all(t.done.is_set() for t in tickets), 5)
        assert [t.value[0]["echo"] for t in tickets] == list(range(10))
        pending = Ticket()
        q = peers(hold)
        q.reader = q.endpoint
    c2 = Connection(q.endpoint, timeout=5)
    c2.request("reader", "op", {"x": 1}, future=pending)
    c2.close()
    assert pending.done.is_set() and isinstance(pending.exc, ConnectionClosed)


def test_timeouts_fail_the_callers_object(peers):
    p = peers(hold)
    with Connection(p.endpoint, timeout=0.2) as c:
        t = Ticket()
        c.request("reader", "op", {"x": 1}, future=t)
        assert c.wait(t.done.is_set, 5)
        assert isinstance(t.exc, TimeoutError) and c._busy["reader"] == 0


def test_a_sender_does_not_leave_a_sleeping_leader_behind(peers):
    """Thread A leads (asleep on the descriptors, waiting for a held reply) while the main
    thread's calls go out and come back: each must complete at once, not at A's next poll
    timeout (ipc.connection.IDLE_POLL_S)."""
    p = peers(lambda env, frames: None if env.get("hold") else {"status": "OK", "echo": env.get("x")})
    with Connection(p.endpoint, background=False) as c:
        held = c.request("appender", "op", {"hold": True})
        waiter = threading.Thread(target=lambda: held.exception(10))
        waiter.start()
        deadline = time.monotonic() + 5
        while c._leader is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert c._leader is not None and c._leader != threading.get_ident()
        t0 = time.monotonic()
        for i in range(20):
            assert c.call("appender", "op", x=i)["echo"] == i
        assert time.monotonic() - t0 < 20 * 0.1 / 2
        p.release()
        waiter.join(10)
        assert held.result(0)[0]["status"] == "OK"


def test_with_no_leader_a_send_leaves_replies_to_the_next_waiter(peers):
    """A send drains only for a sleeping leader: a lone caller's replies are read when it waits
    (the leader drains before it sleeps), so they all complete, none is lost."""
    p = peers()
    with Connection(p.endpoint, background=False) as c:
        first = c.request("appender", "op", {"x": 0})
        sock = c._socks["appender"]
        deadline = time.monotonic() + 5
        while not sock.get(zmq.EVENTS) & zmq.POLLIN and time.monotonic() < deadline:
            time.sleep(0.001)                                     # until its reply is queued
        second = c.request("appender", "op", {"x": 1})
        assert not first.done() and c.in_flight == 2              # not read by the send
        assert second.result(5)[0]["echo"] == 1 and first.result(0)[0]["echo"] == 0
        assert c.in_flight == 0
