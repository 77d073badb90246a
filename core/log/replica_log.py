"""`ReplicaLog`: a slave's CommitLog as its master's chunks arrive (DESIGN.md section 10): the
job the `ha` process hosts on a slave (services/ha/slave.py adds the socket and the
control-block words).

`apply(offset, data)` writes a chunk through `CommitLog.append_replicated` (into segments the
allocator made; the blank records at segment ends are the master's own bytes) and then walks
the records the chunk completed, reading only each record's TOTALSIZE, MAGICCODE, SYSFLAG and
STORETIMESTAMP: `written` is where the bytes end (what the slave acknowledges), `boundary`
the end of the last whole record (what the slave publishes as WROTE, so that its flusher,
reput and reader only ever see whole records, as on a master), `last_store_ts` the store
timestamp of the last whole record. A chunk may end inside a record: its rest comes with the
next chunk. A frame that is not a record (a size below the smallest record, a magic code that
is neither a record's nor a blank's) raises `ReplicaDamaged`: the slave stops following.
"""
from __future__ import annotations

import struct

from core.record.codec import (
    BLANK_SIZE, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, read_i32, read_i64, store_timestamp_position,
)

_SYSFLAG_POS = 36
_HEAD = struct.Struct(">ii")          # TOTALSIZE, MAGICCODE


class ReplicaDamaged(ValueError):
    """The master's bytes do not frame records where a record must start."""


class ReplicaLog:
    def __init__(self, commitlog, wrote: int):
        """`wrote`: where the log ends now (the control block's WROTE, a record boundary)."""
        self.commitlog = commitlog
        self.file_size = commitlog.file_size
        self.boundary = wrote
        self.written = wrote
        self.last_store_ts = 0

    @property
    def empty(self) -> bool:
        return not self.commitlog.queue.files

    def apply(self, offset: int, data) -> int:
        """Write the chunk at `offset` (where the log ends); return the new `boundary`."""
        if self.empty:
            self.boundary = offset
        self.written = self.commitlog.append_replicated(offset, data)
        self._walk()
        return self.boundary

    def _walk(self) -> None:
        """Move `boundary` over the whole records in [boundary, written), reading their
        headers straight from each segment's mapping (one hold per segment, no copy)."""
        queue = self.commitlog.queue
        pos, end = self.boundary, self.written
        while pos + BLANK_SIZE <= end:
            mf = queue.find_mapped_file_by_offset(pos)
            buf = queue.hold(mf) if mf is not None else None
            if buf is None:
                break
            try:
                pos, moved_on = self._walk_segment(buf, mf.file_from_offset, pos, end)
            finally:
                mf.release()
            self.boundary = pos
            if not moved_on:
                break

    def _walk_segment(self, buf, base: int, pos: int, end: int) -> tuple[int, bool]:
        """(where the walk stopped, whether it reached the segment's end to go on). One unpack
        per record (its size and magic code); the store timestamp of the last one only."""
        size = self.file_size
        seg_end = base + size
        limit = min(end, seg_end)
        head = _HEAD.unpack_from
        last = -1
        while pos + BLANK_SIZE <= limit:
            at = pos - base
            total, magic = head(buf, at)
            if magic == MAGIC_BLANK:
                if total != seg_end - pos:
                    raise ReplicaDamaged(f"a blank record at {pos} of {total} bytes does not end its segment")
                if seg_end <= end:            # the blank's whole length is written too
                    pos = seg_end
                break
            if (magic != MAGIC_V1 and magic != MAGIC_V2) or total < MIN_RECORD_SIZE or at + total > size:
                raise ReplicaDamaged(f"no record at CommitLog offset {pos} (size {total}, magic {magic:#x})")
            if pos + total > end:
                break
            last = at
            pos += total
        if last >= 0:
            self.last_store_ts = read_i64(buf, last + store_timestamp_position(read_i32(buf, last + _SYSFLAG_POS)))
        return pos, pos == seg_end and pos <= end
