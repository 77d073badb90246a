"""The records of a pull reply's frame (the "raw" format, docs/FORMAT.md: stored records
concatenated), found and checked without an object per record: `find_records` gives a
`RecordSpans` (where each body starts and how long it is), whose `views` are lazy record
views (`core.record.decode.FrameView`, a LazyMessageExt; the client's `ipc.received.ReceivedMessage`).

Splitting a frame reads four fields of each record (TOTALSIZE, the step to the next record;
MAGIC; SYSFLAG; BODYLEN), with one struct call per record or, for a run of records of one
size, one numpy step for the run.
"""
from __future__ import annotations

import struct
from itertools import repeat

from core.record.decode import FrameView, view_at
from core.record.layout import (
    BODY_POS, HEADER_V4 as _HEADER_V4, HEADERS as _HEADERS, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE,
    V6_BITS as _V6_BITS, host_lengths, picked_struct,
)
from core.record.scan import like_run_length

_LEAN = picked_struct(("total", "magic", "sys_flag", "body_len"))   # of a v1 IPv4 record
_V4_SIZE = _HEADER_V4.size
RUN_MIN = 16                # from this many records of one size on, a run is split with numpy


class RecordSpans:
    """The records of one frame, found and checked by `find_records`: where each body starts
    and how long it is (plus the header of each record the careful loop read), without an
    object per record yet. `views` makes the views: of class `view` (ipc.received's subclass
    names its ReceivedMessage)."""
    __slots__ = ("buf", "starts", "lens", "heads")
    view = FrameView

    def __init__(self, buf: bytes):
        self.buf = buf
        self.starts: list = []
        self.lens: list = []
        self.heads: dict = {}          # index -> header tuple, for records the careful loop took

    def __len__(self) -> int:
        return len(self.starts)

    def views(self) -> list:
        n, heads, buf, cls = len(self.starts), self.heads, self.buf, self.view
        out = list(map(cls, repeat(buf, n), self.starts, self.lens))
        for i, h in heads.items():
            p = self.starts[i]
            out[i] = view_at(cls, buf, p - BODY_POS[(h[7] >> 4) & 3], p, self.lens[i], h)
        return out


def find_records(buf, spans=RecordSpans) -> RecordSpans:
    """The records concatenated in `buf` (copied once into bytes when it is another buffer).
    Anything that is not a whole record (a blank, a bad magic, a length that runs past the end)
    raises ValueError: the frame is not what the protocol says.

    Version-1 records with IPv4 hosts (nearly all) go through a lean loop: one unpack of four
    header fields, a few comparisons, where the body is (the header is unpacked later, when
    asked). Where two records in a row have one size (a producer's batch of like messages),
    `_take_run` checks the records of that size and body length that follow in one numpy step,
    without a loop in Python. At the first other record (v2 magic, an IPv6 host) or anything
    doubtful, the record-by-record loop takes over from there; it has the final word on what is
    a record and says where a bad frame went wrong."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    out = spans(buf)
    starts, lens = out.starts, out.lens
    unpack = _LEAN.unpack_from
    pos, end = 0, len(buf)
    last = try_run_at = 0
    try:
        while pos < end:
            total, magic, sys_flag, body_len = unpack(buf, pos)
            if magic != MAGIC_V1 or sys_flag & _V6_BITS \
                    or not 0 <= body_len <= total - MIN_RECORD_SIZE:
                break
            if total == last and pos >= try_run_at and end - pos >= RUN_MIN * total:
                taken = _take_run(buf, pos, total, body_len, end, out)
                pos += taken * total
                if taken:
                    continue
                try_run_at = pos + RUN_MIN * total       # not a run: look again further on
            starts.append(pos + _V4_SIZE)
            lens.append(body_len)
            last = total
            pos += total
    except struct.error:
        pass                                       # a short tail: the careful loop says so
    if pos > end:                                  # the last record ran past the end
        starts.clear()
        lens.clear()
        pos = 0
    if pos < end:
        _split_carefully(buf, pos, out)
    return out


def _take_run(buf: bytes, pos: int, size: int, body_len: int, end: int, out: RecordSpans) -> int:
    """Add the records of `size` bytes with a body of `body_len` that lie back to back from
    `pos` (`core.record.scan.like_run_length`: a strided numpy check, in windows that grow
    eightfold); return how many, 0 when fewer than RUN_MIN."""
    n = like_run_length(buf, pos, None, size, body_len, (end - pos) // size)
    if n < RUN_MIN:
        return 0
    first = pos + _V4_SIZE
    out.starts.extend(range(first, first + n * size, size))
    out.lens.extend(repeat(body_len, n))
    return n


def _split_carefully(buf: bytes, pos: int, out: RecordSpans) -> None:
    """Add the records from `pos` on, checking each."""
    end = len(buf)
    try:
        while pos < end:
            h = _HEADER_V4.unpack_from(buf, pos)
            size = _V4_SIZE
            if h[7] & _V6_BITS:
                header = _HEADERS[host_lengths(h[7])]
                h = header.unpack_from(buf, pos)
                size = header.size
            total = h[0]
            if (h[1] != MAGIC_V1 and h[1] != MAGIC_V2) or total < MIN_RECORD_SIZE or pos + total > end \
                    or h[14] < 0 or size + h[14] > total:
                raise ValueError(f"no whole record at {pos} of a {end}-byte frame")
            out.heads[len(out.starts)] = h
            out.starts.append(pos + size)
            out.lens.append(h[14])
            pos += total
    except struct.error:
        raise ValueError(f"a truncated record at {pos} of a {end}-byte frame") from None
