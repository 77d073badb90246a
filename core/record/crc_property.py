"""The whole-record CRC: RocketMQ 5.2's optional `__CRC32#` property (reference section 2.12,
`CommitLog.CRC32_RESERVED_LEN` and `MessageDecoder.createCrc32`), written and verified.

With `enabled_append_prop_crc` (on by default here) an encoder extends a record's PROPERTIES by
a 20-byte reserve, `__CRC32#` 0x01, ten digits, 0x02, always the last 20 bytes of the record;
PROPERTIESLENGTH and TOTALSIZE count it. Once the append has set QUEUEOFFSET, PHYSICALOFFSET
and STORETIMESTAMP, `seal` writes into the ten digits the CRC (`zlib.crc32 & 0x7FFFFFFF`) of
bytes [0, TOTALSIZE - 20): least significant digit first, zero-padded (123 -> `3210000000`).
Sealing is decided by the bytes: a record whose properties end in the reserve is sealed, any
other is left alone, so every encoder only has to add the reserve.

Reading (`claim`): a record whose last 20 bytes have that form carries a CRC, and the record is
valid only if the CRC matches (it covers every header field, the hosts, the timestamps, the
body, the topic and every other property; the reserve's own name is inside the covered range).
A record whose last 20 bytes begin with the property's name but do not go on with ten digits
and 0x02, or are that form in all but one or two bytes, had the property and lost it to damage
(in the name, a separator or the digits): it is invalid, never read as a record without the
CRC. Any other record has no CRC, and keeps the body-CRC check, unless the
check mode is `FORCED` (`force_verify_prop_crc`), under which it is invalid, as in RocketMQ.
RocketMQ's decoder reads the property as any other; our message views leave it out of the
user's properties (`strip`).

With the compiled accelerator (`core.record.accel`) sealing a batch is one C call
(`_accel.seal_uniform`, `seal_sizes`), and so is sealing one record: the CRCs and their
digits written in place, no slice of the record copied; so is checking a run's record CRCs
(`_accel.record_crcs_ok`) and one record's (`_accel.crc_verdict`: nothing copied).

Check modes, the `check_crc` argument of the parsers: False (no CRC checked), True (the record
CRC where a record has one, else the body CRC), FORCED (the record CRC required).
"""
from __future__ import annotations

import numpy as np

from core.record.accel import native
from core.record.body_crc import crc32_spans
from core.record.crc import crc32

CRC32_RESERVED_LEN = 20
PROPERTY_CRC32 = "__CRC32#"
LABEL = b"__CRC32#\x01"
RESERVE = LABEL + b"0" * 10 + b"\x02"     # the placeholder an encoder appends
FORCED = 2                                 # check mode: a record without the CRC is invalid
ABSENT = -1                                # `claim`: the record has no CRC property
DAMAGED = -2                               # `claim`: it had one, now damaged
_DIGITS_AT = len(LABEL)                    # the digits within the reserve
_FORM = np.frombuffer(RESERVE, np.uint8)
_IS_DIGIT = np.zeros(20, bool)
_IS_DIGIT[_DIGITS_AT:_DIGITS_AT + 10] = True
_POWERS = 10 ** np.arange(10, dtype=np.int64)


def crc_mode(config) -> int | bool:
    """The check mode of a store's config for CRC-checked parses: FORCED or True."""
    return FORCED if config.force_verify_prop_crc else True


def digits(crc: int) -> bytes:
    """The ten digits of `crc`, least significant first."""
    return (b"%010d" % crc)[::-1]


def seal(buf, pos: int, size: int) -> None:
    """Write the CRC into the reserve of the record at `pos` (`size` bytes), when it has one."""
    if native is not None and size >= CRC32_RESERVED_LEN:
        try:
            return native.seal_sizes(buf, pos, (size,))   # no copy of the record
        except (ValueError, OverflowError, TypeError):
            pass
    end = pos + size
    if buf[end - CRC32_RESERVED_LEN:end - 11] == LABEL:
        buf[end - 11:end - 1] = (b"%010d" % (crc32(buf[pos:end - CRC32_RESERVED_LEN]) & 0x7FFFFFFF))[::-1]


def seal_run(buf, start: int, sizes) -> None:
    """`seal` each record of a batch lying back to back from `start` with `sizes`."""
    if native is not None:
        try:
            return native.seal_sizes(buf, start, sizes)
        except (ValueError, OverflowError, TypeError):     # as the reference does
            pass
    pos = start
    for size in sizes:
        seal(buf, pos, size)
        pos += size


def seal_grid(buf, pos: int, grid: np.ndarray) -> None:
    """`seal` each row of `grid` (records of one size back to back from `pos` of `buf`, one per
    row, all with the reserve): one CRC call per record over a slice of `buf` (C-level
    iteration), the digits of all of them set with one assignment."""
    n, size = grid.shape
    if native is not None and size >= CRC32_RESERVED_LEN and pos + n * size <= len(buf):
        native.seal_uniform(buf, pos, size, n)
        return
    cut = size - CRC32_RESERVED_LEN
    view = memoryview(buf)
    try:
        crcs = np.fromiter(map(crc32, map(view.__getitem__, map(slice, range(pos, pos + n * size, size),
                                                               range(pos + cut, pos + n * size, size)))),
                           np.int64, n) & 0x7FFFFFFF
    finally:
        view.release()
    grid[:, size - 11:size - 1] = (crcs[:, None] // _POWERS) % 10 + 0x30


def claim(tail20: bytes) -> int:
    """The CRC that a record's last 20 bytes hold, ABSENT or DAMAGED (module docstring)."""
    if tail20[:_DIGITS_AT] == LABEL and tail20[-1] == 2 and tail20[_DIGITS_AT:-1].isdigit():
        return int(tail20[_DIGITS_AT:-1][::-1])
    if len(tail20) != CRC32_RESERVED_LEN:
        return ABSENT
    if tail20[:_DIGITS_AT] == LABEL:
        return DAMAGED                  # the property's name is there: its digits or end are not
    got = np.frombuffer(tail20, np.uint8)
    off = int(np.count_nonzero(np.where(_IS_DIGIT, (got < 0x30) | (got > 0x39), got != _FORM)))
    return DAMAGED if off <= 2 else ABSENT


def verify(buf, pos: int, total: int, check_crc, body_ok) -> bool:
    """Whether the record at `pos` passes its CRC check under mode `check_crc` (truthy): the
    record CRC where it has one, else `body_ok()` (its body CRC), unless FORCED."""
    if native is not None:
        verdict = native.crc_verdict(buf, pos, total, 2 if check_crc == FORCED else 1)
        if verdict >= 0:
            return verdict == 1
        if verdict == -1:
            return body_ok()
    end = pos + total
    if total < CRC32_RESERVED_LEN:
        return check_crc != FORCED and body_ok()
    stored = claim(bytes(buf[end - CRC32_RESERVED_LEN:end]))
    if stored >= 0:
        return crc32(buf[pos:end - CRC32_RESERVED_LEN]) & 0x7FFFFFFF == stored
    if stored == DAMAGED or check_crc == FORCED:
        return False
    return body_ok()


def strip(props_raw: bytes) -> bytes:
    """PROPERTIES without the CRC reserve at their end (as they are when it is absent)."""
    if len(props_raw) >= CRC32_RESERVED_LEN and props_raw[-CRC32_RESERVED_LEN:-11] == LABEL:
        return props_raw[:-CRC32_RESERVED_LEN]
    return props_raw


def run_crcs_ok(buf, starts, total: int, check_crc) -> np.ndarray | None:
    """For records of `total` bytes at `starts` of `buf` that all end in a well-formed CRC
    property: a bool array, True where the record CRC matches. None when one of them does not
    carry a well-formed property (then each record must be checked alone, `verify`)."""
    if native is not None:
        try:
            ok = native.record_crcs_ok(buf, starts, total)
            return None if ok is None else np.frombuffer(ok, np.bool_)
        except (ValueError, OverflowError, TypeError):
            pass                                # as the reference (which raises IndexError)
    u8 = np.frombuffer(buf, np.uint8)
    at = np.asarray(starts, np.int64)
    tails = u8[(at + total - CRC32_RESERVED_LEN)[:, None] + np.arange(CRC32_RESERVED_LEN)]
    del u8
    body = tails[:, _DIGITS_AT:-1]
    if not ((tails[:, :_DIGITS_AT] == _FORM[:_DIGITS_AT]).all() and (tails[:, -1] == 2).all()
            and ((body >= 0x30) & (body <= 0x39)).all()):
        return None
    stored = (body.astype(np.int64) - 0x30) @ _POWERS
    starts = at.tolist()
    got = crc32_spans(buf, starts, [p + total - CRC32_RESERVED_LEN for p in starts], len(starts))
    return (got & 0x7FFFFFFF) == stored
