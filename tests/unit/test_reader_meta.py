"""`services.reader.meta.MetaEncoder` gives docs/PROTOCOL.md's metadata for stored records, the
same values core.record.decode.decode_message reads, for IPv4 and IPv6 hosts and both magic codes."""
from __future__ import annotations

import struct

import pytest

from core.record.codec import MAGIC_V2, encode_message
from core.record.decode import decode_message
from core.record.message import Message
from services.reader.meta import MetaEncoder


def record(i, **kw):
    msg = Message(kw.pop("topic", "FooBar"), b"Once, there was a chance for me! %d" % i,
                  queue_id=3, flag=5, tags=kw.pop("tags", "TAG1"), keys=kw.pop("keys", "k1 k2"),
                  properties=kw.pop("properties", {"UNIQ_KEY": "U%d" % i, "a": "b"}),
                  born_timestamp=1234, reconsume_times=2, **kw)
    return encode_message(msg, queue_offset=i, phys_offset=1000 + 200 * i, store_timestamp=5678)


def expected(rec):
    m = decode_message(rec)
    host = lambda h: f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "phys_offset": m.commit_log_offset, "store_size": m.store_size, "body_size": len(m.body),
            "flag": m.flag, "tags": m.tags, "keys": m.keys, "properties": m.properties,
            "msg_id": m.msg_id, "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp, "born_host": host(m.born_host),
            "store_host": host(m.store_host), "sys_flag": m.sys_flag,
            "reconsume_times": m.reconsume_times, "body_crc": m.body_crc}, m.body


def test_metadata_matches_decode_message_across_chunks():
    recs = [record(i) for i in range(5)]
    recs.append(record(5, born_host=("::1", 7), store_host=("fe80::2", 10911), tags=None, keys=None,
                       properties={}))
    metas, bodies = MetaEncoder().encode([b"".join(recs[:3]), b"".join(recs[3:])])
    assert len(metas) == 6
    assert [expected(r)[0] for r in recs] == metas
    assert bodies == b"".join(expected(r)[1] for r in recs)
    assert metas[0]["msg_id"] == "7F00000100002A9F00000000000003E8"
    assert metas[5]["born_host"] == "[::1]:7" and metas[5]["tags"] is None


def test_magic_v2_records_with_a_two_byte_topic_length():
    v1 = record(1)
    m = decode_message(v1)
    topic_pos = 88 + len(m.body)
    v2 = bytearray(v1[:topic_pos]) + struct.pack(">h", 6) + v1[topic_pos + 1:]
    struct.pack_into(">ii", v2, 0, len(v2), MAGIC_V2)
    metas, body = MetaEncoder().encode([bytes(v2)])
    assert metas[0]["topic"] == "FooBar" and metas[0]["store_size"] == len(v2) and body == m.body


@pytest.mark.parametrize("damage", [
    lambda r: b"\0" * len(r),                                  # zeros
    lambda r: r[:4] + struct.pack(">i", -875286124) + r[8:],   # a blank, not a message
    lambda r: struct.pack(">i", len(r) + 3) + r[4:] + b"xyz",  # TOTALSIZE disagrees
    lambda r: r[:60],                                          # torn
])
def test_bytes_that_are_not_a_record_raise(damage):
    with pytest.raises(ValueError):
        MetaEncoder().encode([damage(record(0))])
