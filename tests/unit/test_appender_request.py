"""services.appender.request: put and put_batch requests decoded into messages, every wire
error a client can cause named with its code, and put replies whose message ids are spliced in
already encoded (the same map as plain msgpack)."""
from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.key_block import KeyBlock
from core.status import AppendMessageResult, AppendMessageStatus
from ipc.protocol import ErrorCode, ProtocolError, pack, unpack
from services.appender.request import (IllegalMessage, MsgIdArray, pack_reply, parse_put, parse_put_batch,
                                     peer_host)

HOST = ("10.0.0.1", 0)
NOW = 1_700_000_000_000
MAX = 1024
V4 = socket.inet_aton("127.0.0.1") + (10911).to_bytes(4, "big")
V6 = socket.inet_pton(socket.AF_INET6, "fe80::1") + (10911).to_bytes(4, "big")


def put(env, frames=(b"body",)):
    return parse_put({"op": "put", "rid": 1, **env}, list(frames), HOST, NOW, MAX)


def batch(env, data=b"aabbb"):
    return parse_put_batch({"op": "put_batch", "rid": 1, **env}, [data], HOST, NOW, MAX)


def code_of(fn, *args):
    """The error code of a request refused: a ProtocolError raised, or the IllegalMessage
    result of a put the store refuses."""
    try:
        got = fn(*args)
    except ProtocolError as e:
        return e.code
    assert isinstance(got, IllegalMessage), got
    return got.code


def test_put_defaults():
    req = put({"topic": "T"})
    (msg,) = req.messages
    assert (req.topic, req.queue_id, req.wait, req.count, req.body_bytes) == ("T", None, True, 1, 4)
    assert bytes(msg.body) == b"body" and msg.born_host == HOST and msg.born_timestamp == NOW
    assert (msg.flag, msg.tags, msg.keys, msg.properties) == (0, None, None, {})


def test_put_fields():
    req = put({"topic": "T", "queue_id": 3, "flag": -5, "tags": "TagA", "keys": ["k1", "k2"],
               "properties": {"a": "b"}, "born_timestamp": 42, "born_host": "192.168.1.2:777",
               "wait": False})
    msg = req.messages[0]
    assert req.queue_id == 3 and not req.wait
    assert (msg.flag, msg.tags, msg.keys, msg.properties, msg.born_timestamp, msg.born_host) == \
        (-5, "TagA", ["k1", "k2"], {"a": "b"}, 42, ("192.168.1.2", 777))
    assert put({"topic": "T", "born_host": "[::1]:9"}).messages[0].born_host == ("::1", 9)


def test_wait_property_false_means_no_wait():
    assert not put({"topic": "T", "properties": {"WAIT": "false"}}).wait


@pytest.mark.parametrize("env, code", [
    ({}, ErrorCode.BAD_FIELD),
    ({"topic": 7}, ErrorCode.BAD_FIELD),
    ({"topic": ""}, ErrorCode.BAD_TOPIC),
    ({"topic": "a b"}, ErrorCode.BAD_TOPIC),
    ({"topic": "x" * 128}, ErrorCode.BAD_TOPIC),
    ({"topic": "T", "queue_id": "1"}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "queue_id": -1}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "flag": 1 << 40}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "tags": 5}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "keys": [1]}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "properties": {"a": 1}}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "properties": []}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "born_timestamp": -1}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "born_host": "nohost"}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "born_host": "1.2.3.4:99999"}, ErrorCode.BAD_FIELD),
    ({"topic": "T", "wait": 1}, ErrorCode.BAD_FIELD),
])
def test_put_errors(env, code):
    assert code_of(put, env) == code


def test_put_frames_and_size():
    assert code_of(put, {"topic": "T"}, ()) == ErrorCode.TOO_MANY_FRAMES
    assert code_of(put, {"topic": "T"}, (b"a", b"b")) == ErrorCode.TOO_MANY_FRAMES
    assert code_of(put, {"topic": "T"}, (b"x" * (MAX + 1),)) == ErrorCode.BODY_TOO_LARGE
    assert put({"topic": "T"}, (b"x" * MAX,)).body_bytes == MAX


def test_batch_without_per_message_fields_uses_a_template():
    req = batch({"topic": "T", "sizes": [2, 3, 0]}, b"aabbb")
    assert req.count == 3 and req.body_bytes == 5
    assert [bytes(b) for b in req.bodies] == [b"aa", b"bbb", b""]
    assert len(req.messages) == 1 and req.messages[0].born_host == HOST


def test_batch_with_uniq_keys():
    req = batch({"topic": "T", "sizes": [2, 3], "uniq_keys": ["K1", "K2"]}, b"aabbb")
    assert req.uniq_keys == ["K1", "K2"] and [bytes(b) for b in req.bodies] == [b"aa", b"bbb"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=20), st.booleans())
def test_batch_bodies_are_the_frames_slices(sizes, uniform):
    sizes = [sizes[0]] * len(sizes) if uniform else sizes
    data = bytes(range(sum(sizes)))
    for _ in range(2):                               # the second time from the kept slices
        req = batch({"topic": "T", "sizes": sizes}, data)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        assert [bytes(b) for b in req.bodies] == [data[a:a + n] for a, n in zip(starts, sizes)]
        assert req.sizes == sizes and req.body_bytes == len(data) and req.count == len(sizes)


def test_batch_id_format():
    assert not batch({"topic": "T", "sizes": [1]}, b"a").id_offsets
    assert not batch({"topic": "T", "sizes": [1], "id_format": "ids"}, b"a").id_offsets
    assert batch({"topic": "T", "sizes": [1], "id_format": "offsets"}, b"a").id_offsets
    assert batch({"topic": "T", "sizes": [1], "id_format": "offsets", "messages": [{}]}, b"a").id_offsets


def test_batch_with_a_key_block():
    req = batch({"topic": "T", "sizes": [2, 3], "uniq_key_block": b"K1K2"}, b"aabbb")
    assert req.uniq_keys == KeyBlock(b"K1K2", 2) and req.uniq_keys.keys() == ["K1", "K2"]


def test_batch_with_per_message_fields():
    req = batch({"topic": "T", "queue_id": 1, "sizes": [2, 3],
                 "messages": [{"tags": "A", "keys": "k"}, None], "wait": False})
    assert req.bodies is None and req.count == 2 and not req.wait
    assert [bytes(m.body) for m in req.messages] == [b"aa", b"bbb"]
    assert req.messages[0].tags == "A" and req.messages[1].tags is None


@pytest.mark.parametrize("env, data, code", [
    ({"topic": "T"}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": []}, b"", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1]}, b"abc", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": ["1"]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1.0]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [-1, 2]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [-1, -1]}, b"", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [True, True]}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1.0]}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [None, 1]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [MAX + 1]}, b"x" * (MAX + 1), ErrorCode.BODY_TOO_LARGE),
    ({"topic": "T", "sizes": [1], "messages": [{}, {}]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "messages": [5]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "messages": [{"flag": "x"}]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "bad/topic", "sizes": [1]}, b"a", ErrorCode.BAD_TOPIC),
    ({"topic": "T", "sizes": [1, 1], "uniq_keys": ["k"]}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "uniq_keys": [7]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "uniq_keys": "k"}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "uniq_keys": ["k"], "messages": [{}]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "id_format": "hex"}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "id_format": 1}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1], "uniq_key_block": b"abc"}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1], "uniq_key_block": b""}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1], "uniq_key_block": "k1k2"}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1, 1], "uniq_key_block": "ключ".encode()}, b"ab", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "uniq_key_block": b"k", "uniq_keys": ["k"]}, b"a", ErrorCode.BAD_FIELD),
    ({"topic": "T", "sizes": [1], "uniq_key_block": b"k", "messages": [{}]}, b"a", ErrorCode.BAD_FIELD),
])
def test_batch_errors(env, data, code):
    assert code_of(batch, env, data) == code


def test_batch_frame_count():
    env = {"op": "put_batch", "rid": 1, "topic": "T", "sizes": [1]}
    for frames in ([], [b"a", b"b"]):
        assert code_of(parse_put_batch, env, frames, HOST, NOW, MAX) == ErrorCode.TOO_MANY_FRAMES


def test_peer_host():
    assert peer_host("127.0.0.1", HOST) == ("127.0.0.1", 0)
    assert peer_host("", HOST) == HOST and peer_host(None, HOST) == HOST
    assert peer_host("garbage", HOST) == HOST


def ids_result(host, n):
    sizes = tuple(range(100, 100 + n)) if n > 1 else ()
    return AppendMessageResult(AppendMessageStatus.PUT_OK, 1 << 33, sum(sizes) or 150, 1, 0, n,
                               host, sizes)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 100, 70_000])
@pytest.mark.parametrize("host", [V4, V6, b""])
def test_batch_reply_ids_are_a_plain_msgpack_list(n, host):
    result = ids_result(host, n)
    fields = {"rid": 9, "status": "PUT_OK", "queue_id": 1, "queue_offset": 5, "phys_offset": 1 << 33,
              "store_timestamp": NOW, "msg_ids": MsgIdArray.of(result), "count": n}
    env = unpack(pack_reply(fields))
    assert env == {**fields, "msg_ids": result.msg_ids}
    assert len(env["msg_ids"]) == (n if host else 0)


def test_reply_packing_with_many_fields_and_without_ids():
    ids = MsgIdArray.of(ids_result(V4, 3))
    many = {f"f{i}": i for i in range(20)}
    assert unpack(pack_reply({**many, "msg_ids": ids})) == {**many, "msg_ids": ids_result(V4, 3).msg_ids}
    assert pack_reply({"rid": 1, "status": "PUT_OK", "msg_id": "AB"}) == \
        pack({"rid": 1, "status": "PUT_OK", "msg_id": "AB"})
    assert unpack(pack_reply({"rid": 1, "msg_ids": ["X"]})) == {"rid": 1, "msg_ids": ["X"]}


def test_store_refusals_are_illegal_messages_not_protocol_errors():
    # The appender answers IllegalMessage with the put status MESSAGE_ILLEGAL (DESIGN section 5)
    # and every other ProtocolError with status ERROR.
    for env, frames in (({"topic": "x" * 128}, (b"a",)), ({"topic": "T"}, (b"x" * (MAX + 1),))):
        assert isinstance(put(env, frames), IllegalMessage)
    with pytest.raises(ProtocolError) as bad:
        put({"topic": "a b"})
    assert not isinstance(bad.value, IllegalMessage)
