"""The whole-record CRC property (core.record.crc_property, reference 2.12 and 13.11 AppendPropCRCTest):
its exact bytes, every encoder path writing it, the parser refusing any damaged byte, and a
damaged property never read as a record without one."""
from __future__ import annotations

import zlib

import pytest

from core.record.codec import DispatchRequest, RecordCheck, check_record, encode_message
from core.log.commitlog import CommitLog
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from core.record.crc_property import DAMAGED, FORCED, claim, digits
from core.status import PutMessageStatus

PROPS = {f"k{i}": f"value{i}" for i in range(6)}      # AppendPropCRCTest: 6 user properties


def test_digits_least_significant_first():
    assert digits(123) == b"3210000000" and digits(0) == b"0" * 10
    assert digits(2147483647) == b"7463847412"


def test_layout_is_rocketmqs():
    m = Message("FooBar", b"Once, there was a chance for me!", tags="TAG1", keys="1700000000000")
    plain = encode_message(m, 3, 1000, 1_700_000_000_123)
    rec = encode_message(m, 3, 1000, 1_700_000_000_123, prop_crc=True)
    assert len(plain) == 158 and len(rec) == 178
    assert rec[:4] == (178).to_bytes(4, "big") and rec[4:158 - 31] == plain[4:158 - 31]
    props_at = 158 - 29
    assert int.from_bytes(rec[props_at - 2:props_at], "big") == 29 + 20
    assert rec[props_at:props_at + 29] == plain[props_at:]
    assert rec[-20:-11] == b"__CRC32#\x01" and rec[-1] == 2
    assert int(rec[-11:-1][::-1]) == zlib.crc32(rec[:-20]) & 0x7FFFFFFF
    req, size = check_record(rec, 0, len(rec), FORCED)
    assert isinstance(req, DispatchRequest) and size == 178 and req.tags_code != 0


def test_every_single_bit_flip_is_refused():
    rec = encode_message(Message("T", b"body", tags="t", keys="k", properties=PROPS), 1, 0, 5,
                         prop_crc=True)
    for at in range(len(rec)):
        for bit in range(8):
            bad = bytearray(rec)
            bad[at] ^= 1 << bit
            assert not isinstance(check_record(bytes(bad), 0, len(bad), True)[0], DispatchRequest), (at, bit)


def test_damaged_digits_are_not_read_as_a_record_without_the_property():
    rec = bytearray(encode_message(Message("T", b"body"), prop_crc=True))
    rec[-10:-6] = b"\xff" * 4                     # four digits gone: the body CRC still holds
    assert claim(bytes(rec[-20:])) == DAMAGED
    assert check_record(bytes(rec), 0, len(rec), True)[0] is RecordCheck.CORRUPT


def test_force_verify_refuses_a_record_without_the_property():
    rec = encode_message(Message("T", b"body"))
    assert isinstance(check_record(rec, 0, len(rec), True)[0], DispatchRequest)
    assert check_record(rec, 0, len(rec), FORCED)[0] is RecordCheck.CORRUPT


@pytest.mark.parametrize("batch", [False, True])
def test_append_prop_crc(tiny_config, batch):
    """AppendPropCRCTest: ten messages with six user properties; each passes the check; one
    byte of the last one's properties changed, it fails."""
    log = CommitLog(tiny_config(enabled_append_prop_crc=True, force_verify_prop_crc=True),
                    REAL_FILE_OPS)
    log.queue.load()
    try:
        msgs = [Message("test-topic", b"body", tags="abc", properties=dict(PROPS)) for _ in range(10)]
        if batch:
            r = log.append_batch([log.prepare(m) for m in msgs])
            sizes = r.record_sizes
        else:
            sizes = [log.append_message(m).wrote_bytes for m in msgs]
        data = bytearray(log.read(0, sum(sizes)))
        pos = 0
        for size in sizes:
            assert isinstance(check_record(bytes(data), pos, len(data), FORCED)[0], DispatchRequest)
            pos += size
        at = data.rindex(b"value5")
        data[at] ^= 0x01
        assert check_record(bytes(data), pos - sizes[-1], len(data), FORCED)[0] is RecordCheck.CORRUPT
    finally:
        log.shutdown()


def test_properties_limit_counts_the_reserve():
    from core.record.codec import prepare_record
    fits = Message("T", b"b", properties={"p": "v" * (32764 - 20)})
    over = Message("T", b"b", properties={"p": "v" * (32765 - 20)})
    assert prepare_record(fits, 1 << 20, prop_crc=True).__class__ is not PutMessageStatus
    assert prepare_record(over, 1 << 20, prop_crc=True) is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert prepare_record(over, 1 << 20).__class__ is not PutMessageStatus
