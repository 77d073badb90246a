"""`core.record.scan.scan_segment`, the dispatcher's fast parse, against `check_record`, the
reference parse: for random messages (IPv4 and IPv6 hosts, any properties, tags and keys),
and for the same records torn, bit-flipped or misplaced (PHYSOFFSET not where they lie), both
accept and refuse the same records and read the same fields, with the headers checked by
numpy or by struct, and for property strings built to trip the UNIQ_KEY template cache."""
from __future__ import annotations

import contextlib

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import core.record.props as record_props
import core.record.scan as record_scan
from core.record.codec import (
    DispatchRequest, RecordCheck, check_record, encode_message, with_reserve, write_blank,
)
from core.record.message import Message
from core.record.crc_property import FORCED, seal
from core.record.scan import ScanBatch, ScanEnd, scan_segment

from tests.unit.test_codec_roundtrip import messages

_OUTCOMES = {RecordCheck.BLANK: ScanEnd.BLANK, RecordCheck.END: ScanEnd.END,
             RecordCheck.CORRUPT: ScanEnd.CORRUPT}


def _reference(buf, pos, end, check_crc):
    """What check_record makes of the record at `pos`: a scanned tuple, or a ScanEnd."""
    req, size = check_record(buf, pos, end, check_crc)
    if not isinstance(req, DispatchRequest):
        return _OUTCOMES[req]
    return (req.commit_log_offset, req.msg_size, req.topic, req.queue_id,
            req.consume_queue_offset, req.tags_code, req.store_timestamp, req.keys,
            req.uniq_key, req.sys_flag)


@contextlib.contextmanager
def numpy_from(n: int):
    """Check headers with numpy from `n` fast-path records on (1: always)."""
    saved, record_scan.NUMPY_MIN_RECORDS = record_scan.NUMPY_MIN_RECORDS, n
    try:
        yield
    finally:
        record_scan.NUMPY_MIN_RECORDS = saved


def scan_all(buf, check_crc, numpy_min=1, max_records=1 << 20):
    out = ScanBatch()
    with numpy_from(numpy_min):
        reached, why = scan_segment(buf, 0, len(buf), 0, check_crc, out, max_records)
    return reached, why, out.rows()


def expected_scan(buf, check_crc):
    """(position reached, ScanEnd, rows) record by record with check_record."""
    rows, p = [], 0
    while True:
        ref = _reference(buf, p, len(buf), check_crc)
        if not isinstance(ref, tuple):
            return p, ref, rows
        if ref[0] != p:
            return p, ScanEnd.MISPLACED, rows
        rows.append(ref)
        p += ref[1]


@settings(max_examples=75, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), st.sampled_from([False, True, FORCED]), st.data())
def test_scan_agrees_with_check_record(msgs, check_crc, data):
    damage = data.draw(st.sampled_from(["none", "zero_tail", "flip", "misplace"]))
    sealed = data.draw(st.booleans())                      # with the record CRC property
    misplaced = data.draw(st.integers(0, len(msgs) - 1)) if damage == "misplace" else -1
    records, pos = [], 0
    for i, m in enumerate(msgs):
        says = pos + 1 if i == misplaced else pos          # PHYSOFFSET not where it lies
        rec = encode_message(m, queue_offset=i, phys_offset=says, store_timestamp=1000 + i,
                             prop_crc=sealed)
        records.append(rec)
        pos += len(rec)
    buf = bytearray(b"".join(records) + bytes(16))
    at = data.draw(st.integers(0, len(buf) - 17))
    if damage == "zero_tail":
        buf[at:] = bytes(len(buf) - at)
    elif damage == "flip":
        buf[at] ^= 1 << data.draw(st.integers(0, 7))
    numpy_min = data.draw(st.sampled_from([1, 3, 1 << 20]))
    assert scan_all(buf, check_crc, numpy_min) == expected_scan(buf, check_crc)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), st.sampled_from([False, True, FORCED]), st.data())
def test_scan_agrees_with_check_record_many(msgs, check_crc, data):
    test_scan_agrees_with_check_record.hypothesis.inner_test(msgs, check_crc, data)


def test_blank_ends_the_segment_and_max_records_pauses():
    a = encode_message(Message("T", b"a", tags="x", keys="k1 k2"), phys_offset=0)
    b = encode_message(Message("T", b"b", properties={"UNIQ_KEY": "U1"}), phys_offset=len(a))
    buf = bytearray(a + b + bytes(64))
    write_blank(buf, len(a) + len(b), 64)
    out = ScanBatch()
    assert scan_segment(buf, 0, len(buf), 0, True, out, 1) == (len(a), ScanEnd.LIMIT)
    _, keys, uniqs = out.strings()
    assert keys[0] == "k1 k2" and uniqs[0] == ""
    assert scan_segment(buf, len(a), len(buf), 0, True, out, 10) == (len(a) + len(b), ScanEnd.BLANK)
    _, keys, uniqs = out.strings()
    assert (keys[1], uniqs[1]) == ("", "U1")


def test_the_last_non_empty_property_wins_as_in_the_reference_parse():
    rec = encode_message(Message("T", b"x", properties={"A": "1"}), phys_offset=0)
    # Rewrite the properties by hand: TAGS twice (the second empty), KEYS twice.
    props = "TAGS\x01t1\x02KEYS\x01a\x02TAGS\x01\x02KEYS\x01b\x02".encode()
    head = rec[:rec.index(b"A\x011")] [:-2]
    raw = head + len(props).to_bytes(2, "big") + props
    raw = len(raw).to_bytes(4, "big") + raw[4:]
    out = ScanBatch()
    scan_segment(raw, 0, len(raw), 0, True, out, 10)
    assert out.rows() == [_reference(raw, 0, len(raw), True)]
    assert out.strings()[1][0] == "b"


def with_properties(body: bytes, props: bytes, phys: int, sealed: bool = False) -> bytes:
    """A v1 record whose property bytes are `props`, whatever they hold (followed by the
    record CRC property, sealed, when `sealed`)."""
    rec = encode_message(Message("T", body), phys_offset=phys)
    assert rec.endswith(b"\x00\x00")                    # no properties
    if sealed:
        props = with_reserve(props)
    rec = rec[:-2] + len(props).to_bytes(2, "big") + props
    rec = bytearray(len(rec).to_bytes(4, "big") + rec[4:])
    seal(rec, 0, len(rec))
    return bytes(rec)


# Fragments of property strings around UNIQ_KEY: separators in odd places, empty values,
# repeated names, a name inside a value, bytes that are not UTF-8.
_FRAGMENTS = [b"UNIQ_KEY\x01", b"TAGS\x01", b"KEYS\x01", b"\x02", b"\x01", b"u1", b"u2", b"ab",
              b"k1 k2", b"\xc3\xa9", b"\xc3", b"\xff", b"\x00", b"X\x01UNIQ_KEY\x01v"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=10).map(b"".join),
                min_size=1, max_size=14),
       st.booleans(), st.sampled_from([1, 1 << 20]))
@example([b"UNIQ_KEY\x01u1\x02UNIQ_KEY\x01ab\x02"], True, 1)
@example([b"UNIQ_KEY\x01u1\x02TAGS\x01ab\x02UNIQ_KEY\x01\x02"], True, 1)
@example([b"TAGS\x01\xc3\x02UNIQ_KEY\x01u1"], False, 1)
@example([b"UNIQ_KEY\x01u1\xff\x02TAGS\x01ab"], False, 1)
@example([b"X\x01UNIQ_KEY\x01v\x02UNIQ_KEY\x01u1\x02"], False, 1)
def test_property_strings_parse_as_the_reference_does(props, check_crc, numpy_min):
    """Records that differ only in their property bytes, scanned twice (cold and warm caches)
    and with sibling values: the same rows and stops as check_record; and each property
    string on its own: the same tag code, KEYS and UNIQ_KEY (None where check_record refuses)."""
    siblings = [p.replace(b"u1", b"u2") for p in props]
    for p in props + siblings:
        ref = _reference(with_properties(b"body", p, 0), 0, 1 << 20, False)
        want = None if ref is ScanEnd.CORRUPT else (ref[5], ref[7], ref[8])
        assert record_props.properties(p) == want
        assert record_props.properties(p) == want
    records, pos = [], 0
    for p in props + siblings:
        rec = with_properties(b"body", p, pos)
        records.append(rec)
        pos += len(rec)
    buf = b"".join(records) + bytes(16)
    expected = expected_scan(buf, check_crc)
    assert scan_all(buf, check_crc, numpy_min) == expected
    assert scan_all(buf, check_crc, numpy_min) == expected


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=10).map(b"".join),
                min_size=1, max_size=14),
       st.booleans(), st.sampled_from([1, 1 << 20]))
def test_property_strings_parse_as_the_reference_does_many(props, check_crc, numpy_min):
    test_property_strings_parse_as_the_reference_does.hypothesis.inner_test(props, check_crc, numpy_min)


def test_many_records_use_the_numpy_header_check_and_pause_at_max_records():
    msgs = [Message("Topic", b"x" * i, queue_id=i % 3, tags="t",
                    properties={"UNIQ_KEY": "%032X" % i}) for i in range(40)]
    records, pos = [], 0
    for i, m in enumerate(msgs):
        rec = encode_message(m, queue_offset=i, phys_offset=pos, store_timestamp=5 + i)
        records.append(rec)
        pos += len(rec)
    buf = b"".join(records) + bytes(16)
    reached, why, rows = scan_all(buf, True, record_scan.NUMPY_MIN_RECORDS, 25)
    assert (reached, why) == (sum(map(len, records[:25])), ScanEnd.LIMIT)
    assert rows == expected_scan(buf, True)[2][:25]
    assert [r[8] for r in rows] == ["%032X" % i for i in range(25)]


def test_a_properties_length_past_int16_is_corrupt_on_both_header_checks():
    """A 2-byte properties length of 0x8000 or more is negative as the reference reads it."""
    big = with_properties(b"b", b"KEYS\x01" + b"k" * 0x8000 + b"\x02", 0)
    buf = big + bytes(16)
    for numpy_min in (1, 1 << 20):
        assert scan_all(buf, False, numpy_min) == (0, ScanEnd.CORRUPT, []) == \
            expected_scan(buf, False)


def alike(count: int, props_of, body_of=lambda i: b"body%d" % (i % 10)) -> bytearray:
    """`count` records that differ only in body and in the properties `props_of(i)` makes."""
    records, pos = [], 0
    for i in range(count):
        rec = with_properties(body_of(i), props_of(i), pos)
        records.append(rec)
        pos += len(rec)
    return bytearray(b"".join(records) + bytes(16))


def test_alike_records_stop_at_a_bad_crc_and_at_a_separator_inside_the_value():
    """The uniform path (records alike but for UNIQ_KEY) checks each CRC and refuses a value
    holding a separator; check_record decides those records."""
    buf = alike(30, lambda i: b"UNIQ_KEY\x01%02d\x02TAGS\x01t\x02" % i)
    assert scan_all(buf, True, 1) == expected_scan(buf, True)
    assert len(scan_all(buf, True, 1)[2]) == 30
    at = sum(len(with_properties(b"body%d" % (i % 10), b"UNIQ_KEY\x01%02d\x02TAGS\x01t\x02" % i, 0))
             for i in range(20))
    flipped = bytearray(buf)
    flipped[at + 90] ^= 1                                   # record 20's body
    assert scan_all(flipped, True, 1) == expected_scan(flipped, True)
    assert scan_all(flipped, True, 1)[1:] == (ScanEnd.CORRUPT, expected_scan(buf, True)[2][:20])
    sep = alike(30, lambda i: b"UNIQ_KEY\x01A" + (b"\x02" if i == 7 else b"B")
                + b"\x02TAGS\x01t\x02")
    assert scan_all(sep, True, 1) == expected_scan(sep, True)
    assert [r[8] for r in scan_all(sep, True, 1)[2]][6:8] == ["AB", "A"]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.lists(st.sampled_from([b"A", b"7", b"\x02", b"\x00", b"\xff", b"\x01"]),
                                    min_size=0, max_size=6),
       st.sampled_from([False, True, FORCED]),
       st.sampled_from(["none", "zero_tail", "flip", "misplace", "resize"]),
       st.sampled_from([1, 3, 1 << 20]), st.integers(1, 64), st.data())
def test_equal_records_back_to_back_scan_as_the_reference_does(count, odd, check_crc, damage,
                                                               numpy_min, max_records, data):
    """A producer's batch: records of one size whose properties differ only in the UNIQ_KEY
    value (taken by `_take_strided` without a step per record), with odd bytes in some values,
    and torn, bit-flipped, misplaced or resized records among them: the same rows and stops as
    check_record, for any pause (`max_records`)."""
    values = [b"%04d" % i for i in range(count)]
    for b in odd:
        i = data.draw(st.integers(0, count - 1))
        values[i] = values[i][:3] + b
    at_end = data.draw(st.booleans())             # the value ends the property string
    props = [(b"TAGS\x01t\x02UNIQ_KEY\x01" + v) if at_end else (b"UNIQ_KEY\x01" + v + b"\x02TAGS\x01t")
             for v in values]
    bodies = [b"body"] * count
    sealed = data.draw(st.booleans())             # with the record CRC property
    if damage == "resize":
        bodies[data.draw(st.integers(0, count - 1))] = b"bodyX"
    records, pos = [], 0
    for i, (body, p) in enumerate(zip(bodies, props)):
        rec = bytearray(with_properties(body, p, pos, sealed))
        rec[12:16] = (i % 3).to_bytes(4, "big")   # queue id (not covered by the body CRC)
        seal(rec, 0, len(rec))
        records.append(bytes(rec))
        pos += len(rec)
    buf = bytearray(b"".join(records) + bytes(16))
    if damage == "misplace":
        i = data.draw(st.integers(0, count - 1))
        start = sum(map(len, records[:i]))
        buf[start + 28:start + 36] = (start + 1).to_bytes(8, "big")
    elif damage in ("zero_tail", "flip"):
        at = data.draw(st.integers(0, len(buf) - 17))
        if damage == "zero_tail":
            buf[at:] = bytes(len(buf) - at)
        else:
            buf[at] ^= 1 << data.draw(st.integers(0, 7))
    reached, why, rows = expected_scan(buf, check_crc)
    got = scan_all(buf, check_crc, numpy_min, max_records)
    if len(rows) >= max_records:
        reached, why, rows = sum(r[1] for r in rows[:max_records]), ScanEnd.LIMIT, rows[:max_records]
    assert got == (reached, why, rows)


def test_equal_records_are_taken_without_a_step_per_record(monkeypatch):
    """The strided path takes a whole batch of equal records, and gives its UNIQ_KEYs as bytes too."""
    buf = alike(40, lambda i: b"UNIQ_KEY\x01%04d\x02TAGS\x01t" % i, body_of=lambda i: b"body")
    walked, walk = [], record_scan._walk
    monkeypatch.setattr(record_scan, "_walk", lambda *a: walked.append(walk(*a)) or walked[-1])
    out = ScanBatch()
    assert scan_segment(buf, 0, len(buf), 0, True, out, 1 << 20) == (len(buf) - 16, ScanEnd.END)
    assert walked == [[]]                                       # only the zeros at the end
    assert out.strings()[2] == ["%04d" % i for i in range(40)]
    topic, units = out.uniq_matrix()
    assert [bytes(r).decode() for r in units] == out.strings()[2]
