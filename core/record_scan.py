"""The dispatcher's fast parse of CommitLog records: many records per call, and only the fields
that the consume queues and the index need.

`scan_segment` walks the records of one mapped segment from a position and appends each valid
one to a `ScanBatch`, a table of plain columns (built and read far faster than an object per
record):

    phys offset, size, topic, queue id, queue offset, tag code, store timestamp, KEYS,
    UNIQ_KEY, sys flag          KEYS and UNIQ_KEY are "" when absent

The common record (IPv4 hosts, version 1 magic) takes the fast path, in two phases. A minimal
loop walks TOTALSIZE/MAGIC frames to find where the records start; then the fixed headers of
all of them are read and checked together (with numpy for `NUMPY_MIN_RECORDS` records or more,
with one struct call each below that, where numpy's call overhead would dominate): host
lengths, body and topic lengths, properties framing, PHYSOFFSET, a torn tail. Only the CRC,
the topic and the properties then need a step per record. Anything else (IPv6 hosts, version
2 records, a record that fails any fast check) goes through `core.codec.check_record`, so both
paths accept and refuse exactly the same records.

Caches, each bounded: topics per topic bytes, tag codes per TAGS value, and parsed properties
per property string with the UNIQ_KEY value cut out (`_properties`). A producer's property
strings differ only in UNIQ_KEY, so most records cost two `find`s and a dict lookup. A property
is found the way `core.message.string_to_properties` reads it: `name\\x01value` between `\\x02`
separators, the last occurrence winning, an empty value counting as absent.
"""
from __future__ import annotations

import re
import struct
import zlib

import numpy as np

from core.codec import (
    MAGIC_BLANK, MAGIC_V1, DispatchRequest, RecordCheck, check_record,
)
from core.hashing import tags_code
from core.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

NUMPY_MIN_RECORDS = 12            # fewer fast-path records are checked with struct, one by one
_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSOFFSET SYSFLAG BORNTS BORNHOST STORETS
# STOREHOST RECONSUME PREPARED BODYLEN, for IPv4 hosts: 88 bytes.
_HEADER_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")
_HEAD_SIZE = _HEADER_V4.size
_HEADER_DTYPE = np.dtype([
    ("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
    ("queue_offset", ">i8"), ("phys", ">i8"), ("sys_flag", ">i4"), ("born_ts", ">i8"),
    ("born_host", "V8"), ("store_ts", ">i8"), ("store_host", "V8"), ("reconsume", ">i4"),
    ("prepared", ">i8"), ("body_len", ">i4")])
_HEADER_BYTES = np.arange(_HEAD_SIZE, dtype=np.int64)
_FRAME = struct.Struct(">ii")
_MIN_RECORD = 91
# The properties dispatch reads, each "\x02NAME\x01value" with a non-empty value; taken into
# a dict in order, so the last one wins, as in core.message.string_to_properties.
_WANTED = re.compile("\x02(TAGS|KEYS|UNIQ_KEY)\x01([^\x02]+)")
_UNIQ = b"UNIQ_KEY\x01"
_CACHE_MAX = 65536


class ScanEnd:
    """Why `scan_segment` stopped."""
    LIMIT = "limit"        # reached `end` or `max_records`
    BLANK = "blank"        # the segment's end-of-file filler: continue at the next segment
    END = "end"            # no record starts here (zeros, a foreign magic, a torn tail)
    CORRUPT = "corrupt"    # a framed record that fails its checks
    MISPLACED = "misplaced"  # a valid record whose PHYSOFFSET is not where it lies


class ScanBatch:
    """Scanned records as columns (lists), in log order."""
    __slots__ = ("phys", "size", "topic", "queue_id", "queue_offset", "tags", "store_ts", "keys",
                 "uniq", "sys_flag")

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.phys)

    def add(self, row: tuple) -> None:
        """Append one record given as a row (the columns' order)."""
        for name, value in zip(self.__slots__, row):
            getattr(self, name).append(value)

    def extend_header_fields(self, n: int, phys, size, queue_id, queue_offset, store_ts,
                             sys_flag) -> None:
        """Append the first `n` of each fixed-header column (the caller appended the other
        columns of those records)."""
        self.phys += phys[:n]
        self.size += size[:n]
        self.queue_id += queue_id[:n]
        self.queue_offset += queue_offset[:n]
        self.store_ts += store_ts[:n]
        self.sys_flag += sys_flag[:n]

    def rows(self) -> list[tuple]:
        return list(zip(*(getattr(self, name) for name in self.__slots__)))


_TOPICS: dict[bytes, str | None] = {}
_TAG_CODES: dict[str, int] = {}
_PROPS: dict[bytes, tuple | None] = {}


def _topic(raw: bytes) -> str | None:
    """The topic of `raw` (None when it is not UTF-8), cached."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError:
        topic = None
    if len(_TOPICS) >= _CACHE_MAX:
        _TOPICS.clear()
    _TOPICS[raw] = topic
    return topic


def _tags_code(tags: str) -> int:
    code = _TAG_CODES.get(tags)
    if code is None:
        code = tags_code(tags)
        if len(_TAG_CODES) >= _CACHE_MAX:
            _TAG_CODES.clear()
        _TAG_CODES[tags] = code
    return code


def _parse_properties(raw: bytes) -> tuple | None:
    """(tag code, KEYS, UNIQ_KEY) of a property string; None when it is not UTF-8."""
    try:
        found = dict(_WANTED.findall("\x02" + raw.decode("utf-8")))
    except UnicodeDecodeError:
        return None
    tags = found.get("TAGS")
    return _tags_code(tags) if tags else 0, found.get("KEYS", ""), found.get("UNIQ_KEY", "")


def _cached(template: bytes) -> tuple | None:
    parsed = _PROPS.get(template, False)
    if parsed is False:
        parsed = _parse_properties(template)
        if len(_PROPS) >= _CACHE_MAX:
            _PROPS.clear()
        _PROPS[template] = parsed
    return parsed


def _uniq_span(raw: bytes) -> tuple[int, int]:
    """Where `_properties` takes the UNIQ_KEY value of `raw` from, as [a, b); (0, 0) when it
    reads `raw` without cutting a value out (no UNIQ_KEY, or one it parses whole)."""
    i = raw.find(_UNIQ)
    if i < 0 or (i and raw[i - 1] != 2):
        return 0, 0
    j = raw.find(b"\x02", i)
    j = len(raw) if j < 0 else j
    parsed = _cached(raw[:i] + raw[j:])
    if parsed is None or parsed[2] or j == i + len(_UNIQ):
        return 0, 0
    return i + len(_UNIQ), j


def _properties(raw: bytes) -> tuple | None:
    """`_parse_properties(raw)`, through the cache: the first UNIQ_KEY value (when it starts a
    property) is cut out and the rest, the template, is parsed once. Its value stands unless
    the template holds a later non-empty UNIQ_KEY, which would win (then `raw` is parsed whole).
    The cuts fall on ASCII bytes, so `raw` is UTF-8 exactly when the template and value are."""
    i = raw.find(_UNIQ)
    if i < 0 or (i and raw[i - 1] != 2):
        return _cached(raw) if i < 0 else _parse_properties(raw)
    j = raw.find(b"\x02", i)
    if j < 0:
        j = len(raw)
    parsed = _cached(raw[:i] + raw[j:])
    if parsed is None or parsed[2] or j == i + len(_UNIQ):
        return parsed if parsed is None else _parse_properties(raw)
    try:
        return parsed[0], parsed[1], raw[i + len(_UNIQ):j].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _walk(buf, pos: int, end: int, room: int) -> list[int]:
    """Where the next (at most `room`) version-1 frames that fit before `end` start."""
    frame_at = _FRAME.unpack_from
    starts: list[int] = []
    append = starts.append
    while room and end - pos >= 8:
        total, magic = frame_at(buf, pos)
        if magic != MAGIC_V1 or not _MIN_RECORD <= total <= end - pos:
            break
        append(pos)
        pos += total
        room -= 1
    return starts


def _headers_numpy(buf, starts: list[int], base: int, check_crc: bool) -> tuple:
    """The fixed headers of the frames at `starts`, checked together: (how many leading frames
    pass the fast checks, then columns for them: phys, size, queue id, queue offset, sys flag,
    store time, body CRC, topic length position)."""
    u8 = np.frombuffer(buf, np.uint8)
    at = np.array(starts, np.int64)
    head = u8[at[:, None] + _HEADER_BYTES].view(_HEADER_DTYPE)[:, 0]
    stop = at + head["total"]
    body = head["body_len"].astype(np.int64)
    tpos = at + _HEAD_SIZE + body
    ok = ((head["sys_flag"] & _V6_BITS) == 0) & (body >= 0) & (tpos + 3 <= stop) \
        & (head["phys"] == at + base)
    tpos = np.where(ok, tpos, at)                     # in range wherever it is read
    ppos = tpos + 1 + u8[tpos]
    ok &= ppos + 2 <= stop
    ppos = np.where(ok, ppos, at)
    props_len = u8[ppos].astype(np.int64) << 8 | u8[ppos + 1]
    ok &= (props_len < 0x8000) & (ppos + 2 + props_len == stop)   # int16: >= 0x8000 is < 0
    if check_crc:
        ok &= (props_len == 0) | (u8[stop - 1] != 0)  # a torn write's zeros (see core.codec)
    n = len(starts) if ok.all() else int(ok.argmin())
    cols = (head["phys"][:n].tolist(), head["total"][:n].tolist(), head["queue_id"][:n].tolist(),
            head["queue_offset"][:n].tolist(), head["sys_flag"][:n].tolist(),
            head["store_ts"][:n].tolist(), head["crc"][:n].tolist(), tpos[:n].tolist())
    del u8, head
    return (n, *cols)


def _headers_struct(buf, starts: list[int], base: int, check_crc: bool) -> tuple:
    """`_headers_numpy` with one struct call per frame, for a few frames."""
    cols: tuple = ([], [], [], [], [], [], [], [])
    phys_, size_, qid_, qoff_, flag_, ts_, crc_, tpos_ = cols
    n = 0
    for pos in starts:
        (total, _, crc, queue_id, _, queue_offset, phys, sys_flag, _, _, store_ts, _, _, _,
         body_len) = _HEADER_V4.unpack_from(buf, pos)
        stop = pos + total
        tpos = pos + _HEAD_SIZE + body_len
        if sys_flag & _V6_BITS or body_len < 0 or tpos + 3 > stop or phys != base + pos:
            break
        ppos = tpos + 1 + buf[tpos]
        if ppos + 2 > stop or buf[ppos] >= 0x80 \
                or ppos + 2 + (buf[ppos] << 8 | buf[ppos + 1]) != stop \
                or (check_crc and ppos + 2 < stop and buf[stop - 1] == 0):
            break
        phys_.append(phys), size_.append(total), qid_.append(queue_id)
        qoff_.append(queue_offset), flag_.append(sys_flag), ts_.append(store_ts)
        crc_.append(crc), tpos_.append(tpos)
        n += 1
    return (n, *cols)


def _take(buf, starts: list[int], base: int, check_crc: bool, out: ScanBatch) -> int:
    """Append the leading records of `starts` that pass the fast path; return how many."""
    headers = _headers_numpy if len(starts) >= NUMPY_MIN_RECORDS else _headers_struct
    n, phys, size, queue_id, queue_offset, sys_flag, store_ts, crc, tpos = \
        headers(buf, starts, base, check_crc)
    if n >= NUMPY_MIN_RECORDS:
        taken = _take_uniform(buf, starts[:n], tpos, size, crc, check_crc, out)
        if taken is not None:
            out.extend_header_fields(taken, phys, size, queue_id, queue_offset, store_ts, sys_flag)
            return taken
    crc32, topics, props_of = zlib.crc32, _TOPICS, _PROPS
    o_topic, o_tags, o_keys, o_uniq = out.topic.append, out.tags.append, out.keys.append, \
        out.uniq.append
    taken = 0
    view = memoryview(buf) if check_crc else None
    try:
        for pos, t, stop, body_crc in zip(starts, tpos, (s + t for s, t in zip(starts, size)), crc):
            if check_crc and crc32(view[pos + _HEAD_SIZE:t]) & 0x7FFFFFFF != body_crc:
                break
            tail = buf[t:stop]
            if tail.__class__ is not bytes:
                tail = bytes(tail)                     # a bytearray or memoryview segment (tests)
            p = tail[0] + 1
            raw_topic = tail[1:p]
            topic = topics.get(raw_topic) or _topic(raw_topic)
            if topic is None or (check_crc and b"\x00" in raw_topic):
                break
            if len(tail) > p + 2:
                raw = tail[p + 2:]
                parsed = props_of.get(raw) or _properties(raw)
                if parsed is None:
                    break
                o_tags(parsed[0]), o_keys(parsed[1]), o_uniq(parsed[2])
            else:
                o_tags(0), o_keys(""), o_uniq("")
            o_topic(topic)
            taken += 1
    finally:
        if view is not None:
            view.release()
    out.extend_header_fields(taken, phys, size, queue_id, queue_offset, store_ts, sys_flag)
    return taken


def _take_uniform(buf, starts: list[int], tpos: list[int], size: list[int], crc: list[int],
                  check_crc: bool, out: ScanBatch) -> int | None:
    """`_take` for records whose topics and properties are byte for byte those of the first
    record except inside its UNIQ_KEY value (a producer's batch): compared in one numpy step,
    parsed once; the values are sliced out of one ASCII string. None when they are not all
    alike; else how many leading records pass their CRC (all of them, mostly)."""
    t0, n = tpos[0], len(starts)
    tail = buf[t0:starts[0] + size[0]]
    if tail.__class__ is not bytes:
        tail = bytes(tail)
    p = tail[0] + 1
    raw_topic, raw = tail[1:p], tail[p + 2:]
    topic = _topic(raw_topic)
    parsed = _properties(raw)
    if topic is None or parsed is None or (check_crc and b"\x00" in raw_topic):
        return None
    a, b = _uniq_span(raw)
    a, b = (a + p + 2, b + p + 2) if b else (len(tail), len(tail))
    at = np.array(tpos, np.int64)
    if not (np.array(starts, np.int64) + size - at == len(tail)).all():
        return None
    u8 = np.frombuffer(buf, np.uint8)
    rows = u8[at[:, None] + np.arange(len(tail), dtype=np.int64)]
    del u8
    ref = rows[0]
    values = rows[:, a:b]
    if not ((rows[:, :a] == ref[:a]).all() and (rows[:, b:] == ref[b:]).all()) \
            or (values >= 0x80).any() or (values == 2).any():
        return None
    taken = n
    if check_crc:
        view = memoryview(buf)
        try:
            sums = np.fromiter(map(zlib.crc32, map(view.__getitem__, map(
                slice, [s + _HEAD_SIZE for s in starts], tpos))), np.int64, n)
        finally:
            view.release()
        bad = np.flatnonzero((sums & 0x7FFFFFFF) != np.array(crc, np.int64))
        taken = int(bad[0]) if len(bad) else n
    out.topic += [topic] * taken
    out.tags += [parsed[0]] * taken
    out.keys += [parsed[1]] * taken
    if b > a:
        joined = values[:taken].tobytes().decode("ascii")
        w = b - a
        out.uniq += [joined[i:i + w] for i in range(0, taken * w, w)]
    else:
        out.uniq += [parsed[2]] * taken
    return taken


def _from_check(buf, pos: int, end: int, check_crc: bool):
    """The general parse, for records the fast path does not take: (row or ScanEnd, size)."""
    req, size = check_record(buf, pos, end, check_crc)
    if req.__class__ is not DispatchRequest:
        return {RecordCheck.BLANK: ScanEnd.BLANK, RecordCheck.END: ScanEnd.END,
                RecordCheck.CORRUPT: ScanEnd.CORRUPT}[req], size
    return (req.commit_log_offset, req.msg_size, req.topic, req.queue_id,
            req.consume_queue_offset, req.tags_code, req.store_timestamp, req.keys,
            req.uniq_key, req.sys_flag), size


def scan_segment(buf, pos: int, end: int, base: int, check_crc: bool, out: ScanBatch,
                 max_records: int) -> tuple[int, str]:
    """Append the valid records of `buf[pos:end]` to `out` (while it holds < `max_records`).

    `base` is the segment's first physical offset: a record must say it lies at base + pos.
    Returns (position reached, ScanEnd); for BLANK the position is that of the filler.
    """
    while pos < end:
        room = max_records - len(out)
        if room <= 0:
            return pos, ScanEnd.LIMIT
        starts = _walk(buf, pos, end, room)
        if starts:
            taken = _take(buf, starts, base, check_crc, out)
            if taken:
                pos = starts[taken - 1] + out.size[-1]
                if taken == len(starts):
                    continue
        if end - pos < 8:
            return pos, ScanEnd.END
        total, magic = _FRAME.unpack_from(buf, pos)
        if magic == MAGIC_BLANK and 8 <= total <= end - pos:
            return pos, ScanEnd.BLANK
        row, size = _from_check(buf, pos, end, check_crc)
        if row.__class__ is not tuple:
            return pos, row
        if row[0] != base + pos:
            return pos, ScanEnd.MISPLACED
        out.add(row)
        pos += size
    return pos, ScanEnd.LIMIT
