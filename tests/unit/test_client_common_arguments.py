"""Arguments of the client API that no request could carry are refused before anything is
sent, with a TypeError or ValueError naming the argument (ipc.producer, ipc.consumer,
ipc.client_common), and a closed Consumer refuses to go on (ConnectionClosed). The peer is a
scripted ZeroMQ ROUTER (tests/unit/scripted_peer.py) that counts what reaches it; no store.

Found by a new user: a timeout <= 0 made a send time out at once after it had gone out, and
each retry stored the message again; `keys=5`, `tag_filter=5`, `poll("100")` and
`seek_to_timestamp("x")` failed deep inside with errors that named nothing the caller wrote;
`poll(max_records=0)` returned every buffered message; a closed Consumer polled, sought and
committed silently."""
from __future__ import annotations

import math

import pytest

from core.record.codec import encode_message
from core.record.message import Message
from ipc import Consumer, Producer
from ipc import client_common
from ipc.connection import ConnectionClosed
from ipc.producer import encode_batch, encode_put
from tests.unit.scripted_peer import Peer

BAD_TIMEOUTS = [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf]


def reader_script(stored=3):
    """A reader of topic "t" with one queue holding `stored` messages; an appender that
    answers every put PUT_OK (counted in `puts`)."""
    records = b"".join(encode_message(Message("t", b"m%d" % o), queue_offset=o, phys_offset=o * 100)
                       for o in range(stored))
    puts = []

    def script(env, frames):
        op = env["op"]
        if op == "topic_info":
            return {"status": "OK", "topic": env["topic"], "queues": 1}
        if op == "fetch_offset":
            return {"status": "OK", "offset": -1}
        if op == "queue_offsets":
            return {"status": "OK", "queues": [{"queue_id": 0, "min_offset": 0, "max_offset": stored}]}
        if op == "commit_offset":
            return {"status": "OK"}
        if op == "offset_by_time":
            return {"status": "OK", "offset": 1}
        if op == "pull":
            if env["offset"] == 0:
                return {"status": "FOUND", "next_begin_offset": stored, "min_offset": 0,
                        "max_offset": stored, "count": stored, "_frames": [records]}
            return {"status": "NO_MESSAGE_IN_QUEUE", "next_begin_offset": env["offset"],
                    "min_offset": 0, "max_offset": stored, "count": 0, "_frames": [b""]}
        if op in ("put", "put_batch"):
            puts.append(env)
            return {"status": "PUT_OK", "msg_id": "AB" * 16, "queue_id": 0, "queue_offset": len(puts),
                    "phys_offset": 0, "store_timestamp": 1}
        return {"status": "ERROR", "code": 2, "reason": op}
    script.puts = puts
    return script


@pytest.fixture
def peer():
    p = Peer(reader_script())
    yield p
    p.close()


# -- the shared checks ---------------------------------------------------------------------
def test_shared_checks():
    check_timeout, check_wait_ms = client_common.check_timeout, client_common.check_wait_ms
    check_int = client_common.check_int
    assert check_timeout(2) == 2 and check_timeout(0.25) == 0.25
    for bad in BAD_TIMEOUTS:
        with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
            check_timeout(bad)
    for bad in ("1", None, True, [1]):
        with pytest.raises(TypeError, match="timeout must be a number of seconds above 0"):
            check_timeout(bad)
    assert check_wait_ms(0) == 0 and check_wait_ms(12.5) == 12.5
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout_ms"):
            check_wait_ms(bad)
    assert check_int(0, "offset") == 0 and check_int(5, "n", 1) == 5
    with pytest.raises(ValueError, match="n must be an int >= 1, not 0"):
        check_int(0, "n", 1)
    for bad in ("1", 1.0, True, None):
        with pytest.raises(TypeError, match="offset must be an int >= 0"):
            check_int(bad, "offset")


# -- producer ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, text", [
    (dict(keys=5), TypeError, "keys must be a str, an iterable of str or None, not int"),
    (dict(keys=b"k1"), TypeError, "keys must be .* not bytes"),
    (dict(keys=["a", 2]), TypeError, "keys must be .* not a list holding int"),
    (dict(tags=5), TypeError, "tags must be a str or None, not int"),
    (dict(tags=b"A"), TypeError, "tags must be a str or None, not bytes"),
    (dict(properties=5), TypeError, "properties must be a dict .* not int"),
    (dict(properties=[("a", "b")]), TypeError, "properties must be a dict .* not list"),
    (dict(properties={1: "x"}), TypeError, "properties must be a dict of str names"),
    (dict(queue_id=-1), ValueError, "queue_id must be an int >= 0, not -1"),
    (dict(queue_id="1"), TypeError, "queue_id must be an int >= 0, not str"),
    (dict(queue_id=1.0), TypeError, "queue_id must be an int >= 0, not float"),
])
def test_put_fields_of_the_wrong_type_or_value_are_named(kwargs, error, text):
    with pytest.raises(error, match=text):
        encode_put("orders", b"x", **kwargs)


def test_put_fields_that_are_right_are_kept():
    fields, _, _ = encode_put("orders", b"x", tags="A", keys=("k1", "k2"), properties={"n": 1},
                              queue_id=0)
    assert fields["keys"] == ["k1", "k2"] and fields["properties"]["n"] == "1"
    assert fields["queue_id"] == 0 and fields["tags"] == "A"
    assert encode_put("orders", b"x", keys="k1 k2")[0]["keys"] == "k1 k2"
    assert encode_put("orders", b"x", properties=None, tags=None, keys=None, queue_id=None)[0]["topic"] == "orders"


def test_batch_fields_are_checked_once_per_call_and_per_message_with_its_place():
    with pytest.raises(ValueError, match="queue_id must be an int >= 0, not -2"):
        encode_batch("orders", [b"a", b"b"], queue_id=-2)
    with pytest.raises(TypeError, match="message 1 of the batch: keys must be"):
        encode_batch("orders", [Message("orders", b"a"), Message("orders", b"b", keys=5)])
    with pytest.raises(TypeError, match="message 0 of the batch: tags must be a str"):
        encode_batch("orders", [Message("orders", b"a", tags=7)])
    fields, _, _ = encode_batch("orders", [Message("orders", b"a", properties=None)])
    assert list(fields["messages"][0]["properties"]) == ["UNIQ_KEY"]


def test_producer_timeout_is_refused_before_connecting(peer):
    for bad in BAD_TIMEOUTS:
        with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
            Producer(peer.endpoint, timeout=bad)
    assert peer.requests == 0                              # not even a hello


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_send_timeout_is_refused_before_anything_is_sent(peer, bad):
    with Producer(peer.endpoint) as p:
        sends = [lambda: p.send("t", b"x", timeout=bad),
                 lambda: p.send_async("t", b"x", timeout=bad),
                 lambda: p.send_batch("t", [b"x", b"y"], timeout=bad),
                 lambda: p.send_batch_async("t", [b"x"], timeout=bad),
                 lambda: p.send("t", b"x", sharding_key="s", timeout=bad)]
        for send in sends:
            with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
                send()
        assert peer.requests == 1 and peer.script.puts == []     # the hello only
        assert p.send("t", b"x", timeout=5).ok


def test_bad_fields_ask_nothing_of_the_store_even_with_a_sharding_key(peer):
    with Producer(peer.endpoint) as p:
        with pytest.raises(TypeError, match="keys must be"):
            p.send("t", b"x", keys=5, sharding_key="k")
        with pytest.raises(TypeError, match="keys must be"):
            p.send_async("t", b"x", keys=5)
        with pytest.raises(ValueError, match="queue_id"):
            p.send_batch("t", [b"x"], queue_id=-1, sharding_key="k")
        assert peer.requests == 1                          # the hello only: no topic_info


# -- consumer ------------------------------------------------------------------------------
def test_consumer_arguments_are_refused_before_connecting(peer):
    with pytest.raises(TypeError, match="tag_filter must be a str .* or None, not int"):
        Consumer(peer.endpoint, "g", "t", tag_filter=5)
    for bad in BAD_TIMEOUTS:
        with pytest.raises(ValueError, match="timeout must be a number of seconds above 0"):
            Consumer(peer.endpoint, "g", "t", timeout=bad)
    assert peer.requests == 0


def test_poll_arguments(peer):
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        with pytest.raises(TypeError, match="timeout_ms must be a number of milliseconds >= 0, not str"):
            c.poll("100")
        for bad in (-1, math.nan, math.inf):
            with pytest.raises(ValueError, match="timeout_ms must be a number of milliseconds >= 0"):
                c.poll(bad)
        for bad in (0, -1):
            with pytest.raises(ValueError, match="max_records must be an int >= 1"):
                c.poll(100, max_records=bad)
        with pytest.raises(TypeError, match="max_records must be an int >= 1, not float"):
            c.poll(100, max_records=1.5)
        got = []
        for _ in range(50):
            got += c.poll(100, max_records=2)
            if got:
                break
        assert [m.body for m in got] == [b"m0", b"m1"]       # the limit holds,
        assert [m.body for m in c.poll(0)] == [b"m2"]        # the rest stays for the next poll
        assert c.poll(0) == []                               # 0: only what is here, no waiting


def test_seek_arguments(peer):
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        with pytest.raises(TypeError, match="timestamp_ms must be an int >= 0, not str"):
            c.seek_to_timestamp("x")
        with pytest.raises(ValueError, match="timestamp_ms must be an int >= 0, not -1"):
            c.seek_to_timestamp(-1)
        with pytest.raises(TypeError, match="offset must be an int >= 0, not str"):
            c.seek(0, "1")
        with pytest.raises(TypeError, match="offset must be an int >= 0, not float"):
            c.seek(0, 1.5)
        with pytest.raises(ValueError, match="offsets are >= 0"):
            c.seek(0, -5)
        assert c.positions() == {0: 0}
        assert c.seek_to_timestamp(123) == {0: 1}
        assert c.seek_to_timestamp(123.9) == {0: 1}          # time.time() * 1000 is a float
        for bad in (float("-inf"), float("inf"), float("nan")):
            with pytest.raises(TypeError, match="timestamp_ms must be an int >= 0, not float"):
                c.seek_to_timestamp(bad)
        c.seek(0, 2)
        assert c.positions() == {0: 2}


def test_a_closed_consumer_raises_connection_closed(peer):
    c = Consumer(peer.endpoint, "g", "t", long_poll_ms=50)
    c.close()
    c.close()                                              # idempotent
    for call in (lambda: c.poll(100), lambda: c.poll(0), lambda: c.seek(0, 0), c.commit,
                 lambda: c.seek_to_timestamp(1), c.seek_to_beginning, c.seek_to_end,
                 lambda: iter(c), lambda: next(iter(c))):
        with pytest.raises(ConnectionClosed, match="connection closed"):
            call()
    assert c.positions() == {0: 0}                         # what it knew can still be read


def test_closing_inside_the_loop_ends_it(peer):
    c = Consumer(peer.endpoint, "g", "t", auto_commit=False, long_poll_ms=50)
    got = []
    for m in c:
        got.append(m.body)
        c.close()
    assert got == [b"m0"]
