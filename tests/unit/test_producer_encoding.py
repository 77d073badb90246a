"""Requests the producer builds (ipc.producer.encode_put / encode_batch) and the results it
reads back (parse_send_reply), checked against docs/PROTOCOL.md and against the appender's
own request parser (services.appender.request), so that client and server agree on the wire."""
from __future__ import annotations

import pytest

from core.record.codec import SCHEDULE_TOPIC
from core.record.key_block import KeyBlock
from core.record.message import Message, create_message_id
from core.status import PutMessageStatus
from ipc.producer import UNIQ_KEY, encode_batch, encode_put
from ipc.send_result import SendResult, parse_send_reply
from ipc.protocol import ErrorCode, pack, unpack
from services.appender.request import parse_put, parse_put_batch

HOST = ("10.0.0.1", 0)
NOW = 1_700_000_000_000


def roundtrip(fields: dict, op: str) -> dict:
    """The envelope as a service sees it after msgpack."""
    return unpack(pack({"op": op, "rid": 7, **fields}))


def test_put_minimal_fields():
    fields, frames, uniq = encode_put("orders", b"hello")
    assert fields == {"topic": "orders", "properties": {UNIQ_KEY: uniq}, "coalesce": True}
    assert frames == [b"hello"]


def test_put_all_fields():
    fields, frames, uniq = encode_put("orders", "héllo", tags="TagA", keys=["k1", "k2"],
                                      properties={"a": 1}, queue_id=3, flag=9, wait=False)
    assert frames == ["héllo".encode()]
    assert fields == {"topic": "orders", "queue_id": 3, "flag": 9, "tags": "TagA", "keys": ["k1", "k2"],
                      "properties": {"a": "1", UNIQ_KEY: uniq}, "wait": False, "coalesce": True}


def test_put_keeps_a_caller_uniq_key():
    fields, _, uniq = encode_put("t", b"x", properties={UNIQ_KEY: "MINE"})
    assert uniq == "MINE" and fields["properties"][UNIQ_KEY] == "MINE"


def test_put_freezes_mutable_bodies_and_refuses_others():
    buf = bytearray(b"abc")
    _, frames, _ = encode_put("t", buf)
    buf[0] = ord("z")
    assert frames == [b"abc"] and type(frames[0]) is bytes
    with pytest.raises(TypeError):
        encode_put("t", 42)


def test_put_is_what_the_appender_parses():
    fields, frames, uniq = encode_put("orders", b"body", tags="T", keys="a b", properties={"p": "v"}, queue_id=1)
    req = parse_put(roundtrip(fields, "put"), frames, HOST, NOW, 1 << 20)
    m = req.messages[0]
    assert (req.topic, req.queue_id, req.wait) == ("orders", 1, True)
    assert (bytes(m.body), m.tags, m.keys, m.properties) == (b"body", "T", "a b", {"p": "v", UNIQ_KEY: uniq})


def test_batch_fast_path():
    bodies = [b"a", b"e", b"ccc", b"dd"]
    fields, frames, keys = encode_batch("orders", bodies, queue_id=2)
    assert frames == [b"aecccdd"]
    assert fields["sizes"] == [1, 1, 3, 2] and fields["queue_id"] == 2 and "wait" not in fields
    assert "uniq_keys" not in fields and "messages" not in fields
    assert fields["uniq_key_block"] == keys.data and keys.count == 4
    assert len(set(keys.keys())) == 4 and all(len(k) == 32 for k in keys.keys())


def test_batch_key_block_is_what_the_appender_parses():
    fields, frames, keys = encode_batch("orders", [b"a", b"bb", b"c"])
    req = parse_put_batch(roundtrip(fields, "put_batch"), frames, HOST, NOW, 1 << 20)
    assert req.uniq_keys == keys and req.uniq_keys.keys() == keys.keys()
    assert [bytes(b) for b in req.bodies] == [b"a", b"bb", b"c"]


def test_batch_of_messages_keeps_their_metadata():
    items = [Message("orders", b"one", tags="A", keys=["k1"], properties={"x": "1"}, flag=5),
             "two", b"three", Message("", b"four", properties={UNIQ_KEY: "OWN"})]
    fields, frames, keys = encode_batch("orders", items, wait=False)
    assert frames == [b"onetwothreefour"] and fields["sizes"] == [3, 3, 5, 4]
    m0, m1, m2, m3 = fields["messages"]
    assert m0 == {"properties": {"x": "1", UNIQ_KEY: keys[0]}, "tags": "A", "keys": ["k1"], "flag": 5}
    assert m1 == {"properties": {UNIQ_KEY: keys[1]}} and m2 == {"properties": {UNIQ_KEY: keys[2]}}
    assert keys[3] == "OWN" and fields["wait"] is False


def test_batch_is_what_the_appender_parses():
    items = [b"x" * 10, Message("orders", b"yy", tags="B", keys="k"), b"zzz"]
    fields, frames, keys = encode_batch("orders", items)
    req = parse_put_batch(roundtrip(fields, "put_batch"), frames, HOST, NOW, 1 << 20)
    assert [bytes(m.body) for m in req.messages] == [b"x" * 10, b"yy", b"zzz"]
    assert [m.properties[UNIQ_KEY] for m in req.messages] == keys
    assert req.messages[1].tags == "B" and req.messages[1].keys == "k"


def test_a_batch_of_mixed_topics_is_refused():
    with pytest.raises(ValueError, match="'other'"):
        encode_batch("orders", [Message("orders", b"a"), Message("other", b"b")])


def test_empty_batch_is_refused():
    with pytest.raises(ValueError):
        encode_batch("t", [])


def test_an_empty_body_is_refused_as_rocketmqs_client_refuses_it():
    # Regression: Producer.send(t, b"") was stored (Validators.checkMessage refuses it).
    for send in (lambda: encode_put("t", b""), lambda: encode_put("t", ""),
                 lambda: encode_batch("t", [b"a", b""]),
                 lambda: encode_batch("t", [Message("t", b"a"), Message("t", b"")])):
        with pytest.raises(ValueError, match="body cannot be empty"):
            send()


def test_the_store_s_own_topics_are_refused_as_rocketmqs_client_refuses_them():
    # Regression: Producer.send(SCHEDULE_TOPIC, ...) (the delay topic) was stored (TopicValidator's
    # isNotAllowedSendTopic); TBW102 may be sent to, as in RocketMQ.
    for send in (lambda: encode_put(SCHEDULE_TOPIC, b"x"),
                 lambda: encode_batch("RMQ_SYS_TRANS_HALF_TOPIC", [b"a"])):
        with pytest.raises(ValueError, match="clients may not send to it"):
            send()
    assert encode_put("TBW102", b"x")[0]["topic"] == "TBW102"


def test_parse_put_reply():
    env = {"rid": 1, "status": "PUT_OK", "msg_id": "AB" * 16, "queue_id": 2, "queue_offset": 5,
           "phys_offset": 900, "store_timestamp": NOW}
    r = parse_send_reply(env, "t", ["U1"])
    assert r.ok and r.status is PutMessageStatus.PUT_OK
    assert (r.msg_id, r.msg_ids, r.queue_id, r.queue_offset, r.phys_offset, r.count, r.uniq_key) == \
        ("AB" * 16, ["AB" * 16], 2, 5, 900, 1, "U1")


def test_parse_batch_reply():
    env = {"rid": 1, "status": "FLUSH_DISK_TIMEOUT", "msg_ids": ["A1", "A2"], "queue_id": 0,
           "queue_offset": 10, "phys_offset": 0, "count": 2, "store_timestamp": NOW}
    r = parse_send_reply(env, "t", ["U1", "U2"])
    assert not r.ok and r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.msg_id == "A1" and r.count == 2 and r.uniq_keys == ["U1", "U2"]


@pytest.mark.parametrize("code, status", [
    (ErrorCode.BAD_TOPIC, PutMessageStatus.MESSAGE_ILLEGAL),
    (ErrorCode.BODY_TOO_LARGE, PutMessageStatus.MESSAGE_ILLEGAL),
    (ErrorCode.BAD_FIELD, PutMessageStatus.MESSAGE_ILLEGAL),
    (ErrorCode.UNAVAILABLE, PutMessageStatus.SERVICE_NOT_AVAILABLE),
    (ErrorCode.INTERNAL, PutMessageStatus.UNKNOWN_ERROR),
    (99, PutMessageStatus.MESSAGE_ILLEGAL),
])
def test_error_replies_become_statuses(code, status):
    r = parse_send_reply({"rid": 1, "status": "ERROR", "code": int(code), "reason": "why"}, "t", [])
    assert r.status is status and r.error_code == code and r.reason == "why" and not r.ok


def test_unknown_status_is_unknown_error():
    r = parse_send_reply({"rid": 1, "status": "WHAT"}, "t", [])
    assert r.status is PutMessageStatus.UNKNOWN_ERROR and "WHAT" in r.reason


def test_result_msg_id_is_the_first_of_msg_ids():
    ids = ["A1", "A2"]
    r = SendResult(PutMessageStatus.PUT_OK, "t", ids, count=2)
    assert r.msg_ids is ids and r.msg_id == "A1"              # a reply's list is not copied
    assert SendResult(PutMessageStatus.PUT_OK, "t", ("B1",)).msg_ids == ["B1"]
    assert SendResult(PutMessageStatus.UNKNOWN_ERROR).msg_id == "" == SendResult(
        PutMessageStatus.UNKNOWN_ERROR).uniq_key


@pytest.mark.parametrize("status", [None, 7, ["PUT_OK"], "put_ok"])
def test_malformed_statuses_are_unknown_errors(status):
    r = parse_send_reply({"rid": 1, "status": status, "msg_ids": ["A1"]}, "t", ["U1"])
    assert r.status is PutMessageStatus.UNKNOWN_ERROR and not r.ok and r.uniq_keys == ["U1"]


def test_every_put_status_is_parsed():
    for st in PutMessageStatus:
        assert parse_send_reply({"rid": 1, "status": st.value}, "t", []).status is st


def test_a_key_block_is_the_results_list_of_keys():
    block = KeyBlock(b"K1K2K3", 3)
    r = parse_send_reply({"rid": 1, "status": "PUT_OK", "msg_ids": ["A", "B", "C"], "count": 3}, "t", block)
    assert r.uniq_keys == ["K1", "K2", "K3"] and r.uniq_key == "K1"
    assert r.uniq_keys is r.uniq_keys                       # split once


def test_offsets_in_a_reply_are_the_message_ids():
    host = bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F])
    offsets = [0, 167, 1 << 40]
    env = {"rid": 1, "status": "PUT_OK", "count": 3, "store_host": host,
           "phys_offsets": b"".join(o.to_bytes(8, "big") for o in offsets)}
    r = parse_send_reply(env, "t", [])
    assert r.msg_ids == [create_message_id(host, o) for o in offsets] and r.count == 3
    assert r.msg_id == "7F00000100002A9F0000000000000000" and r.msg_ids is r.msg_ids
    assert parse_send_reply({**env, "store_host": b""}, "t", []).msg_ids == []
    assert parse_send_reply({**env, "phys_offsets": b"123"}, "t", []).msg_ids == []   # not 8 each


def test_every_batch_asks_for_offsets():
    for items in ([b"a", b"b"], [Message("orders", b"a")]):
        assert encode_batch("orders", items)[0]["id_format"] == "offsets"
