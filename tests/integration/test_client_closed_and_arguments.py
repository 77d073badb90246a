"""The client API against a real supervised store, as a new user found it:

- `send(..., timeout=0)` (or a negative, NaN or infinite timeout, or `Producer(timeout=0)`)
  raised TimeoutError at once, but every retry had gone out first: the message was stored
  three times. Such a timeout is refused now (ValueError) and nothing is stored.
- `keys=5`, `tags=5`, `properties=5`, `queue_id=-1` raised errors from deep inside (or came
  back MESSAGE_ILLEGAL after a round trip); with a sharding key the topic was created first.
  They raise TypeError/ValueError naming the argument and ask nothing of the store.
- A closed Consumer polled ([]), sought and committed silently; it raises ConnectionClosed
  now, as a closed Producer and Admin do.
- `poll(max_records=0)` returned every buffered message; it raises ValueError.
"""
from __future__ import annotations

import math
import time

import pytest

from ipc import Admin, Consumer, Producer
from ipc.connection import ConnectionClosed
from tests.integration.supervised import SupervisedStore


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("client-checks")).start()
    yield s
    s.ensure_stopped()


def consume(c: Consumer, n: int, timeout: float = 15.0, **kw) -> list:
    out, deadline = [], time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out += c.poll(200, **kw)
    return out


@pytest.mark.parametrize("name, bad", [("zero", 0), ("negative", -1), ("nan", math.nan), ("inf", math.inf)])
def test_a_timeout_that_leaves_no_time_is_refused_and_nothing_is_stored(store, name, bad):
    topic = f"timeout-{name}"
    with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
        Producer(store.address, timeout=bad)
    with Producer(store.address) as p:
        for send in (lambda: p.send(topic, b"x", queue_id=0, timeout=bad),
                     lambda: p.send_async(topic, b"x", queue_id=0, timeout=bad),
                     lambda: p.send_batch(topic, [b"x", b"y"], queue_id=0, timeout=bad),
                     lambda: p.send_batch_async(topic, [b"x"], queue_id=0, timeout=bad)):
            with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
                send()
        r = p.send(topic, b"first", queue_id=0, timeout=10)
        assert r.ok and r.queue_offset == 0                  # nothing was stored before


def test_fields_of_the_wrong_type_are_named_and_nothing_is_stored(store):
    with Producer(store.address) as p, Admin(store.address) as admin:
        cases = [(dict(keys=5), TypeError, "keys must be a str, an iterable of str or None, not int"),
                 (dict(tags=5), TypeError, "tags must be a str or None, not int"),
                 (dict(properties=5), TypeError, "properties must be a dict"),
                 (dict(queue_id=-1), ValueError, "queue_id must be an int >= 0, not -1"),
                 (dict(queue_id="1"), TypeError, "queue_id must be an int >= 0, not str")]
        for kwargs, error, text in cases:
            with pytest.raises(error, match=text):
                p.send("orders", b"x", **kwargs)
        with pytest.raises(TypeError, match="keys must be"):
            p.send("sharded", b"x", keys=5, sharding_key="customer-1")
        assert "sharded" not in admin.topics() and "orders" not in admin.topics()
        r = p.send("orders", b"ok", tags="A", keys=["k1", "k2"], properties={"n": 1})
        assert r.ok and r.queue_offset == 0


def test_consumer_arguments_are_named(store):
    with Producer(store.address) as p:
        assert p.send_batch("args", [b"m0", b"m1", b"m2"], queue_id=0).ok
    with pytest.raises(TypeError, match="tag_filter must be a str"):
        Consumer(store.address, "g", "args", tag_filter=5)
    with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
        Consumer(store.address, "g", "args", timeout=0)
    with Consumer(store.address, "g", "args", queues=[0], auto_commit=False) as c:
        with pytest.raises(TypeError, match="timeout_ms must be a number"):
            c.poll("100")
        with pytest.raises(ValueError, match="timeout_ms must be a number of milliseconds >= 0"):
            c.poll(-1)
        with pytest.raises(TypeError, match="timestamp_ms must be an int >= 0, not str"):
            c.seek_to_timestamp("x")
        with pytest.raises(TypeError, match="offset must be an int >= 0, not str"):
            c.seek(0, "1")
        assert [m.body for m in consume(c, 1, max_records=1)] == [b"m0"]
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_records must be an int >= 1"):
                c.poll(100, max_records=bad)
        assert c.positions() == {0: 1}                       # nothing handed out by those
        assert [m.body for m in consume(c, 2)] == [b"m1", b"m2"]


def test_a_closed_consumer_raises_connection_closed(store):
    with Producer(store.address) as p:
        assert p.send("closed", b"m0", queue_id=0).ok
    c = Consumer(store.address, "g-closed", "closed", queues=[0])
    assert [m.body for m in consume(c, 1)] == [b"m0"]
    c.close()
    assert c.committed() == {0: 1}                           # the final commit still happens
    c.close()
    for call in (lambda: c.poll(100), lambda: c.seek(0, 0), c.commit, lambda: c.seek_to_timestamp(0),
                 c.seek_to_beginning, c.seek_to_end, lambda: next(iter(c))):
        with pytest.raises(ConnectionClosed, match="connection closed"):
            call()
    p, a = Producer(store.address), Admin(store.address)
    p.close()
    a.close()
    with pytest.raises(ConnectionClosed):
        p.send("closed", b"x")
    with pytest.raises(ConnectionClosed):
        a.topics()
