"""`core.record_scan.scan_segment`, the dispatcher's fast parse, against `check_record`, the
reference parse: for random messages (IPv4 and IPv6 hosts, any properties, tags and keys),
and for the same records torn, bit-flipped or misplaced (PHYSOFFSET not where they lie), both accept and refuse the same
records and read the same fields."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.codec import DispatchRequest, RecordCheck, check_record, encode_message, write_blank
from core.record_scan import ScanEnd, scan_segment

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


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=4), st.booleans(), st.data())
def test_scan_agrees_with_check_record(msgs, check_crc, data):
    damage = data.draw(st.sampled_from(["none", "zero_tail", "flip", "misplace"]))
    misplaced = data.draw(st.integers(0, len(msgs) - 1)) if damage == "misplace" else -1
    records, pos = [], 0
    for i, m in enumerate(msgs):
        says = pos + 1 if i == misplaced else pos          # PHYSOFFSET not where it lies
        rec = encode_message(m, queue_offset=i, phys_offset=says, store_timestamp=1000 + i)
        records.append(rec)
        pos += len(rec)
    buf = bytearray(b"".join(records) + bytes(16))
    at = data.draw(st.integers(0, len(buf) - 17))
    if damage == "zero_tail":
        buf[at:] = bytes(len(buf) - at)
    elif damage == "flip":
        buf[at] ^= 1 << data.draw(st.integers(0, 7))
    out: list = []
    reached, why = scan_segment(buf, 0, len(buf), 0, check_crc, out, 1 << 20)
    expected, p = [], 0
    while True:
        ref = _reference(buf, p, len(buf), check_crc)
        if not isinstance(ref, tuple):
            assert why is ref and reached == p
            break
        if ref[0] != p:
            assert why is ScanEnd.MISPLACED and reached == p
            break
        expected.append(ref)
        p += ref[1]
    assert out == expected


def test_blank_ends_the_segment_and_max_records_pauses():
    from core.message import Message
    a = encode_message(Message("T", b"a", tags="x", keys="k1 k2"), phys_offset=0)
    b = encode_message(Message("T", b"b", properties={"UNIQ_KEY": "U1"}), phys_offset=len(a))
    buf = bytearray(a + b + bytes(64))
    write_blank(buf, len(a) + len(b), 64)
    out: list = []
    assert scan_segment(buf, 0, len(buf), 0, True, out, 1) == (len(a), ScanEnd.LIMIT)
    assert out[0][7] == "k1 k2" and out[0][8] == ""
    assert scan_segment(buf, len(a), len(buf), 0, True, out, 10) == (len(a) + len(b), ScanEnd.BLANK)
    assert out[1][7:9] == ("", "U1")


def test_the_last_non_empty_property_wins_as_in_the_reference_parse():
    from core.message import Message
    rec = encode_message(Message("T", b"x", properties={"A": "1"}), phys_offset=0)
    # Rewrite the properties by hand: TAGS twice (the second empty), KEYS twice.
    props = "TAGS\x01t1\x02KEYS\x01a\x02TAGS\x01\x02KEYS\x01b\x02".encode()
    head = rec[:rec.index(b"A\x011")] [:-2]
    raw = head + len(props).to_bytes(2, "big") + props
    raw = len(raw).to_bytes(4, "big") + raw[4:]
    out: list = []
    scan_segment(raw, 0, len(raw), 0, True, out, 10)
    assert out == [_reference(raw, 0, len(raw), True)]
    assert out[0][7] == "b"
