"""The dispatcher's fast parse of CommitLog records: many records per call, and only the fields
that the consume queues and the index need.

`scan_segment` walks the records of one mapped segment from a position and appends each valid
one to a `ScanBatch`, a table of plain columns (built and read far faster than an object per
record):

    phys offset, size, topic, queue id, queue offset, tag code, store timestamp, KEYS,
    UNIQ_KEY, sys flag          KEYS and UNIQ_KEY are "" when absent

A run of records of one size lying back to back (a producer's batch of equal messages) is
taken without a step per record (`_take_strided`): frames, headers and tails are numpy views
with that size as stride. Other common records (IPv4 hosts, version 1 magic) take the fast
path in two phases: a minimal loop walks TOTALSIZE/MAGIC frames to find where the records
start; then the fixed headers of all of them are read and checked together (with numpy for
`NUMPY_MIN_RECORDS` records or more, with one struct call each below that): host lengths,
body and topic lengths, properties framing, PHYSOFFSET, a torn tail. Only the CRC, the topic
and the properties then need a step per record, or none when the tails are alike but for the
UNIQ_KEY value (`_take_alike`). Anything else (IPv6 hosts, version 2 records, a record that
fails any fast check) goes through `core.codec.check_record`, so all paths accept and refuse
exactly the same records. Topics and properties are parsed through the caches of
`core.record_props`.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from core.codec import (
    MAGIC_BLANK, MAGIC_V1, DispatchRequest, RecordCheck, check_record,
)
from core.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from core.record_props import PROPS, TOPICS, properties, topic_of, uniq_span

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


class ScanEnd:
    """Why `scan_segment` stopped."""
    LIMIT = "limit"        # reached `end` or `max_records`
    BLANK = "blank"        # the segment's end-of-file filler: continue at the next segment
    END = "end"            # no record starts here (zeros, a foreign magic, a torn tail)
    CORRUPT = "corrupt"    # a framed record that fails its checks
    MISPLACED = "misplaced"  # a valid record whose PHYSOFFSET is not where it lies


class ScanBatch:
    """Scanned records as columns (lists), in log order."""
    COLUMNS = ("phys", "size", "topic", "queue_id", "queue_offset", "tags", "store_ts", "keys",
               "uniq", "sys_flag")
    # uniq_units: the UNIQ_KEYs of records taken alike, also as ASCII byte matrices (one key a
    # row, in log order), for hashing them without a string per key.
    __slots__ = COLUMNS + ("uniq_units",)

    def __init__(self):
        for name in self.__slots__:
            setattr(self, name, [])

    def __len__(self) -> int:
        return len(self.phys)

    def add(self, row: tuple) -> None:
        """Append one record given as a row (the columns' order)."""
        for name, value in zip(self.COLUMNS, row):
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
        return list(zip(*(getattr(self, name) for name in self.COLUMNS)))


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
    crc32, topics, props_of = zlib.crc32, TOPICS, PROPS
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
            topic = topics.get(raw_topic) or topic_of(raw_topic)
            if topic is None or (check_crc and b"\x00" in raw_topic):
                break
            if len(tail) > p + 2:
                raw = tail[p + 2:]
                parsed = props_of.get(raw) or properties(raw)
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


def _first_tail(buf, t0: int, stop: int, check_crc: bool) -> tuple | None:
    """The tail (topic and properties) of the record whose tail lies at [t0, stop), parsed:
    (tail bytes, topic, (tag code, KEYS, UNIQ_KEY), [a, b) of the UNIQ_KEY value in the tail,
    empty when the value is not cut out). None when the fast path cannot take it."""
    tail = buf[t0:stop]
    if tail.__class__ is not bytes:
        tail = bytes(tail)                         # a bytearray or memoryview segment (tests)
    p = tail[0] + 1
    raw_topic, raw = tail[1:p], tail[p + 2:]
    topic = topic_of(raw_topic)
    parsed = properties(raw)
    if topic is None or parsed is None or (check_crc and b"\x00" in raw_topic):
        return None
    a, b = uniq_span(raw)
    a, b = (a + p + 2, b + p + 2) if b else (len(tail), len(tail))
    return tail, topic, parsed, a, b


def _take_uniform(buf, starts: list[int], tpos: list[int], size: list[int], crc: list[int],
                  check_crc: bool, out: ScanBatch) -> int | None:
    """`_take` for records whose topics and properties are byte for byte those of the first
    record except inside its UNIQ_KEY value (a producer's batch): the tails are gathered into
    one matrix and taken by `_take_alike`. None when they are not all alike."""
    first = _first_tail(buf, tpos[0], starts[0] + size[0], check_crc)
    if first is None:
        return None
    at = np.array(tpos, np.int64)
    if not (np.array(starts, np.int64) + size - at == len(first[0])).all():
        return None
    u8 = np.frombuffer(buf, np.uint8)
    rows = u8[at[:, None] + np.arange(len(first[0]), dtype=np.int64)]
    del u8
    return _take_alike(buf, rows, first, starts, tpos, crc, check_crc, out)


def _take_alike(buf, rows, first: tuple, starts: list[int], tpos: list[int], crc, check_crc: bool,
                out: ScanBatch) -> int | None:
    """Append the topic and property columns of records whose tails are the rows of `rows`
    (the first one parsed as `first`), when every row equals the first outside the UNIQ_KEY
    value and the values are ASCII without a separator: compared in one numpy step, parsed
    once, the values sliced out of one ASCII string. None when they are not all alike; else
    how many leading records pass their CRC (all of them, mostly). With check_crc `starts`
    and `tpos` give each record's body span and `crc` the CRCs its header holds."""
    _, topic, parsed, a, b = first
    n = len(rows)
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
        bad = np.flatnonzero((sums & 0x7FFFFFFF) != np.asarray(crc, np.int64))
        taken = int(bad[0]) if len(bad) else n
    out.topic += [topic] * taken
    out.tags += [parsed[0]] * taken
    out.keys += [parsed[1]] * taken
    if b > a:
        units = np.ascontiguousarray(values[:taken])
        joined = units.tobytes().decode("ascii")
        w = b - a
        out.uniq += [joined[i:i + w] for i in range(0, taken * w, w)]
        out.uniq_units.append(units)
    else:
        out.uniq += [parsed[2]] * taken
    return taken


def _take_strided(buf, pos: int, end: int, base: int, check_crc: bool, out: ScanBatch,
                  room: int) -> int:
    """Take a run of records of one size lying back to back from `pos` (a producer's batch of
    equal messages) without a step per record: their frames, headers and tails are numpy
    views with that size as stride, nothing gathered. The first record goes through the
    struct check; the others must match it in size, body length and (outside the UNIQ_KEY
    value) tail, and lie where they say, so that the same checks hold for them. Returns how
    many records it appended, 0 when there is no such run of `NUMPY_MIN_RECORDS` records."""
    total, magic = _FRAME.unpack_from(buf, pos)
    count = min(room, (end - pos) // total) if magic == MAGIC_V1 and total >= _MIN_RECORD else 0
    if count < NUMPY_MIN_RECORDS:
        return 0
    head = np.ndarray((count,), _HEADER_DTYPE, buf, pos, (total,))
    ok, _, _, _, _, _, _, _, tpos = _headers_struct(buf, [pos], base, check_crc)
    if not ok:
        return 0
    t0 = tpos[0]
    ok = (head["total"] == total) & (head["magic"] == MAGIC_V1) \
        & (head["body_len"] == t0 - pos - _HEAD_SIZE) & ((head["sys_flag"] & _V6_BITS) == 0) \
        & (head["phys"] == np.arange(base + pos, base + pos + count * total, total))
    n = count if ok.all() else int(ok.argmin())
    first = _first_tail(buf, t0, pos + total, check_crc)
    if first is None:
        return 0
    rows = np.ndarray((n, pos + total - t0), np.uint8, buf, t0, (total, 1))
    if check_crc and first[4] == len(first[0]) > first[3] and (rows[:, -1] == 0).any():
        return 0                        # a value ending in a torn write's zero (see core.codec)
    starts = list(range(pos, pos + n * total, total)) if check_crc else ()
    taken = _take_alike(buf, rows, first, starts, [s + t0 - pos for s in starts],
                        head["crc"][:n], check_crc, out)
    del rows
    if not taken:
        return 0
    head = head[:taken]
    out.extend_header_fields(taken, head["phys"].tolist(), [total] * taken,
                             head["queue_id"].tolist(), head["queue_offset"].tolist(),
                             head["store_ts"].tolist(), head["sys_flag"].tolist())
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
        if room >= NUMPY_MIN_RECORDS and end - pos >= 8:
            taken = _take_strided(buf, pos, end, base, check_crc, out, room)
            if taken:
                pos += taken * out.size[-1]
                continue
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
