"""Consume-queue entries held to their records' headers (integrity, DESIGN.md section 7): an
entry is right when the record at its physical offset has TOTALSIZE its size, QUEUEID the
queue's, QUEUEOFFSET its number and PHYSICALOFFSET its offset. `ConsumeQueue.recover`'s damage
check (`core.log.consume_queue.damage_restart`) asks it of each queue's tail entries at load.

Without the headers, an entry damaged without breaking the queue's order (a small offset or
size flip) was left as it was, and one that made its record end further on put recovery's
restart past the entry itself, which then stayed damaged and its intact record was never
served again (issue 33's soak: 3 of its consume-queue flips). Entries below the log's first
segment are taken as right (their segments expired).
"""
from __future__ import annotations

import struct

from core.record.layout import PHYS_OFFSET_POS, QUEUE_OFFSET_POS, SYSFLAG_POS, offsets

_QUEUE_ID_POS = offsets()["queue_id"]
_HEAD = SYSFLAG_POS                 # the header bytes read: up to SYSFLAG
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from


class RecordHeaders:
    """Entries held to their records' headers, one after the other: the segment of the last
    record read stays held, so that a queue's tail entries (their records mostly in one or two
    segments) cost a struct read each, not a segment lookup and hold each. `close()` releases it."""

    def __init__(self, commitlog):
        self.queue = commitlog.queue
        self.file_size = commitlog.file_size
        self.min_offset = self.queue.get_min_offset()
        self._mf = self._buf = None

    def matches(self, phys: int, size: int, queue_id: int, queue_offset: int) -> bool:
        """Whether the record at `phys` is the entry's (an entry below the log's start is)."""
        if phys < self.min_offset:
            return True
        mf = self._mf
        if mf is None or not mf.file_from_offset <= phys < mf.file_from_offset + self.file_size:
            self.close()
            mf = self.queue.find_mapped_file_by_offset(phys)
            if mf is None or (buf := self.queue.hold(mf)) is None:
                return False
            self._mf, self._buf = mf, buf
        pos, buf = phys - mf.file_from_offset, self._buf
        if pos < 0 or pos + _HEAD > self.file_size:
            return False
        return (_I32(buf, pos)[0] == size and _I32(buf, pos + _QUEUE_ID_POS)[0] == queue_id
                and _I64(buf, pos + QUEUE_OFFSET_POS)[0] == queue_offset
                and _I64(buf, pos + PHYS_OFFSET_POS)[0] == phys)

    def close(self) -> None:
        if self._mf is not None:
            self._mf.release()
            self._mf = self._buf = None
