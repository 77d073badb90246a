"""The CommitLog record codec against RocketMQ's byte layout (DESIGN.md section 3): the
158-byte golden record and its field offsets, IPv6 hosts, blanks, a hand-built version-2
record, the recovery parser `check_record`, the put-time refusals and offset message ids.
The Hypothesis round trip is in test_codec_roundtrip.py."""
from __future__ import annotations

import ipaddress
import struct
import zlib

import pytest

from core.record.codec import (
    MAGIC_BLANK, MAGIC_V1, MAGIC_V2, DispatchRequest, RecordCheck, check_record, encode_message,
    prepare_record, record_size, store_timestamp_position, write_blank,
)
from core.record.decode import decode_message
from core.record.hashing import java_hash
from core.record.message import (
    SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, Message, create_message_id, decode_message_id,
    properties_to_string, string_to_properties,
)
from core.status import PutMessageStatus

BODY = b"Once, there was a chance for me!"
KEYS = "1700000000123"                      # a 13-digit millisecond timestamp
BORN_TS = 1_700_000_000_000
STORE_TS = 1_700_000_000_555


def golden_message(**kw) -> Message:
    fields = dict(topic="FooBar", body=BODY, tags="TAG1", keys=KEYS, born_timestamp=BORN_TS,
                  born_host=("10.0.0.1", 51234), store_host=("10.0.0.2", 10911))
    fields.update(kw)
    return Message(**fields)


def i32(rec, pos):
    return struct.unpack_from(">i", rec, pos)[0]


def i64(rec, pos):
    return struct.unpack_from(">q", rec, pos)[0]


# -- the golden record -------------------------------------------------------------------

def test_golden_record_is_158_bytes():
    rec = encode_message(golden_message(), queue_offset=7, phys_offset=1106, store_timestamp=STORE_TS)
    assert len(BODY) == 32
    assert len(rec) == 158 == 91 + 32 + 6 + 29
    assert i32(rec, 0) == 158


def test_golden_record_field_offsets():
    msg = golden_message(queue_id=3, flag=0x55, reconsume_times=2, prepared_transaction_offset=99)
    rec = encode_message(msg, queue_offset=7, phys_offset=1106, store_timestamp=STORE_TS)
    assert i32(rec, 0) == 158
    assert rec[4:8] == bytes.fromhex("DAA320A7")
    assert i32(rec, 4) == MAGIC_V1 == -626843481
    assert i32(rec, 8) == zlib.crc32(BODY) & 0x7FFFFFFF
    assert i32(rec, 12) == 3
    assert i32(rec, 16) == 0x55
    assert i64(rec, 20) == 7
    assert i64(rec, 28) == 1106
    assert i32(rec, 36) == 0
    assert i64(rec, 40) == BORN_TS
    assert rec[48:56] == bytes([10, 0, 0, 1]) + struct.pack(">i", 51234)
    assert i64(rec, 56) == STORE_TS
    assert rec[64:72] == bytes([10, 0, 0, 2]) + struct.pack(">i", 10911)
    assert i32(rec, 72) == 2
    assert i64(rec, 76) == 99
    assert i32(rec, 84) == 32
    assert rec[88:120] == BODY
    assert rec[120] == 6
    assert rec[121:127] == b"FooBar"
    assert struct.unpack_from(">h", rec, 127)[0] == 29
    props = rec[129:158].decode()
    assert props.endswith("\x02")                        # trailing separator kept (5.2+)
    assert string_to_properties(props) == {"TAGS": "TAG1", "KEYS": KEYS}
    assert store_timestamp_position(0) == 56


def test_body_crc_is_masked_to_31_bits():
    # zlib.crc32 of this body has the top bit set; the stored CRC must not.
    body = next(b for b in (bytes([i]) * 7 for i in range(256)) if zlib.crc32(b) & 0x80000000)
    rec = encode_message(Message("T", body))
    assert i32(rec, 8) == zlib.crc32(body) & 0x7FFFFFFF
    assert i32(rec, 8) >= 0


def test_golden_record_decodes():
    rec = encode_message(golden_message(), queue_offset=7, phys_offset=1106, store_timestamp=STORE_TS)
    m = decode_message(rec, check_crc=True)
    assert (m.topic, m.body, m.tags, m.keys) == ("FooBar", BODY, "TAG1", KEYS)
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (7, 1106, STORE_TS)
    assert m.born_host == ("10.0.0.1", 51234) and m.store_host == ("10.0.0.2", 10911)
    assert m.store_size == 158
    assert m.msg_id == create_message_id(bytes([10, 0, 0, 2]) + struct.pack(">i", 10911), 1106)


def test_ten_golden_records_in_a_store_end_at_1580(tiny_config, open_store):
    """RocketMQ's worked example, as RocketMQ writes it: without the CRC property."""
    store = open_store(tiny_config(enabled_append_prop_crc=False))
    for i in range(10):
        r = store.put_message(golden_message())
        assert r.ok
        assert r.append_result.wrote_offset == 158 * i
        assert r.append_result.wrote_bytes == 158
        assert r.append_result.logics_offset == i
    assert store.get_max_phy_offset() == 1580


def test_ten_golden_records_with_the_record_crc_end_at_1780(store):
    """Our default: each record 20 bytes longer, `__CRC32#` with its CRC (reference 2.12)."""
    for i in range(10):
        r = store.put_message(golden_message())
        assert r.append_result.wrote_offset == 178 * i and r.append_result.wrote_bytes == 178
    assert store.get_max_phy_offset() == 1780


def test_record_size_formula():
    assert record_size(32, 6, 29) == 158
    assert record_size(0, 1, 0) == 92
    assert record_size(0, 0, 0) == 91
    assert record_size(32, 6, 29, born_v6=True) == 170
    assert record_size(32, 6, 29, born_v6=True, store_v6=True) == 182
    assert record_size(32, 6, 29, topic_len_bytes=2) == 159


# -- IPv6 hosts ----------------------------------------------------------------------------

def test_ipv6_born_host_shifts_fields_by_12():
    msg = golden_message(born_host=("2001:db8::1", 4242))
    rec = encode_message(msg, queue_offset=1, phys_offset=500, store_timestamp=STORE_TS)
    assert len(rec) == 170
    sys_flag = i32(rec, 36)
    assert sys_flag & SYSFLAG_BORNHOST_V6 and not sys_flag & SYSFLAG_STOREHOST_V6
    assert rec[48:64] == ipaddress.ip_address("2001:db8::1").packed
    assert i32(rec, 64) == 4242
    assert store_timestamp_position(sys_flag) == 68
    assert i64(rec, 68) == STORE_TS
    assert i32(rec, 96) == 32                               # body length at 84 + 12
    m = decode_message(rec, check_crc=True)
    assert m.born_host == ("2001:db8::1", 4242)
    assert m.store_timestamp == STORE_TS and m.body == BODY


def test_ipv6_both_hosts_and_56_char_message_id():
    msg = golden_message(born_host=("::1", 1), store_host=("fe80::2", 10911))
    rec = encode_message(msg, phys_offset=123456, store_timestamp=STORE_TS)
    assert len(rec) == 182
    assert i32(rec, 36) & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6) == 0x30
    assert i64(rec, 68) == STORE_TS
    assert i32(rec, 108) == 32                              # body length at 84 + 24
    m = decode_message(rec, check_crc=True)
    assert m.store_host == ("fe80::2", 10911)
    assert len(m.msg_id) == 56
    host, phys = decode_message_id(m.msg_id)
    assert host == ("fe80::2", 10911) and phys == 123456


def test_store_host_from_the_store_overrides_the_message():
    store_host = ipaddress.ip_address("::2").packed + struct.pack(">i", 9)
    rec = prepare_record(golden_message(), 1 << 20, store_host)
    assert rec.sys_flag & SYSFLAG_STOREHOST_V6
    assert rec.size == 170
    rec4 = prepare_record(golden_message(store_host=("::5", 1)), 1 << 20,
                          bytes([1, 2, 3, 4]) + struct.pack(">i", 9))
    assert not rec4.sys_flag & SYSFLAG_STOREHOST_V6
    assert rec4.size == 158


def test_caller_supplied_v6_bits_are_replaced_by_the_real_host_kinds():
    msg = golden_message(sys_flag=SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6 | 0x2)
    rec = encode_message(msg)
    assert len(rec) == 158
    assert i32(rec, 36) == 0x2


# -- blanks, v2 records, check_record -------------------------------------------------------

def test_blank_record():
    buf = bytearray(64)
    write_blank(buf, 16, 48)
    assert i32(buf, 16) == 48
    assert buf[20:24] == bytes.fromhex("CBD43194")
    assert i32(buf, 20) == MAGIC_BLANK == -875286124
    assert check_record(buf, 16, 64, True) == (RecordCheck.BLANK, 48)
    with pytest.raises(ValueError):
        decode_message(buf, 16)


def test_blank_claiming_more_than_is_left_ends_the_log():
    buf = bytearray(64)
    write_blank(buf, 16, 100)
    assert check_record(buf, 16, 64, True) == (RecordCheck.END, 0)


def build_v2_record(topic: bytes, body: bytes, props: bytes, queue_offset: int, phys: int) -> bytes:
    """A version-2 record (magic 0xDAA320AB, 2-byte topic length), packed field by field."""
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(body) + 2 + len(topic) \
        + 2 + len(props)
    out = bytearray()
    out += struct.pack(">i", total)
    out += bytes.fromhex("DAA320AB")
    out += struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
    out += struct.pack(">i", 2)                            # queue id
    out += struct.pack(">i", 0)                            # flag
    out += struct.pack(">q", queue_offset)
    out += struct.pack(">q", phys)
    out += struct.pack(">i", 0)                            # sys flag: IPv4 hosts
    out += struct.pack(">q", BORN_TS)
    out += bytes([192, 168, 1, 1]) + struct.pack(">i", 7000)
    out += struct.pack(">q", STORE_TS)
    out += bytes([192, 168, 1, 2]) + struct.pack(">i", 10911)
    out += struct.pack(">i", 0)                            # reconsume times
    out += struct.pack(">q", 0)                            # prepared transaction offset
    out += struct.pack(">i", len(body)) + body
    out += struct.pack(">h", len(topic)) + topic
    out += struct.pack(">h", len(props)) + props
    assert len(out) == total
    return bytes(out)


def test_reads_a_version_2_record():
    topic = ("t" * 200).encode()                           # longer than a v1 record can hold
    props = b"TAGS\x01red\x02KEYS\x01k1 k2\x02"
    rec = build_v2_record(topic, b"v2 body", props, queue_offset=5, phys=4096)
    assert i32(rec, 4) == MAGIC_V2
    m = decode_message(rec, check_crc=True)
    assert m.topic == "t" * 200
    assert (m.body, m.tags, m.keys, m.queue_id) == (b"v2 body", "red", "k1 k2", 2)
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (5, 4096, STORE_TS)
    assert m.born_host == ("192.168.1.1", 7000)
    req, size = check_record(rec, 0, len(rec), True)
    assert size == len(rec) == 91 + 1 + 7 + 200 + len(props)
    assert isinstance(req, DispatchRequest)
    assert (req.topic, req.queue_id, req.consume_queue_offset) == ("t" * 200, 2, 5)
    assert req.commit_log_offset == 4096 and req.keys == "k1 k2"
    assert req.tags_code == java_hash("red")


def test_check_record_of_a_valid_record():
    rec = encode_message(golden_message(queue_id=1, properties={"UNIQ_KEY": "U1"}),
                         queue_offset=9, phys_offset=316, store_timestamp=STORE_TS)
    req, size = check_record(rec, 0, len(rec), True)
    assert size == len(rec)
    assert req == DispatchRequest("FooBar", 1, 316, len(rec), java_hash("TAG1"), STORE_TS, 9,
                                  KEYS, "U1", 0, 0)


def test_check_record_zeros_and_short_tails_end_the_log():
    assert check_record(bytes(200), 0, 200, True) == (RecordCheck.END, 0)
    assert check_record(bytes(200), 195, 200, True) == (RecordCheck.END, 0)
    rec = encode_message(golden_message())
    for cut in (4, 8, 60, 157):
        assert check_record(rec[:cut] + bytes(0), 0, cut, True)[0] is RecordCheck.END
    buf = rec + bytes(10)
    assert check_record(buf, 0, 100, True) == (RecordCheck.END, 0)      # limit inside the record


def test_check_record_foreign_magic_ends_the_log():
    rec = bytearray(encode_message(golden_message()))
    rec[4:8] = b"\x12\x34\x56\x78"
    assert check_record(rec, 0, len(rec), True) == (RecordCheck.END, 0)


def test_check_record_crc_mismatch():
    rec = bytearray(encode_message(golden_message()))
    rec[90] ^= 0x01                                        # a body byte
    assert check_record(rec, 0, len(rec), True) == (RecordCheck.CORRUPT, 158)
    req, size = check_record(rec, 0, len(rec), False)      # reput does not check CRCs
    assert isinstance(req, DispatchRequest) and size == 158
    with pytest.raises(ValueError):
        decode_message(rec, check_crc=True)


def test_check_record_length_mismatch():
    rec = bytearray(encode_message(golden_message()))
    struct.pack_into(">h", rec, 127, 28)                   # properties length one short
    assert check_record(rec, 0, len(rec), False) == (RecordCheck.CORRUPT, 158)
    with pytest.raises(ValueError):
        decode_message(rec)


def test_check_record_zeroed_body_length_is_corrupt():
    # RocketMQ's testRecover damage: 16 zero bytes from the body length field.
    rec = bytearray(encode_message(golden_message()))
    rec[84:100] = bytes(16)
    assert check_record(rec, 0, len(rec), True)[0] is RecordCheck.CORRUPT


def test_records_back_to_back():
    a = encode_message(golden_message(), phys_offset=0)
    b = encode_message(golden_message(body=b"second"), phys_offset=len(a))
    buf = bytearray(a + b + bytes(16))
    write_blank(buf, len(a) + len(b), 16)
    pos, seen = 0, []
    while True:
        req, size = check_record(buf, pos, len(buf), True)
        if not isinstance(req, DispatchRequest):
            assert req is RecordCheck.BLANK and size == 16
            break
        seen.append(req.commit_log_offset)
        pos += size
    assert seen == [0, len(a)]
    assert decode_message(buf, len(a)).body == b"second"


# -- put-time refusals ----------------------------------------------------------------------

MAX = 1024


@pytest.mark.parametrize("msg, status", [
    (Message("", b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("t" * 128, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("é" * 64, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),          # 128 UTF-8 bytes
    (Message("T", b"x" * (MAX + 1)), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"x", queue_id=-1), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", "text body"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"x", properties={"a\x01b": "v"}), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"x", properties={"a": "v\x02w"}), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"x", born_host=("not an ip", 1)), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("a\x00b", b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (Message("T", b"x", properties={"p": "v" * 32767}), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
])
def test_prepare_refuses(msg, status):
    assert prepare_record(msg, MAX) is status


def test_limits_that_are_still_accepted():
    assert not isinstance(prepare_record(Message("t" * 127, b"x"), MAX), PutMessageStatus)
    assert not isinstance(prepare_record(Message("é" * 63 + "e", b"x"), MAX), PutMessageStatus)
    assert not isinstance(prepare_record(Message("T", b"x" * MAX), MAX), PutMessageStatus)
    assert not isinstance(prepare_record(Message("T", b""), MAX), PutMessageStatus)
    # "p\x01" + value + "\x02" = 32767 bytes exactly.
    rec = prepare_record(Message("T", b"x", properties={"p": "v" * 32764}), MAX)
    assert not isinstance(rec, PutMessageStatus)
    assert rec.size == 91 + 1 + 1 + 32767


def test_properties_with_none_values_are_skipped():
    msg = Message("T", b"x", properties={"gone": None, "kept": "1"})
    rec = prepare_record(msg, MAX)
    assert not isinstance(rec, PutMessageStatus)
    assert decode_message(encode_message(msg)).properties == {"kept": "1"}


def test_properties_string_format():
    assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
    assert properties_to_string({"A": None, "B": "2"}) == "B\x012\x02"
    assert string_to_properties("A\x011\x02B\x012\x02") == {"A": "1", "B": "2"}
    assert string_to_properties("A\x011\x02B\x012") == {"A": "1", "B": "2"}   # 4.9.x, no trailing
    assert string_to_properties("junk\x02\x01v\x02k\x01\x02A\x011\x02") == {"A": "1"}


# -- offset message ids ---------------------------------------------------------------------

def test_offset_message_id_ipv4():
    host = bytes([192, 168, 0, 1]) + struct.pack(">i", 10911)
    msg_id = create_message_id(host, 1580)
    assert msg_id == "C0A80001" + "00002A9F" + "000000000000062C"
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert decode_message_id(msg_id) == (("192.168.0.1", 10911), 1580)
    assert decode_message_id(msg_id.lower()) == (("192.168.0.1", 10911), 1580)


def test_offset_message_id_ipv6():
    host = ipaddress.ip_address("2001:db8::7").packed + struct.pack(">i", 10911)
    msg_id = create_message_id(host, (1 << 40) + 3)
    assert len(msg_id) == 56
    assert decode_message_id(msg_id) == (("2001:db8::7", 10911), (1 << 40) + 3)


@pytest.mark.parametrize("bad", ["", "ABC", "00" * 15, "00" * 20, "zz" * 16])
def test_bad_message_ids_are_refused(bad):
    with pytest.raises(ValueError):
        decode_message_id(bad)
