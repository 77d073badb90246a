"""Damage in the middle of the CommitLog (DESIGN.md section 7, integrity): finding the next intact
record behind a damaged one, and keeping the damaged bytes aside.

RocketMQ and Kafka end the log at the first record that fails its check. Here a record that
fails with valid records behind it is not the end: `next_record` scans on from it for the next
record that passes every check of `core.record.codec.check_record` and whose PHYSICALOFFSET is the
position it lies at (a record that lies where it says it does, with its CRC intact, is not an
accident of bytes), looking at each place a record magic code stands, then at the start of each
later segment. Only when none is found is the damaged record the log's torn tail.

`keep` copies the damaged range into `quarantine/<offset>.bin` with a report beside it
(`<offset>.txt`: where, how long, why, which record follows), both written atomically through
the I/O seam. The range stays in the CommitLog, where every read refuses it (`core.read.check`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from core.record.codec import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, DispatchRequest, check_record

_MAGICS = tuple(m.to_bytes(4, "big", signed=True) for m in (MAGIC_V1, MAGIC_V2))
_BLANK = MAGIC_BLANK.to_bytes(4, "big", signed=True)


@dataclass
class Quarantined:
    """A damaged range [start, stop) of the CommitLog and what was made of it."""
    start: int
    stop: int
    reason: str
    path: str = ""              # the copy in quarantine/, "" when none was written

    @property
    def length(self) -> int:
        return self.stop - self.start


def next_record(queue, file_size: int, offset: int, check_crc) -> int | None:
    """The physical offset of the first intact record after `offset` that lies where its
    PHYSICALOFFSET says (or of a segment's start, after a blank that fills the segment from a
    place past `offset`); None when there is none: `offset` is the log's end."""
    files = queue.files
    mf = queue.find_mapped_file_by_offset(offset)
    if mf is None:
        return None
    idx = files.index(mf)
    pos = offset - mf.file_from_offset + 1
    while idx < len(files):
        mf = files[idx]
        found = _search(queue, mf, pos, file_size, check_crc)
        if found is not None:
            return found
        idx, pos = idx + 1, 0
    return None


def _search(queue, mf, pos: int, file_size: int, check_crc) -> int | None:
    first = _first_nonzero(queue, mf, pos, file_size)
    if first is None:
        return None                 # nothing but zeros: no record (every normal start's case)
    pos = max(pos, first - 3)       # a record's first 4 bytes (its size) are not all zero
    buf = queue.hold(mf)
    if buf is None:
        return None
    base = mf.file_from_offset
    try:
        found = resync_in(buf, pos, base, file_size, check_crc)
        return None if found is None else base + found
    finally:
        mf.release()


def _first_nonzero(queue, mf, pos: int, file_size: int, step: int = 1 << 22) -> int | None:
    """The position of the first non-zero byte of segment `mf` at or after `pos`, None when
    there is none; read with pread over the file's data only. The rest of the last segment is
    searched at every normal start: three finds of a magic code through the mapping took
    2.3 s and faulted 1 GiB into the process's resident memory, where this reads the zeros
    once without mapping them."""
    zeros = bytes(step)
    with queue.fileops.open_reader(mf.path) as reader:
        for lo, hi in reader.data_ranges(pos, file_size):
            for at in range(lo, hi, step):
                chunk = reader.read(at, min(step, hi - at))
                if chunk != (zeros if len(chunk) == step else bytes(len(chunk))):
                    return at + len(chunk) - len(chunk.lstrip(b"\0"))
    return None


def resync_in(buf, pos: int, base: int, file_size: int, check_crc) -> int | None:
    """Within one segment (`buf`, starting at physical offset `base`): the position from `pos`
    on of the first intact record that lies where it says, `file_size` when a blank from a place
    past `pos` fills the segment (the next record is the next segment's), None when neither."""
    if pos == 0 and _valid_at(buf, 0, base, file_size, check_crc):
        return 0
    candidates = []
    for magic in _MAGICS + (_BLANK,):
        at = buf.find(magic, pos + 4)
        if at >= 0:
            candidates.append(at - 4)
    while candidates:
        p = min(candidates)
        candidates.remove(p)
        if p >= pos:
            if buf[p + 4:p + 8] == _BLANK:
                if int.from_bytes(buf[p:p + 4], "big", signed=True) == file_size - p:
                    return file_size                # a blank to the segment's end: next segment
            elif _valid_at(buf, p, base, file_size, check_crc):
                return p
        magic = bytes(buf[p + 4:p + 8])
        at = buf.find(magic, p + 5)
        if at >= 0:
            candidates.append(at - 4)
    return None


def _valid_at(buf, p: int, base: int, file_size: int, check_crc) -> bool:
    req, _ = check_record(buf, p, file_size, check_crc)
    return req.__class__ is DispatchRequest and req.commit_log_offset == base + p


def keep(queue, fileops, directory: str, start: int, stop: int, reason: str, file_size: int,
         following: int | None) -> Quarantined:
    """Copy the CommitLog's [start, stop) into `directory` with a report; the Quarantined."""
    fileops.make_dirs(directory)
    data = bytearray()
    at = start
    while at < stop:
        mf = queue.find_mapped_file_by_offset(at)
        if mf is None:
            break
        n = min(stop, mf.file_from_offset + file_size) - at
        chunk = queue.read(at, n)
        if chunk is None:
            break
        data += chunk
        at += n
    name = os.path.join(directory, f"{start:020d}")
    fileops.write_file_atomic(name + ".bin", bytes(data))
    after = f"the next intact record is at {following}" if following is not None else \
        "no intact record follows"
    fileops.write_file_atomic(name + ".txt", (
        f"CommitLog bytes {start} to {stop} ({stop - start} bytes) failed their check: {reason}\n"
        f"{after}; the bytes stay in the CommitLog, never served, and are copied to {name}.bin\n"
    ).encode())
    return Quarantined(start, stop, reason, name + ".bin")


def damage_reason(queue, offset: int, file_size: int) -> str:
    """Why the record at `offset` fails, in words (for the quarantine report)."""
    mf = queue.find_mapped_file_by_offset(offset)
    buf = queue.hold(mf) if mf is not None else None
    if buf is None:
        return "unreadable"
    try:
        return damage_reason_in(buf, offset - mf.file_from_offset, mf.file_from_offset, file_size)
    finally:
        mf.release()


def damage_reason_in(buf, pos: int, base: int, file_size: int) -> str:
    """`damage_reason` for the record at `pos` of a segment's `buf` (starting at `base`)."""
    req, size = check_record(buf, pos, file_size, False)
    if req.__class__ is DispatchRequest:
        if req.commit_log_offset != base + pos:
            return f"PHYSICALOFFSET {req.commit_log_offset}, the record lies at {base + pos}"
        return "CRC mismatch"
    if size:
        return f"a framed record of {size} bytes whose fields do not add up"
    return "no record framing (damaged TOTALSIZE or magic code)"
