"""Messages as clients receive them (ipc.received): lazy views over "raw" pull frames must
decode exactly what core.record.decode.decode_message decodes, and "fields" replies (built here with
the reader's own services.reader.meta.MetaEncoder) must give the same MessageExt."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from core.record.codec import MAGIC_BLANK, MAGIC_V2, encode_message
from core.record.decode import decode_message
from core.record.message import Message
from ipc.received import ReceivedMessage, messages_from_reply, parse_host, split_records
from services.reader.meta import MetaEncoder

FIELDS = ("topic", "body", "queue_id", "flag", "tags", "keys", "properties", "born_timestamp",
          "born_host", "store_host", "sys_flag", "reconsume_times", "prepared_transaction_offset",
          "queue_offset", "commit_log_offset", "store_size", "store_timestamp", "body_crc", "msg_id")


def record(i: int, **kw) -> bytes:
    m = Message(kw.pop("topic", "orders"), kw.pop("body", b"body-%d" % i), queue_id=kw.pop("queue_id", i % 4),
                tags=kw.pop("tags", "TagA"), keys=kw.pop("keys", f"k{i} x{i}"),
                properties=kw.pop("properties", {"UNIQ_KEY": f"U{i:031d}", "p": "v"}),
                born_timestamp=1_700_000_000_000 + i, born_host=kw.pop("born_host", ("10.1.2.3", 5555)),
                store_host=kw.pop("store_host", ("192.168.0.9", 10911)), flag=i, **kw)
    return encode_message(m, queue_offset=100 + i, phys_offset=1000 * i, store_timestamp=1_700_000_000_500 + i)


def same(view: ReceivedMessage, rec: bytes) -> None:
    ext = decode_message(rec)
    for name in FIELDS:
        assert getattr(view, name) == getattr(ext, name), name
    assert view.phys_offset == ext.commit_log_offset
    assert view.to_message_ext() == ext


def test_split_and_decode_match_the_codec():
    recs = [record(i) for i in range(10)]
    views = split_records(b"".join(recs))
    assert len(views) == 10
    for view, rec in zip(views, recs):
        same(view, rec)


def test_memoryview_frames_and_ipv6_hosts():
    recs = [record(1, born_host=("::1", 7)), record(2, store_host=("fe80::1", 10911)), record(3)]
    views = split_records(memoryview(b"".join(recs)))
    for view, rec in zip(views, recs):
        same(view, rec)
    assert len(views[1].msg_id) == 56


def test_no_tags_keys_or_properties():
    rec = record(0, tags=None, keys=None, properties={})
    view = split_records(rec)[0]
    assert (view.tags, view.keys, view.properties, view.keys_list, view.uniq_key) == (None, None, {}, [], None)
    same(view, rec)


def test_offsets_do_not_parse_the_tail():
    view = split_records(record(5))[0]
    assert view.queue_offset == 105 and view.body == b"body-5"
    assert view._t is None                       # topic and properties still undecoded
    assert view.uniq_key == f"U{5:031d}" and view._t is not None


def test_v2_records_with_a_two_byte_topic_length():
    v1 = record(3)
    body_len = len(b"body-3")
    topic_at = 84 + 4 + body_len                 # IPv4 hosts: BODYLENGTH at 84
    v2 = bytearray(v1[:topic_at]) + struct.pack(">h", v1[topic_at]) + v1[topic_at + 1:]
    struct.pack_into(">ii", v2, 0, len(v1) + 1, MAGIC_V2)
    view = split_records(bytes(v2))[0]
    assert (view.topic, view.body, view.tags, view.store_size) == ("orders", b"body-3", "TagA", len(v1) + 1)


@pytest.mark.parametrize("frame", [
    b"\x00" * 7,
    struct.pack(">ii", 500, 0) + b"\x00" * 100,
    struct.pack(">ii", 16, MAGIC_BLANK) + b"\x00" * 8,
])
def test_frames_that_are_not_records_are_refused(frame):
    with pytest.raises(ValueError):
        split_records(record(0) + frame)


def test_empty_frame_is_no_messages():
    assert split_records(b"") == []


def test_fields_replies_match_the_raw_view():
    recs = [record(i) for i in range(5)]
    metas, bodies = MetaEncoder().encode([b"".join(recs)])
    env = {"rid": 1, "status": "OK", "messages": metas}
    for ext, rec in zip(messages_from_reply(env, [bodies]), recs):
        assert ext == decode_message(rec)


def test_fields_reply_without_messages():
    assert messages_from_reply({"status": "OK"}, []) == []


@pytest.mark.parametrize("text, host", [
    ("1.2.3.4:5", ("1.2.3.4", 5)), ("[::1]:9", ("::1", 9)), (["h", 3], ("h", 3)),
])
def test_parse_host(text, host):
    assert parse_host(text) == host


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=300), topic=st.text("abcXYZ019_-%|", min_size=1, max_size=127),
       tags=st.one_of(st.none(), st.text("abc", min_size=1, max_size=8)),
       props=st.dictionaries(st.text("pqr", min_size=1, max_size=4), st.text("xyz", min_size=1, max_size=4),
                             max_size=3))
def test_any_record_decodes_like_the_codec(body, topic, tags, props):
    rec = record(1, body=body, topic=topic, tags=tags, properties=props)
    same(split_records(rec + rec)[1], rec)
