"""`core.record.decode.decode_message` returns a `LazyMessageExt`: field by field the same MessageExt
that a full, eager decode gives (checked here against the eager decoder the store used before,
kept below as the reference, and against the client's `ipc.received` views), in any order of
reads and writes, for IPv4/IPv6 hosts, empty and absent properties, KEYS/TAGS, non-ASCII text
and version-2 records; equal to, copied and pickled as a MessageExt; and every record that is
not whole raises ValueError at decode time, or with `pulled_messages` at its first field read."""
from __future__ import annotations

import copy
import dataclasses
import mmap
import pickle
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.codec import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, encode_message
from core.record.decode import LazyMessageExt, decode_message, pulled_messages
from core.record.message import Message, MessageExt, bytes_to_host, string_to_properties
from ipc.received import split_records

FIELDS = tuple(f.name for f in dataclasses.fields(MessageExt))
_HEADERS = {(b, s): struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)}


def eager_decode(buf, pos=0) -> MessageExt:
    """The store's decoder before it became lazy: everything decoded into a plain MessageExt."""
    magic, sys_flag = struct.unpack_from(">i", buf, pos + 4)[0], struct.unpack_from(">i", buf, pos + 36)[0]
    header = _HEADERS[20 if sys_flag & 0x10 else 8, 20 if sys_flag & 0x20 else 8]
    (total, _, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born, store_ts, store,
     reconsume, prepared, body_len) = header.unpack_from(buf, pos)
    p = pos + header.size
    body = bytes(buf[p:p + body_len])
    p += body_len
    if magic == MAGIC_V1:
        n, p = buf[p], p + 1
    else:
        n, p = struct.unpack_from(">h", buf, p)[0], p + 2
    topic = bytes(buf[p:p + n]).decode("utf-8")
    props_len = struct.unpack_from(">h", buf, p + n)[0]
    p += n + 2
    props = string_to_properties(bytes(buf[p:p + props_len]).decode("utf-8")) if props_len > 0 else {}
    assert p + props_len - pos == total
    return MessageExt(
        topic=topic, body=body, queue_id=queue_id, flag=flag, tags=props.pop("TAGS", None),
        keys=props.pop("KEYS", None), properties=props, born_timestamp=born_ts,
        born_host=bytes_to_host(born), store_host=bytes_to_host(store), sys_flag=sys_flag,
        reconsume_times=reconsume, prepared_transaction_offset=prepared, queue_offset=queue_offset,
        commit_log_offset=phys, store_size=total, store_timestamp=store_ts, body_crc=crc,
        msg_id=(bytes(store) + struct.pack(">q", phys)).hex().upper())


def to_v2(rec: bytes) -> bytes:
    """The same record as version 2: magic 0xDAA320AB and a 2-byte topic length."""
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    p = 88 + 12 * bool(sys_flag & 0x10) + 12 * bool(sys_flag & 0x20)
    p += struct.unpack_from(">i", rec, p - 4)[0]                 # past the body: TOPICLENGTH
    out = bytearray(rec[:p]) + struct.pack(">h", rec[p]) + rec[p + 1:]
    struct.pack_into(">ii", out, 0, len(out), MAGIC_V2)
    return bytes(out)


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
               min_size=1, max_size=10)
topics = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                 min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= 127 and s not in (".", ".."))
hosts = st.tuples(st.ip_addresses().filter(
    lambda a: a.version == 4 or a.ipv4_mapped is None).map(str), st.integers(0, 65535))
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def records(draw):
    """(record bytes, as stored) of a random message, version 1 or 2."""
    msg = Message(
        topic=draw(topics), body=draw(st.binary(max_size=300)), queue_id=draw(st.integers(0, 1 << 20)),
        flag=draw(int32), tags=draw(st.none() | text),
        keys=draw(st.none() | st.lists(text.filter(lambda k: " " not in k), max_size=3)),
        properties=draw(st.dictionaries(text.filter(lambda k: k not in ("TAGS", "KEYS")), text,
                                        max_size=4)),
        born_timestamp=draw(int64), born_host=draw(hosts), store_host=draw(hosts),
        sys_flag=draw(st.integers(0, 0xF)), reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64))
    rec = encode_message(msg, draw(st.integers(0, 1 << 62)), draw(st.integers(0, 1 << 62)), draw(int64))
    return to_v2(rec) if draw(st.booleans()) else rec


def record(**kw) -> bytes:
    fields = dict(topic="Orders-订单", body=b"body \x00\xff", queue_id=3, flag=7, tags="TagA",
                  keys=["k1", "k2"], properties={"UNIQ_KEY": "U1", "名": "值"}, born_timestamp=11,
                  born_host=("10.0.0.1", 5000), store_host=("fe80::1", 10911), reconsume_times=2,
                  prepared_transaction_offset=9)
    fields.update(kw)
    return encode_message(Message(**fields), queue_offset=42, phys_offset=4096, store_timestamp=99)


# -- the same fields as the eager decode --------------------------------------------------

@settings(max_examples=75, deadline=None)
@given(records(), st.permutations(FIELDS))
def test_lazy_decode_equals_the_eager_decode_field_by_field(rec, order):
    want = eager_decode(rec)
    got = decode_message(rec, check_crc=True)
    assert isinstance(got, MessageExt) and isinstance(got, LazyMessageExt)
    for name in order:                                   # any first field, any order
        assert getattr(got, name) == getattr(want, name), name
    assert got == want and want == got and not got != want
    assert got == split_records(rec)[0].to_message_ext()
    assert (got.keys_list, got.uniq_key, got.all_properties()) == \
           (want.keys_list, want.uniq_key, want.all_properties())


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(records(), st.permutations(FIELDS))
def test_lazy_decode_equals_the_eager_decode_field_by_field_many(rec, order):
    test_lazy_decode_equals_the_eager_decode_field_by_field.hypothesis.inner_test(rec, order)


@settings(max_examples=50, deadline=None)
@given(records(), st.permutations(FIELDS), st.sampled_from(["read", "write", "compare", "pickle"]))
def test_a_pulled_message_is_the_decoded_one_whatever_is_done_first(rec, order, first):
    want = eager_decode(rec)
    (got,) = pulled_messages([bytes(rec)])
    assert isinstance(got, LazyMessageExt)
    if first == "write":
        got.flag = want.flag
    elif first == "compare":
        assert got == want
    elif first == "pickle":
        assert pickle.loads(pickle.dumps(got)) == want
    for name in order:
        assert getattr(got, name) == getattr(want, name), name
    assert got == want


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(records(), st.permutations(FIELDS), st.sampled_from(["read", "write", "compare", "pickle"]))
def test_a_pulled_message_is_the_decoded_one_whatever_is_done_first_many(rec, order, first):
    test_a_pulled_message_is_the_decoded_one_whatever_is_done_first.hypothesis.inner_test(rec, order, first)


@settings(max_examples=100, deadline=None)
@given(records(), st.binary(max_size=20), st.binary(max_size=20))
def test_a_record_inside_a_larger_buffer(rec, before, after):
    buf = bytearray(before + rec + after)
    got = decode_message(buf, len(before))
    buf[:] = bytes(len(buf))                             # the message holds its own copy
    assert got == eager_decode(rec)
    assert decode_message(memoryview(before + rec), len(before)) == eager_decode(rec)


@settings(max_examples=50, deadline=None)
@given(records(), records(), st.sampled_from(FIELDS), st.lists(st.sampled_from(FIELDS), max_size=4))
def test_every_field_is_writable_after_any_reads(rec, other, name, read_first):
    got = decode_message(rec)
    for r in read_first:
        getattr(got, r)
    value = getattr(eager_decode(other), name)
    setattr(got, name, value)
    assert getattr(got, name) == value
    assert got == dataclasses.replace(eager_decode(rec), **{name: value})


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(records(), records(), st.sampled_from(FIELDS), st.lists(st.sampled_from(FIELDS), max_size=4))
def test_every_field_is_writable_after_any_reads_many(rec, other, name, read_first):
    test_every_field_is_writable_after_any_reads.hypothesis.inner_test(rec, other, name, read_first)


# -- a MessageExt in every other way ------------------------------------------------------

def test_copies_pickles_replace_asdict_and_repr():
    m = decode_message(record())
    want = eager_decode(record())
    for twin in (copy.copy(m), copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert type(twin) is MessageExt and twin == want
    changed = dataclasses.replace(m, tags="TagB")
    assert changed == dataclasses.replace(want, tags="TagB") and changed.topic == "Orders-订单"
    assert dataclasses.asdict(m) == dataclasses.asdict(want)
    assert repr(m) == repr(want).replace("MessageExt(", "LazyMessageExt(", 1)
    assert m != dataclasses.replace(want, queue_offset=43)
    assert m == decode_message(record()) and m != decode_message(record(flag=8))
    assert (m == "not a message") is False
    with pytest.raises(TypeError):
        hash(m)                                          # like MessageExt: mutable, unhashable


def test_direct_construction_is_a_plain_message():
    m = LazyMessageExt(topic="T", body=b"b", queue_offset=5)
    assert m == MessageExt(topic="T", body=b"b", queue_offset=5)
    m.queue_offset = 6
    assert (m.queue_offset, m.properties, m.msg_id) == (6, {}, "")


def test_the_properties_map_is_the_messages_own():
    m = decode_message(record())
    props = m.properties
    props["added"] = "1"
    assert m.properties is props
    m.flag = 8                                           # the first write decodes everything
    assert m.properties is props and m.properties["added"] == "1" and m.flag == 8
    assert m.tags == "TagA" and m.body == b"body \x00\xff"


def test_absent_empty_properties_and_ipv6_hosts():
    m = decode_message(record(tags=None, keys=None, properties={}, born_host=("::1", 7)))
    assert (m.tags, m.keys, m.properties, m.keys_list, m.uniq_key) == (None, None, {}, [], None)
    assert m.born_host == ("::1", 7) and m.store_host == ("fe80::1", 10911)
    assert m.sys_flag & 0x30 == 0x30
    assert m.msg_id == "FE800000000000000000000000000001" + "00002A9F" + "0000000000001000"


def test_reads_from_a_mapping_that_is_then_closed():
    rec = record()
    mm = mmap.mmap(-1, 4096)
    mm[100:100 + len(rec)] = rec
    m = decode_message(mm, 100, check_crc=True)
    mm.close()                                           # would fail if the message held a view
    assert m == eager_decode(rec)


# -- records that are not whole ------------------------------------------------------------

def damaged(rec: bytes):
    yield b""
    for cut in range(1, len(rec)):
        yield rec[:cut]
    blank = bytearray(rec)
    struct.pack_into(">i", blank, 4, MAGIC_BLANK)
    yield blank
    foreign = bytearray(rec)
    foreign[4:8] = b"\x12\x34\x56\x78"
    yield foreign
    for delta in (-1, 1):
        longer = bytearray(rec + b"\x00")
        struct.pack_into(">i", longer, 0, len(rec) + delta)
        yield longer
    body_len_pos = 88 + 12 * 1 - 4                       # record(): the store host is IPv6
    for body_len in (-1, -100, 1 << 30):
        bad = bytearray(rec)
        struct.pack_into(">i", bad, body_len_pos, body_len)
        yield bad
    props_len_pos = 100 + len(b"body \x00\xff") + 1 + len("Orders-订单".encode())
    for props_len in (-1, 0, 0x7FFF):
        bad = bytearray(rec)
        struct.pack_into(">h", bad, props_len_pos, props_len)
        yield bad


def test_a_record_that_is_not_whole_raises_value_error():
    rec = record()
    assert decode_message(rec) == eager_decode(rec)
    for bad in damaged(rec):
        with pytest.raises(ValueError):
            decode_message(bytes(bad))
        with pytest.raises(ValueError):
            decode_message(b"\x00" * 5 + bytes(bad), 5)
    with pytest.raises(ValueError):
        decode_message(to_v2(rec)[:-1])


@pytest.mark.parametrize("first", ["body", "topic", "queue_offset", "store_host", "msg_id", "write", "eq"])
def test_a_pulled_record_that_is_not_whole_raises_value_error_at_its_first_read(first):
    rec = record()
    for bad in [*damaged(rec), to_v2(rec)[:-1], b"", b"\x00" * 30]:
        (m,) = pulled_messages([bytes(bad)])
        with pytest.raises(ValueError):
            if first == "write":
                m.flag = 1
            elif first == "eq":
                m == eager_decode(rec)
            else:
                getattr(m, first)


def test_a_body_crc_mismatch_raises_only_when_checked():
    rec = bytearray(record())
    rec[100] ^= 1                                        # a body byte (IPv6 store host: body at 100)
    m = decode_message(bytes(rec))
    assert m.body == bytes(rec[100:107]) and m.body_crc == zlib.crc32(record()[100:107]) & 0x7FFFFFFF
    with pytest.raises(ValueError):
        decode_message(bytes(rec), check_crc=True)


def test_text_that_is_not_utf8_raises_value_error_when_read():
    rec = bytearray(record(topic="T", properties={}, tags=None, keys=None))
    rec[-3] = 0xFF                                       # the topic's only byte (no properties)
    m = decode_message(bytes(rec))
    assert m.body == b"body \x00\xff" and m.queue_offset == 42
    with pytest.raises(ValueError):
        m.topic
