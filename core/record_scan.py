"""The dispatcher's fast parse of CommitLog records: many records per call, and only the fields
that the consume queues and the index need.

`scan_segment` walks the records of one mapped segment from a position and returns each valid
one as a plain tuple (built and unpacked far faster than a named one):

    (phys offset, size, topic, queue id, queue offset, tag code, store timestamp, KEYS,
     UNIQ_KEY, sys flag)          KEYS and UNIQ_KEY are "" when absent

The common record (IPv4 hosts, version 1 magic) is parsed here with one struct call for its
header and one regular expression for the three properties dispatch reads (TAGS, KEYS,
UNIQ_KEY); anything else (IPv6 hosts, version 2 records) goes through
`core.codec.check_record`, so both paths accept and refuse exactly the same records. Tag codes
are cached per TAGS value and topics per topic bytes: a log holds few of either.

A property is found the way `core.message.string_to_properties` reads it: `name\\x01value`
between `\\x02` separators, the last occurrence winning, an empty value counting as absent.
"""
from __future__ import annotations

import re
import struct
import zlib

from core.codec import (
    MAGIC_BLANK, MAGIC_V1, DispatchRequest, RecordCheck, check_record,
)
from core.hashing import tags_code
from core.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSOFFSET SYSFLAG BORNTS BORNHOST STORETS
# STOREHOST RECONSUME PREPARED BODYLEN, for IPv4 hosts: 88 bytes.
_HEADER_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
_HEAD_SIZE = _HEADER_V4.size
_FRAME = struct.Struct(">ii")
_MIN_RECORD = 91
# The properties dispatch reads, each "\x02NAME\x01value" with a non-empty value; taken into
# a dict in order, so the last one wins, as in core.message.string_to_properties.
_WANTED = re.compile("\x02(TAGS|KEYS|UNIQ_KEY)\x01([^\x02]+)")


class ScanEnd:
    """Why `scan_segment` stopped."""
    LIMIT = "limit"        # reached `end` or `max_records`
    BLANK = "blank"        # the segment's end-of-file filler: continue at the next segment
    END = "end"            # no record starts here (zeros, a foreign magic, a torn tail)
    CORRUPT = "corrupt"    # a framed record that fails its checks
    MISPLACED = "misplaced"  # a valid record whose PHYSOFFSET is not where it lies


_TOPICS: dict[bytes, str | None] = {}
_TAG_CODES: dict[str, int] = {}


def _topic(raw: bytes) -> str | None:
    """The topic of `raw` (None when it is not UTF-8), cached."""
    try:
        return _TOPICS[raw]
    except KeyError:
        pass
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        topic = None
    if len(_TOPICS) < 65536:
        _TOPICS[raw] = topic
    return topic


def _tags_code(tags: str) -> int:
    code = _TAG_CODES.get(tags)
    if code is None:
        code = tags_code(tags)
        if len(_TAG_CODES) < 65536:
            _TAG_CODES[tags] = code
    return code


def _parse_v4(buf, pos: int, total: int, header: tuple, check_crc: bool):
    """A version-1 record with IPv4 hosts whose frame fits (`header` is its unpacked fixed
    part): the scanned tuple, or ScanEnd.CORRUPT."""
    (_, _, crc, queue_id, _, queue_offset, phys, sys_flag, _, _, store_ts, _, _, _,
     body_len) = header
    p = pos + _HEAD_SIZE + body_len
    stop = pos + total
    if body_len < 0 or p + 3 > stop:
        return ScanEnd.CORRUPT
    if check_crc and zlib.crc32(buf[pos + _HEAD_SIZE:p]) & 0x7FFFFFFF != crc:
        return ScanEnd.CORRUPT
    q = p + 1 + buf[p]
    if q + 2 > stop:
        return ScanEnd.CORRUPT
    props_len = buf[q] << 8 | buf[q + 1]
    if props_len >= 0x8000 or q + 2 + props_len != stop:
        return ScanEnd.CORRUPT
    raw_topic = buf[p + 1:q]
    if raw_topic.__class__ is not bytes:
        raw_topic = bytes(raw_topic)               # a bytearray or memoryview segment (tests)
    topic = _TOPICS.get(raw_topic) or _topic(raw_topic)
    if topic is None or (check_crc and b"\x00" in raw_topic):
        return ScanEnd.CORRUPT
    if not props_len:
        return phys, total, topic, queue_id, queue_offset, 0, store_ts, "", "", sys_flag
    if check_crc and buf[stop - 1] == 0:
        return ScanEnd.CORRUPT                     # a torn write's zeros (see core.codec)
    try:
        found = dict(_WANTED.findall("\x02" + bytes(buf[q + 2:stop]).decode("utf-8")))
    except UnicodeDecodeError:
        return ScanEnd.CORRUPT
    tags = found.get("TAGS")
    return (phys, total, topic, queue_id, queue_offset,
            (_TAG_CODES.get(tags) or _tags_code(tags)) if tags else 0, store_ts,
            found.get("KEYS", ""), found.get("UNIQ_KEY", ""), sys_flag)


def _from_check(buf, pos: int, end: int, check_crc: bool):
    """The general parse, for records the fast path does not take: (tuple or ScanEnd, size)."""
    req, size = check_record(buf, pos, end, check_crc)
    if req.__class__ is not DispatchRequest:
        return {RecordCheck.BLANK: ScanEnd.BLANK, RecordCheck.END: ScanEnd.END,
                RecordCheck.CORRUPT: ScanEnd.CORRUPT}[req], size
    return (req.commit_log_offset, req.msg_size, req.topic, req.queue_id,
            req.consume_queue_offset, req.tags_code, req.store_timestamp, req.keys,
            req.uniq_key, req.sys_flag), size


def scan_segment(buf, pos: int, end: int, base: int, check_crc: bool, out: list,
                 max_records: int) -> tuple[int, str]:
    """Append the valid records of `buf[pos:end]` to `out` (while it holds < `max_records`).

    `base` is the segment's first physical offset: a record must say it lies at base + pos.
    Returns (position reached, ScanEnd); for BLANK the position is that of the filler.
    """
    header_at = _HEADER_V4.unpack_from
    frame_at = _FRAME.unpack_from
    append = out.append
    while pos < end:
        if len(out) >= max_records:
            return pos, ScanEnd.LIMIT
        left = end - pos
        if left < 8:
            return pos, ScanEnd.END
        header = header_at(buf, pos) if left >= _HEAD_SIZE else frame_at(buf, pos)
        total, magic = header[0], header[1]
        if magic == MAGIC_V1 and _MIN_RECORD <= total <= left and not header[7] & _V6_BITS:
            rec, size = _parse_v4(buf, pos, total, header, check_crc), total
        elif magic == MAGIC_BLANK and 8 <= total <= left:
            return pos, ScanEnd.BLANK
        else:
            rec, size = _from_check(buf, pos, end, check_crc)
        if rec.__class__ is not tuple:
            return pos, rec
        if rec[0] != base + pos:
            return pos, ScanEnd.MISPLACED
        append(rec)
        pos += size
    return pos, ScanEnd.LIMIT
