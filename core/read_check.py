"""What a read checks before it serves a record (DESIGN.md section 7, integrity): that the bytes
are a whole record that passes its CRC check (the record CRC of `core.record_crc` where the
record has one, else the body CRC) and, for a pull, that it is the record its consume-queue
entry names: TOTALSIZE the entry's size, PHYSICALOFFSET the entry's offset, its topic and
queue id those of the queue, QUEUEOFFSET the entry's number.

`check_run` checks the records of a chunk (records back to back, cut at the entries' sizes,
never at TOTALSIZE: a damaged TOTALSIZE must not decide where the next record starts) and
says which is the first damaged one and why. Records of one size in a run (a queue's records
mostly) are checked with numpy: the header fields of all of them in one step, the CRC digits
of all of them in one step, then one CRC call each. `DamageLog` counts what reads refused and
logs each refusal once per position.

Measured (benchmarks/embedded.py, pull rows): the checks cost one CRC call per record plus
a few numpy calls per pull.
"""
from __future__ import annotations

import logging
import struct

import numpy as np

from core.codec import MAGIC_V1, MAGIC_V2, host_lengths
from core.crc import crc32
from core.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from core.record_crc import CRC32_RESERVED_LEN, FORCED, LABEL, verify

log = logging.getLogger(__name__)

# TOTALSIZE MAGIC BODYCRC QUEUEID, QUEUEOFFSET PHYSOFFSET SYSFLAG
_FIXED = struct.Struct(">iiii4xqqi")
_I32 = struct.Struct(">i")
_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
_HEAD_V4 = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"),
                     ("flag", ">i4"), ("queue_offset", ">i8"), ("phys", ">i8"),
                     ("sys_flag", ">i4"), ("rest", "V44"), ("body_len", ">i4")])
_LABEL = np.frombuffer(LABEL, np.uint8)
_POWERS = 10 ** np.arange(10, dtype=np.int64)
NUMPY_MIN = 8                  # from this many records of one size on, check with numpy


def record_problem(buf, pos: int, size: int, phys: int | None = None, topic: bytes | None = None,
                   queue_id: int | None = None, queue_offset: int | None = None,
                   check_crc=True) -> str | None:
    """Why the `size` bytes at `pos` of `buf` are not the record to serve (None: they are).
    The named fields are compared where given."""
    try:
        total, magic, body_crc, qid, qoff, at, sys_flag = _FIXED.unpack_from(buf, pos)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            return f"no record there (magic {magic & 0xFFFFFFFF:#x})"
        if total != size:
            return f"TOTALSIZE {total}, the entry says {size}"
        if phys is not None and at != phys:
            return f"PHYSICALOFFSET {at}, the record lies at {phys}"
        if queue_id is not None and qid != queue_id:
            return f"QUEUEID {qid}, the queue is {queue_id}"
        if queue_offset is not None and qoff != queue_offset:
            return f"QUEUEOFFSET {qoff}, the entry is number {queue_offset}"
        born, store = host_lengths(sys_flag)
        body_at = pos + 68 + born + store        # BODYLENGTH
        body_len = _I32.unpack_from(buf, body_at)[0]
        body_at += 4
        p = body_at + body_len
        if body_len < 0 or p + 3 > pos + size:
            return f"BODYLENGTH {body_len} does not fit the record"
        if magic == MAGIC_V1:
            n, p = buf[p], p + 1
        else:
            n, p = buf[p] << 8 | buf[p + 1], p + 2
        if topic is not None and bytes(buf[p:p + n]) != topic:
            return f"topic {bytes(buf[p:p + n])!r}, the queue's is {topic!r}"
        p += n
        if p + 2 > pos + size or p + 2 + (buf[p] << 8 | buf[p + 1]) != pos + size:
            return "the lengths do not add up to TOTALSIZE"
    except (struct.error, IndexError):
        return "a truncated record"
    if check_crc and not verify(buf, pos, size, check_crc,
                                lambda: crc32(buf[body_at:body_at + body_len]) & 0x7FFFFFFF == body_crc):
        return "CRC mismatch"
    return None


def check_run(chunk, sizes, phys, topic: bytes, queue_id: int, queue_offsets, check_crc=True):
    """The first damaged record of `chunk` (records of `sizes` back to back, at physical
    offsets `phys`, queue offsets `queue_offsets`), as (index, reason); None when all pass."""
    n = len(sizes)
    if n >= NUMPY_MIN and check_crc != FORCED and sizes.count(sizes[0]) == n:
        bad = _uniform_bad(chunk, n, sizes[0], phys[0], topic, queue_id, queue_offsets[0], check_crc)
        if bad is None:
            return None
        start = bad                                  # the first suspect: say exactly why
    else:
        start = 0
    pos = sum(sizes[:start])
    for i in range(start, n):
        why = record_problem(chunk, pos, sizes[i], phys[i], topic, queue_id, queue_offsets[i], check_crc)
        if why is not None:
            return i, why
        pos += sizes[i]
    return None


def _uniform_bad(chunk, n: int, size: int, phys0: int, topic: bytes, queue_id: int, qoff0: int,
                 check_crc) -> int | None:
    """`check_run` for `n` records of `size` bytes at consecutive physical offsets from `phys0`
    and queue offsets from `qoff0`: None when every one passes, else the index of the first that
    may not (checked again one by one)."""
    if size < 91 + CRC32_RESERVED_LEN or len(chunk) < n * size:
        return 0
    rows = np.ndarray((n, size), np.uint8, chunk)
    head = rows[:, :88].copy().view(_HEAD_V4)[:, 0]
    tlen = len(topic)
    t0 = 88 + head["body_len"][0].item()
    ok = (head["total"] == size) & (head["magic"] == MAGIC_V1) & ((head["sys_flag"] & _V6_BITS) == 0) \
        & (head["queue_id"] == queue_id) & (head["body_len"] == t0 - 88) \
        & (head["phys"] == phys0 + size * np.arange(n)) & (head["queue_offset"] == qoff0 + np.arange(n))
    if not 0 <= t0 <= size - 3 - tlen:
        return 0
    ok &= (rows[:, t0] == tlen) & (rows[:, t0 + 1:t0 + 1 + tlen] == np.frombuffer(topic, np.uint8)).all(1)
    p = t0 + 1 + tlen
    ok &= (rows[:, p].astype(np.int64) << 8 | rows[:, p + 1]) == size - p - 2
    tails = rows[:, size - CRC32_RESERVED_LEN:]
    digits = tails[:, len(LABEL):-1]
    ok &= (tails[:, :len(LABEL)] == _LABEL).all(1) & (tails[:, -1] == 2) \
        & ((digits >= 0x30) & (digits <= 0x39)).all(1)
    if not ok.all():
        return int(ok.argmin())
    if check_crc:
        stored = (digits.astype(np.int64) - 0x30) @ _POWERS
        cut = size - CRC32_RESERVED_LEN
        got = np.fromiter((crc32(row[:cut]) for row in rows), np.int64, n) & 0x7FFFFFFF
        bad = np.flatnonzero(got != stored)
        if bad.size:
            return int(bad[0])
    return None


class DamageLog:
    """What the reads of one process refused: a count (the `damaged_reads` metric) and one
    warning per damaged position."""

    def __init__(self):
        self.count = 0
        self._seen: set = set()

    def note(self, where: str, phys: int, reason: str) -> str:
        """Count a refused record; return the reason a client is given."""
        self.count += 1
        text = f"damaged record at physical offset {phys} ({where}): {reason}"
        if phys not in self._seen and len(self._seen) < 65536:
            self._seen.add(phys)
            log.warning("not served: %s", text)
        return text
