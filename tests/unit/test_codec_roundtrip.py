"""The record codec with Hypothesis: encode then decode gives the message back for random
topics (1..127 UTF-8 bytes), bodies, properties, tags, keys, flags and IPv4/IPv6 hosts; and a
record torn at any byte is refused by the CRC-checked parse."""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.codec import DispatchRequest, check_record, encode_message, record_size
from core.record.decode import decode_message
from core.record.hashing import java_hash
from core.record.message import (
    SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, Message, decode_message_id, properties_to_string,
)


def utf8_len_between(lo, hi):
    return lambda s: lo <= len(s.encode("utf-8")) <= hi


plain_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                     min_size=1, max_size=12)
topics = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                 min_size=1, max_size=127).filter(utf8_len_between(1, 127)).filter(
    lambda t: t not in (".", ".."))
key_tokens = st.text(st.characters(blacklist_categories=("Cs",),
                                   blacklist_characters="\x01\x02 "), min_size=1, max_size=10)
hosts = st.tuples(st.ip_addresses().filter(
    lambda a: a.version == 4 or a.ipv4_mapped is None).map(str), st.integers(0, 65535))
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def messages(draw):
    props = draw(st.dictionaries(plain_text.filter(lambda k: k not in ("TAGS", "KEYS")),
                                 plain_text, max_size=5))
    return Message(
        topic=draw(topics), body=draw(st.binary(max_size=600)),
        queue_id=draw(st.integers(0, (1 << 31) - 1)), flag=draw(int32),
        tags=draw(st.none() | plain_text), keys=draw(st.lists(key_tokens, max_size=4)),
        properties=props, born_timestamp=draw(int64), born_host=draw(hosts),
        store_host=draw(hosts), sys_flag=draw(st.integers(0, 0xF)),
        reconsume_times=draw(int32), prepared_transaction_offset=draw(int64))


@settings(max_examples=75, deadline=None)
@given(messages(), st.integers(0, (1 << 62)), st.integers(0, 1 << 62), int64)
def test_encode_decode_round_trip(msg, queue_offset, phys, store_ts):
    rec = encode_message(msg, queue_offset, phys, store_ts)
    v6 = [ipaddress.ip_address(h[0]).version == 6 for h in (msg.born_host, msg.store_host)]
    props_len = len(properties_to_string(msg.all_properties()).encode())
    assert len(rec) == record_size(len(msg.body), len(msg.topic.encode()), props_len, *v6)
    m = decode_message(rec, check_crc=True)
    assert (m.topic, m.body, m.queue_id, m.flag) == (msg.topic, msg.body, msg.queue_id, msg.flag)
    assert m.tags == (msg.tags or None)
    assert m.keys_list == msg.keys_list
    assert m.properties == msg.properties
    assert (m.born_timestamp, m.reconsume_times) == (msg.born_timestamp, msg.reconsume_times)
    assert m.prepared_transaction_offset == msg.prepared_transaction_offset
    for got, sent in ((m.born_host, msg.born_host), (m.store_host, msg.store_host)):
        assert ipaddress.ip_address(got[0]) == ipaddress.ip_address(sent[0]) and got[1] == sent[1]
    assert m.sys_flag & 0xF == msg.sys_flag
    assert bool(m.sys_flag & SYSFLAG_BORNHOST_V6) == v6[0]
    assert bool(m.sys_flag & SYSFLAG_STOREHOST_V6) == v6[1]
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (queue_offset, phys, store_ts)
    assert m.store_size == len(rec)
    assert decode_message_id(m.msg_id)[1] == phys
    req, size = check_record(rec, 0, len(rec), True)
    assert size == len(rec)
    assert (req.topic, req.queue_id, req.commit_log_offset) == (msg.topic, msg.queue_id, phys)
    assert req.tags_code == (java_hash(msg.tags) if msg.tags else 0)
    assert [k for k in req.keys.split(" ") if k] == msg.keys_list


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(messages(), st.integers(0, (1 << 62)), st.integers(0, 1 << 62), int64)
def test_encode_decode_round_trip_many(msg, queue_offset, phys, store_ts):
    test_encode_decode_round_trip.hypothesis.inner_test(msg, queue_offset, phys, store_ts)


@settings(max_examples=50, deadline=None)
@given(messages(), st.integers(0, 1000))
def test_a_torn_record_is_refused_by_the_checked_parse(msg, cut):
    """Zero a record from `cut` on (a torn write). The body CRC and the length fields cover
    everything up to the end of the body; after it, a NUL in the topic or at the end of the
    properties gives the tear away. Without CRC checks (reput) only the framing is checked."""
    rec = encode_message(msg)
    cut = min(cut, len(rec) - 1)
    torn = rec[:cut] + bytes(len(rec) - cut)
    req, _ = check_record(torn, 0, len(torn), True)
    if torn != rec:
        assert not isinstance(req, DispatchRequest)
    host_bytes = 12 * sum(ipaddress.ip_address(h[0]).version == 6
                          for h in (msg.born_host, msg.store_host))
    body_end = 88 + host_bytes + len(msg.body)
    req, _ = check_record(torn, 0, len(torn), False)
    if isinstance(req, DispatchRequest):
        assert cut >= body_end


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(messages(), st.integers(0, 1000))
def test_a_torn_record_is_refused_by_the_checked_parse_many(msg, cut):
    test_a_torn_record_is_refused_by_the_checked_parse.hypothesis.inner_test(msg, cut)
