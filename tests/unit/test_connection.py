"""The client transport (ipc.connection.Connection) against scripted peers on real ZeroMQ
ROUTER sockets: replies matched by rid in any order, the in-flight window, timeouts and late
replies, error replies, re-hello when an endpoint moves, closing, the background thread and
concurrent callers. No store is involved: the peers answer from a script."""
from __future__ import annotations

import concurrent.futures
import os
import threading
import time

import pytest

from ipc.connection import (
    Connection, ConnectionClosed, MQError, normalize_address, resolve_address,
)
from ipc.protocol import ErrorCode
from tests.unit.scripted_peer import hold


def test_hello_and_echo(peers):
    p = peers()
    with Connection(p.endpoint) as c:
        assert c.info["version"] == 1 and c.endpoints["appender"] == p.endpoint
        assert c.call("appender", "noop", x=5)["echo"] == 5


def test_wrong_protocol_version_is_refused(peers):
    p = peers(version=2)
    with pytest.raises(ConnectionError, match="version"):
        Connection(p.endpoint)


def test_replies_out_of_order_are_matched_by_rid(peers):
    p = peers(hold)
    with Connection(p.endpoint) as c:
        futs = [c.request("reader", "op", {"x": i}) for i in range(50)]
        assert c.wait(lambda: len(p.held) == 50, 5)
        p.release(lambda env: {"status": "OK", "echo": env["x"] * 10}, reverse=True)
        assert [f.result(5)[0]["echo"] for f in futs] == [i * 10 for i in range(50)]


def test_window_bounds_requests_in_flight(peers):
    p = peers(hold)
    with Connection(p.endpoint, window=4) as c:
        futs = [c.request("appender", "op", {"x": i}) for i in range(4)]
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="in flight"):
            c.request("appender", "op", {"x": 4}, timeout=0.3)
        assert time.monotonic() - t0 >= 0.25
        assert c.wait(lambda: len(p.held) == 4, 5)
        p.release()
        assert [f.result(5)[0]["echo"] for f in futs] == [0, 1, 2, 3]
        more = [c.request("appender", "op", {"x": i}) for i in range(4)]
        assert c.in_flight <= 4
        c.wait(lambda: len(p.held) == 4, 5)
        p.release()
        assert [f.result(5)[0]["echo"] for f in more] == [0, 1, 2, 3]
    assert p.max_held == 4


def test_a_window_full_caller_proceeds_when_replies_come(peers):
    p = peers(hold)
    with Connection(p.endpoint, window=2) as c:
        first = [c.request("appender", "op", {"x": i}) for i in range(2)]
        threading.Timer(0.2, p.release).start()
        late = c.request("appender", "op", {"x": 9}, timeout=5)
        assert [f.result(5)[0]["echo"] for f in first] == [0, 1]
        c.wait(lambda: len(p.held) == 1, 5)
        p.release()
        assert late.result(5)[0]["echo"] == 9


def test_timeout_then_late_reply_is_ignored(peers):
    p = peers(hold)
    with Connection(p.endpoint, timeout=0.2) as c:
        fut = c.request("reader", "op", {"x": 1})
        with pytest.raises(TimeoutError, match="no reply"):
            fut.result()
        assert c.in_flight == 0
        p.release()
        p.script = lambda env, frames: {"status": "OK", "echo": env.get("x")}
        assert c.call("reader", "op", x=2)["echo"] == 2       # the late reply of rid 1 was dropped


def test_error_reply_raises_mqerror(peers):
    p = peers(lambda env, frames: {"status": "ERROR", "code": 6, "reason": "unknown topic 'x'"})
    with Connection(p.endpoint) as c:
        with pytest.raises(MQError) as info:
            c.call("reader", "topic_info", topic="x")
        assert info.value.code is ErrorCode.NOT_FOUND and "unknown topic" in str(info.value)
        env, _ = c.request("reader", "topic_info", {"topic": "x"}).result()
        assert env["status"] == "ERROR"                         # request() passes it through


def test_raw_frames_come_back_as_memoryviews(peers):
    big = os.urandom(200_000)
    p = peers(lambda env, frames: {"status": "OK", "n": len(frames[0]), "_frames": [b"small", big]})
    with Connection(p.endpoint) as c:
        env, frames = c.call_with_frames("reader", "op", [big])
        assert env["n"] == len(big)
        assert [bytes(f) for f in frames] == [b"small", big]


def test_rehello_moves_to_a_new_endpoint(peers):
    front = peers(hold)
    second = peers()
    with Connection(front.endpoint, timeout=0.3) as c:
        lost = c.request("appender", "op", {"x": 1})
        with pytest.raises(TimeoutError):
            lost.result()
        front.appender = second.endpoint                       # the appender "restarted" elsewhere
        assert c.call("appender", "op", x=7)["echo"] == 7
        assert c.endpoints["appender"] == second.endpoint and second.requests == 1


def test_requests_on_a_replaced_socket_fail(peers):
    front = peers(hold)
    second = peers()
    with Connection(front.endpoint, timeout=5) as c:
        pending = c.request("appender", "op", {"x": 1})
        front.appender = second.endpoint
        assert c.reconnect()
        with pytest.raises(ConnectionClosed, match="moved"):
            pending.result(5)


def test_store_directory_address_is_read_again_on_reconnect(peers, tmp_path):
    old, new = peers(), peers()
    run = tmp_path / "run"
    run.mkdir()
    (run / "address").write_text(old.endpoint + "\n")
    with Connection(store=str(tmp_path)) as c:
        assert c.address == old.endpoint
        (run / "address").write_text(new.endpoint)
        assert c.reconnect() and c.address == new.endpoint
        assert c.endpoints["reader"] == new.endpoint


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(ConnectionError, match="no running store"):
        resolve_address(None, str(tmp_path))
    assert normalize_address("localhost:10911") == "tcp://localhost:10911"
    assert normalize_address("10911") == "tcp://127.0.0.1:10911"
    assert normalize_address("ipc:///x") == "ipc:///x"


def test_close_fails_pending_requests(peers):
    p = peers(hold)
    c = Connection(p.endpoint)
    fut = c.request("reader", "op", {"x": 1})
    c.close()
    with pytest.raises(ConnectionClosed):
        fut.result(1)
    with pytest.raises(ConnectionClosed):
        c.request("reader", "op")
    c.close()                                                 # idempotent


def test_futures_complete_without_being_asked(peers):
    p = peers()
    with Connection(p.endpoint) as c:
        seen = []
        futs = [c.request("reader", "op", {"x": i}) for i in range(20)]
        for f in futs:
            f.add_done_callback(lambda f: seen.append(f))
        done, not_done = concurrent.futures.wait(futs, timeout=5)
        assert len(done) == 20 and not not_done
        deadline = time.monotonic() + 5
        while len(seen) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(seen) == 20


def test_transform_errors_go_to_the_future(peers):
    p = peers()
    with Connection(p.endpoint) as c:
        fut = c.request("reader", "op", {}, transform=lambda env, frames: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            fut.result(5)


def test_concurrent_callers(peers):
    p = peers()
    with Connection(p.endpoint, window=16) as c:
        errors = []

        def work(k):
            try:
                for i in range(150):
                    x = k * 1000 + i
                    assert c.call("appender" if i % 2 else "reader", "op", x=x)["echo"] == x
                    if i % 10 == 0:
                        futs = [c.request("reader", "op", {"x": x + j}) for j in range(5)]
                        assert [f.result()[0]["echo"] for f in futs] == [x + j for j in range(5)]
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and c.in_flight == 0


def test_callbacks_may_send_requests(peers):
    p = peers()
    with Connection(p.endpoint) as c:
        chained = []
        first = c.request("reader", "op", {"x": 1})
        first.add_done_callback(lambda f: chained.append(c.request("reader", "op", {"x": 2})))
        assert first.result(5)[0]["echo"] == 1
        assert c.wait(lambda: chained and chained[0].done(), 5)
        assert chained[0].result()[0]["echo"] == 2


def test_wildcard_endpoints_take_the_host_the_front_door_was_reached_at():
    """Regression: a store started with --host 0.0.0.0 named its appender and reader
    tcp://0.0.0.0:PORT in hello, which a client on another machine cannot connect to."""
    from ipc.client_common import reachable_endpoint
    front = "tcp://10.1.2.3:10911"
    assert reachable_endpoint("tcp://0.0.0.0:10913", front) == "tcp://10.1.2.3:10913"
    assert reachable_endpoint("tcp://[::]:10914", "tcp://[fd00::7]:10911") == "tcp://[fd00::7]:10914"
    assert reachable_endpoint("tcp://*:10913", "tcp://store.example:10911") == "tcp://store.example:10913"
    assert reachable_endpoint("tcp://10.9.9.9:10913", front) == "tcp://10.9.9.9:10913"   # a real host
    assert reachable_endpoint("tcp://0.0.0.0:10913", "tcp://0.0.0.0:10911") == "tcp://0.0.0.0:10913"
    assert reachable_endpoint("ipc:///run/appender.sock", front) == "ipc:///run/appender.sock"
