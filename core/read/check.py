"""What a read checks before it serves a record (DESIGN.md section 7, integrity): that the bytes
are a whole record that passes its CRC check (the record CRC of `core.record.crc_property` where the
record has one, else the body CRC) and, for a pull, that it is the record its consume-queue
entry names: TOTALSIZE the entry's size, PHYSICALOFFSET the entry's offset, its topic and
queue id those of the queue, QUEUEOFFSET the entry's number.

`check_run` checks the records of a chunk (records back to back, cut at the entries' sizes,
never at TOTALSIZE: a damaged TOTALSIZE must not decide where the next record starts) and
says which is the first damaged one and why. Records of one size in a run (a queue's records
mostly) are checked together: one struct call reads the fields of all of them, compared as
tuples at C speed, then one CRC call each (a numpy version of the same cost three times as
much for a pull of 32). With the compiled accelerator (`core.record.accel`) one C call checks
the whole chunk instead (`_accel.first_bad`, all of `record_problem`'s checks but the
reasons); the reason of a refused record is then asked of `record_problem`, from the first
refusal on, so the C code can only speed a verdict up, never change it. `DamageLog` counts
what reads refused and logs each refusal once per position.

Measured (benchmarks/embedded.py, integrity rows, on a loaded 2-core machine): a pull of 32
sealed 1 KiB records costs about 0.23 us a record to check in C against 2.5-3.7 us in Python;
raw gets with the checks ran at 0.84x of gets without them (0.36x pure Python).
"""
from __future__ import annotations

import logging
import struct

from core.record.layout import picked_struct
from core.record.accel import native
from core.record.codec import MAGIC_V1, MAGIC_V2, host_lengths
from core.record.crc import crc32
from core.record.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from core.record.crc_property import CRC32_RESERVED_LEN, FORCED, LABEL, verify

log = logging.getLogger(__name__)

# TOTALSIZE MAGIC BODYCRC QUEUEID, QUEUEOFFSET PHYSOFFSET SYSFLAG
_FIXED = picked_struct(("total", "magic", "crc", "queue_id", "queue_offset", "phys", "sys_flag"))
_I32 = struct.Struct(">i")
_V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
RUN_MIN = 8                    # from this many records of one size on, check them together


def record_problem(buf, pos: int, size: int, phys: int | None = None, topic: bytes | None = None,
                   queue_id: int | None = None, queue_offset: int | None = None,
                   check_crc=True) -> str | None:
    """Why the `size` bytes at `pos` of `buf` are not the record to serve (None: they are).
    The named fields are compared where given."""
    if native is not None and _first_bad(buf, pos, (size,), None if phys is None else (phys,), topic,
                                         queue_id, None if queue_offset is None else (queue_offset,),
                                         check_crc) < 0:
        return None
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
    if native is not None:
        start = _first_bad(chunk, 0, sizes, phys, topic, queue_id, queue_offsets, check_crc)
        if start < 0:
            return None
    elif n >= RUN_MIN and check_crc != FORCED and sizes.count(sizes[0]) == n:
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


def _first_bad(buf, pos: int, sizes, phys, topic, queue_id, queue_offsets, check_crc) -> int:
    """`_accel.first_bad`: the number of the first record `record_problem` would refuse, -1 when
    none; 0 (ask the reference for all) where the arguments do not fit C's integers."""
    try:
        return native.first_bad(buf, pos, sizes, phys, topic, queue_id, queue_offsets,
                                FORCED if check_crc == FORCED else 1 if check_crc else 0)
    except (OverflowError, TypeError, ValueError):
        return 0


def _uniform_bad(chunk, n: int, size: int, phys0: int, topic: bytes, queue_id: int, qoff0: int,
                 check_crc) -> int | None:
    """`check_run` for `n` records of `size` bytes at consecutive physical offsets from `phys0`
    and queue offsets from `qoff0`, each with the CRC property: None when every one passes,
    else 0 (the caller then checks them one by one and says which and why). One struct call
    reads the fields of all of them; each record costs one CRC call."""
    if size < 91 + CRC32_RESERVED_LEN or len(chunk) < n * size:
        return 0
    first = _FIXED.unpack_from(chunk, 0)
    t0 = 88 + _I32.unpack_from(chunk, 84)[0]
    p = t0 + 1 + len(topic) + 2                              # past TOPIC and PROPERTIESLENGTH
    if first[1] != MAGIC_V1 or first[6] & _V6_BITS or not 88 <= t0 or p > size - CRC32_RESERVED_LEN \
            or bytes(chunk[t0:p - 2]) != bytes((len(topic),)) + topic \
            or (chunk[p - 2] << 8 | chunk[p - 1]) != size - p:
        return 0
    vals = _run_struct(n, size, t0, p).unpack_from(chunk)
    k = _RUN_ITEMS
    if vals[0::k].count(size) != n or vals[1::k].count(MAGIC_V1) != n or vals[3::k].count(queue_id) != n \
            or vals[4::k] != tuple(range(qoff0, qoff0 + n)) \
            or vals[5::k] != tuple(range(phys0, phys0 + n * size, size)) \
            or vals[6::k].count(first[6]) != n or vals[7::k].count(t0 - 88) != n \
            or vals[8::k].count(vals[8]) != n or vals[9::k].count(LABEL) != n or vals[11::k].count(2) != n:
        return 0
    if check_crc:
        cut = size - CRC32_RESERVED_LEN
        view = memoryview(chunk)
        try:                            # all at C level: the digits of the CRCs, last record
            crcs = list(map(_MASK, map(crc32, map(view.__getitem__, map(   # first, against the
                slice, range(0, n * size, size), range(cut, n * size, size))))))   # stored digits
        finally:                                                       # reversed whole
            view.release()
        if b"".join(map(b"%010d".__mod__, reversed(crcs))) != b"".join(vals[10::k])[::-1]:
            return 0
    return None


_RUN_ITEMS = 12      # TOTALSIZE MAGIC BODYCRC QUEUEID QUEUEOFFSET PHYS SYSFLAG BODYLEN TOPIC.. LABEL DIGITS 0x02
_RUN_STRUCTS: dict = {}
_MASK = (0x7FFFFFFF).__and__


def _run_struct(n: int, size: int, t0: int, p: int) -> struct.Struct:
    """The struct of `n` records of `size` bytes whose topic starts at `t0` and properties at
    `p`: per record the fields `_uniform_bad` compares."""
    key = (n, size, t0, p)
    st = _RUN_STRUCTS.get(key)
    if st is None:
        one = f"iiii4xqqi44xi{t0 - 88}x{p - t0}s{size - CRC32_RESERVED_LEN - p}x9s10sB"
        st = struct.Struct(">" + one * n)
        if len(_RUN_STRUCTS) >= 256:
            _RUN_STRUCTS.clear()
        _RUN_STRUCTS[key] = st
    return st


class DamageLog:
    """What the reads of one process refused: a count (the `damaged_reads` metric) and one
    warning per damaged position; and the damaged consume-queue entries whose records a pull
    found intact and served (`entries`)."""

    def __init__(self):
        self.count = 0
        self.entries = 0                # damaged consume-queue entries re-derived and served
        self._seen: set = set()

    def note(self, where: str, phys: int, reason: str) -> str:
        """Count a refused record; return the reason a client is given."""
        self.count += 1
        text = f"damaged record at physical offset {phys} ({where}): {reason}"
        if phys not in self._seen and len(self._seen) < 65536:
            self._seen.add(phys)
            log.warning("not served: %s", text)
        return text

    def note_entry(self, where: str, phys: int, reason: str, found: int, repaired: bool) -> None:
        """Count a consume-queue entry found damaged whose record was found intact elsewhere
        (at `found`) and served; log it once."""
        self.entries += 1
        if (where, found) not in self._seen and len(self._seen) < 65536:
            self._seen.add((where, found))
            log.warning("consume-queue entry %s named physical offset %d (%s); its record is at %d, "
                        "served from there%s", where, phys, reason, found,
                        "; the entry is written again" if repaired else
                        " (`mqstore check --fix` writes the entry again)")
