"""The dispatcher's fast parse of CommitLog records: many records per call, and only the fields
that the consume queues and the index need.

`scan_segment` walks the records of one mapped segment from a position and appends each valid
one to a `ScanBatch` (`core.record.scan_batch`), whose parts hold, per record:

    phys offset, size, topic, queue id, queue offset, tag code, store timestamp, KEYS,
    UNIQ_KEY, sys flag          KEYS and UNIQ_KEY are "" when absent

A run of records of one size lying back to back (a producer's batch of equal messages) is
taken without a step per record (`_take_strided`): frames, headers, bodies and tails are
numpy views with that size as stride, the body CRCs come from `core.record.body_crc` (a table per
byte position for small bodies), and the run becomes one `Run` part of numpy columns. Other
common records (IPv4 hosts, version 1 magic) take the fast path in two phases: a minimal
loop walks TOTALSIZE/MAGIC frames to find where the records start; then the fixed headers of
all of them are read and checked together (with numpy for `NUMPY_MIN_RECORDS` records or
more, with one struct call each below that): host lengths, body and topic lengths,
properties framing, PHYSOFFSET, a torn tail. Only the CRC, the topic and the properties then
need a step per record, or none when the tails are alike but for the UNIQ_KEY value
(`_take_alike`; not for the delay topic, whose tag codes depend on each record's store time).
Anything else (IPv6 hosts, version 2 records, a record that fails any fast check) goes
through `core.record.codec.check_record`, so all paths accept and refuse exactly the same records.
Topics and properties are parsed through the caches of `core.record.props`.

Records with the whole-record CRC property (`core.record.crc_property`) are checked with it instead of
the body CRC when the scan checks CRCs; their tails are alike but for the UNIQ_KEY value and the
ten CRC digits, and a run's digits are read in one numpy step (`run_crcs_ok`).
"""
from __future__ import annotations

import numpy as np

from core.record.body_crc import MAX_ROW, crc32_rows, crc32_spans
from core.record.codec import (
    MAGIC_BLANK, MAGIC_V1, MIN_RECORD_SIZE, SCHEDULE_TOPIC, DispatchRequest, check_record,
    DELAY_LEVEL_MS, schedule_tag_code,
)
from core.record.crc import crc32
from core.record.layout import DTYPE_V4, FRAME, HEADER_V4, V6_BITS as _V6_BITS
from core.record.crc_property import CRC32_RESERVED_LEN, FORCED, LABEL, run_crcs_ok, verify
from core.record.props import PROPS, TOPICS, properties, topic_of, uniq_span
from core.record.scan_batch import Run, ScanBatch
from core.record.stop import Stop

NUMPY_MIN_RECORDS = 12            # fewer fast-path records are checked with struct, one by one
_HEADER_V4 = HEADER_V4            # IPv4 hosts: 88 bytes
_HEAD_SIZE = _HEADER_V4.size
_HEADER_DTYPE = DTYPE_V4
_HEADER_BYTES = np.arange(_HEAD_SIZE, dtype=np.int64)
_FRAME = FRAME


ScanEnd = Stop             # why scan_segment stopped: LIMIT, BLANK, END, CORRUPT or MISPLACED


def _walk(buf, pos: int, end: int, room: int) -> list[int]:
    """Where the next (at most `room`) version-1 frames that fit before `end` start."""
    frame_at = _FRAME.unpack_from
    starts: list[int] = []
    append = starts.append
    while room and end - pos >= 8:
        total, magic = frame_at(buf, pos)
        if magic != MAGIC_V1 or not MIN_RECORD_SIZE <= total <= end - pos:
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
        ok &= (props_len == 0) | (u8[stop - 1] != 0)  # a torn write's zeros (see core.record.codec)
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


def _take(buf, starts: list[int], base: int, check_crc: bool, out: ScanBatch,
          delay_levels: tuple = DELAY_LEVEL_MS) -> tuple[int, int]:
    """Append the leading records of `starts` that pass the fast path; return (how many,
    where the last of them ends)."""
    headers = _headers_numpy if len(starts) >= NUMPY_MIN_RECORDS else _headers_struct
    n, phys, size, queue_id, queue_offset, sys_flag, store_ts, crc, tpos = \
        headers(buf, starts, base, check_crc)
    if n >= NUMPY_MIN_RECORDS:
        taken = _take_uniform(buf, starts[:n], tpos, (phys, size, queue_id, queue_offset,
                                                      store_ts, sys_flag, crc), check_crc, out)
        if taken is not None:
            return taken, (starts[taken - 1] + size[taken - 1] if taken else 0)
    body_crc32, topics, props_of = crc32, TOPICS, PROPS
    rows = out.rows_part()
    o_topic, o_tags, o_keys, o_uniq = rows.topic.append, rows.tags.append, rows.keys.append, \
        rows.uniq.append
    taken = 0
    view = memoryview(buf) if check_crc else None
    try:
        for pos, t, stop, body_crc in zip(starts, tpos, (s + t for s, t in zip(starts, size)), crc):
            if check_crc and not verify(buf, pos, stop - pos, check_crc, lambda: body_crc32(
                    view[pos + _HEAD_SIZE:t]) & 0x7FFFFFFF == body_crc):
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
                tag = parsed[0] if topic != SCHEDULE_TOPIC else \
                    schedule_tag_code(raw, store_ts[taken], parsed[0], delay_levels)
                o_tags(tag), o_keys(parsed[1]), o_uniq(parsed[2])
            else:
                o_tags(0), o_keys(""), o_uniq("")
            o_topic(topic)
            taken += 1
    finally:
        if view is not None:
            view.release()
    rows.extend_header_fields(taken, phys, size, queue_id, queue_offset, store_ts, sys_flag)
    out.drop_empty_tail()
    return taken, (starts[taken - 1] + size[taken - 1] if taken else 0)


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
    if topic is None or parsed is None or (check_crc and b"\x00" in raw_topic) \
            or topic == SCHEDULE_TOPIC:
        return None
    a, b = uniq_span(raw)
    a, b = (a + p + 2, b + p + 2) if b else (len(tail), len(tail))
    return tail, topic, parsed, a, b


def _take_uniform(buf, starts: list[int], tpos: list[int], header: tuple, check_crc: bool,
                  out: ScanBatch) -> int | None:
    """`_take` for records whose topics and properties are byte for byte those of the first
    record except inside its UNIQ_KEY value (a producer's batch): the tails are gathered into
    one matrix and taken by `_take_alike`. `header`: the header columns of `_headers_numpy`
    (phys, size, queue id, queue offset, store time, sys flag, body CRC). None when they are
    not all alike."""
    size = header[1]
    first = _first_tail(buf, tpos[0], starts[0] + size[0], check_crc)
    if first is None:
        return None
    at = np.array(tpos, np.int64)
    if not (np.array(starts, np.int64) + size - at == len(first[0])).all():
        return None
    u8 = np.frombuffer(buf, np.uint8)
    rows = u8[at[:, None] + np.arange(len(first[0]), dtype=np.int64)]
    del u8
    columns = [np.array(c, np.int64) for c in header]

    def body_crcs():
        return crc32_spans(buf, [s + _HEAD_SIZE for s in starts], tpos, len(starts))

    def record_crcs_ok():
        return run_crcs_ok(buf, starts, size[0], check_crc) if size.count(size[0]) == len(size) \
            else None
    return _take_alike(rows, first, columns, body_crcs, check_crc, out, record_crcs_ok)


def _take_alike(rows, first: tuple, header, body_crcs, check_crc: bool,
                out: ScanBatch, record_crcs_ok) -> int | None:
    """Append a `Run` of records whose tails are the rows of `rows` (the first one parsed as
    `first`), when every row equals the first outside the UNIQ_KEY value and the values are
    ASCII without a separator: compared in one numpy step, parsed once, the values kept as a
    matrix. None when they are not all alike; else how many leading records pass their CRC
    (all of them, mostly). `header` holds the records' header columns (phys, size, queue id,
    queue offset, store time, sys flag, body CRC; arrays or structured fields) and
    `body_crcs()` computes the CRCs of their bodies, `record_crcs_ok()` whether each record
    passes its record CRC (None when they are not all of one size) (with check_crc only).
    Records with the CRC property differ in its digits too, which are not compared."""
    tail, topic, parsed, a, b = first
    n = len(rows)
    ref = rows[0]
    values = rows[:, a:b]
    sealed = tail[-CRC32_RESERVED_LEN:-11] == LABEL
    stop = rows.shape[1] - 11 if sealed else rows.shape[1]
    if not ((rows[:, :a] == ref[:a]).all() and (rows[:, b:stop] == ref[b:stop]).all()) \
            or (values >= 0x80).any() or (values == 2).any() \
            or (sealed and (rows[:, -1] != 2).any()):
        return None
    taken = n
    if check_crc:
        if sealed:
            ok = record_crcs_ok()
            if ok is None:
                return None
            bad = np.flatnonzero(~ok)
        elif check_crc == FORCED:
            return None
        else:
            bad = np.flatnonzero((body_crcs() & 0x7FFFFFFF) != header[6])
        taken = int(bad[0]) if len(bad) else n
    if taken:
        phys, size, queue_id, queue_offset, store_ts, sys_flag = (
            np.array(c[:taken], np.int64) for c in header[:6])
        units = np.array(values[:taken]) if b > a else None     # a copy: no view of `buf`
        out.add_run(Run(phys, size, queue_id, queue_offset, store_ts, sys_flag, topic,
                        parsed[0], parsed[1], units, parsed[2]))
    return taken


def _take_strided(buf, pos: int, end: int, base: int, check_crc: bool, out: ScanBatch,
                  room: int) -> int:
    """Take a run of records of one size lying back to back from `pos` (a producer's batch of
    equal messages) without a step per record: their frames, headers, bodies and tails are
    numpy views with that size as stride, nothing gathered. The first record goes through the
    struct check; the others must match it in size, body length and (outside the UNIQ_KEY
    value) tail, and lie where they say, so that the same checks hold for them. Returns the
    bytes taken, 0 when there is no such run of `NUMPY_MIN_RECORDS` records."""
    total, magic = _FRAME.unpack_from(buf, pos)
    count = min(room, (end - pos) // total) if magic == MAGIC_V1 and total >= MIN_RECORD_SIZE else 0
    if count < NUMPY_MIN_RECORDS:
        return 0
    ok, _, _, _, _, _, _, _, tpos = _headers_struct(buf, [pos], base, check_crc)
    if not ok:
        return 0
    t0 = tpos[0]
    body = t0 - pos - _HEAD_SIZE
    n = like_run_length(buf, pos, base, total, body, count)
    if n < NUMPY_MIN_RECORDS:
        return 0
    head = np.ndarray((n,), _HEADER_DTYPE, buf, pos, (total,))
    first = _first_tail(buf, t0, pos + total, check_crc)
    if first is None:
        return 0
    rows = np.ndarray((n, pos + total - t0), np.uint8, buf, t0, (total, 1))
    if check_crc and first[4] == len(first[0]) > first[3] and (rows[:, -1] == 0).any():
        return 0                        # a value ending in a torn write's zero (see core.record.codec)

    def body_crcs():
        if body <= MAX_ROW:
            return crc32_rows(np.ndarray((n, body), np.uint8, buf, pos + _HEAD_SIZE, (total, 1)))
        starts = range(pos + _HEAD_SIZE, pos + n * total, total)
        return crc32_spans(buf, starts, range(t0, t0 + n * total, total), n)
    header = (head["phys"], np.full(n, total, np.int64), head["queue_id"], head["queue_offset"],
              head["store_ts"], head["sys_flag"], head["crc"])

    def record_crcs_ok():
        return run_crcs_ok(buf, range(pos, pos + n * total, total), total, check_crc)
    taken = _take_alike(rows, first, header, body_crcs, check_crc, out, record_crcs_ok)
    del rows, head, header
    return (taken or 0) * total


def like_run_length(buf, pos: int, base: int | None, total: int, body: int, count: int) -> int:
    """How many of the `count` frames of `total` bytes from `pos` have that size, the version 1
    magic, a body of `body` bytes, IPv4 hosts, and (unless `base` is None) lie where they say,
    the frame at `pos` at physical offset `base + pos`; read in windows that grow eightfold, so
    that a short run costs little however many frames could follow. A pull reply's records are
    runs of the CommitLog back to back: the client's split (ipc.received) passes None."""
    n, window = 0, 32
    while n < count:
        hi = min(count, n + window)
        head = np.ndarray((hi - n,), _HEADER_DTYPE, buf, pos + n * total, (total,))
        ok = (head["total"] == total) & (head["magic"] == MAGIC_V1) & (head["body_len"] == body) \
            & ((head["sys_flag"] & _V6_BITS) == 0)
        if base is not None:
            at = base + pos + n * total
            ok &= head["phys"] == np.arange(at, at + (hi - n) * total, total)
        del head
        if not ok.all():
            return n + int(ok.argmin())
        n, window = hi, window * 8
    return n


def _from_check(buf, pos: int, end: int, check_crc: bool, delay_levels: tuple = DELAY_LEVEL_MS):
    """The general parse, for records the fast path does not take: (row or Stop, size)."""
    req, size = check_record(buf, pos, end, check_crc, delay_levels)
    if req.__class__ is not DispatchRequest:
        return req, size                  # Stop.BLANK, END or CORRUPT
    return (req.commit_log_offset, req.msg_size, req.topic, req.queue_id,
            req.consume_queue_offset, req.tags_code, req.store_timestamp, req.keys,
            req.uniq_key, req.sys_flag), size


def scan_segment(buf, pos: int, end: int, base: int, check_crc: bool, out: ScanBatch,
                 max_records: int, delay_levels: tuple = DELAY_LEVEL_MS) -> tuple[int, str]:
    """Append the valid records of `buf[pos:end]` to `out` (while it holds < `max_records`).

    `base` is the segment's first physical offset: a record must say it lies at base + pos.
    `delay_levels`: the store's delay levels in ms, for the tag codes of delay records.
    Returns (position reached, Stop); for BLANK the position is that of the filler.
    """
    while pos < end:
        room = max_records - len(out)
        if room <= 0:
            return pos, Stop.LIMIT
        if room >= NUMPY_MIN_RECORDS and end - pos >= 8:
            taken = _take_strided(buf, pos, end, base, check_crc, out, room)
            if taken:
                pos += taken
                continue
        starts = _walk(buf, pos, end, room)
        if starts:
            taken, reached = _take(buf, starts, base, check_crc, out, delay_levels)
            if taken:
                pos = reached
                if taken == len(starts):
                    continue
        if end - pos < 8:
            return pos, Stop.END
        total, magic = _FRAME.unpack_from(buf, pos)
        if magic == MAGIC_BLANK and 8 <= total <= end - pos:
            return pos, Stop.BLANK
        row, size = _from_check(buf, pos, end, check_crc, delay_levels)
        if row.__class__ is not tuple:
            return pos, row
        if row[0] != base + pos:
            return pos, Stop.MISPLACED
        out.add(row)
        pos += size
    return pos, Stop.LIMIT
