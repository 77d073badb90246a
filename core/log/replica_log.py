"""`ReplicaLog`: a slave's CommitLog as its master's chunks arrive (DESIGN.md section 10): the
job the `ha` process hosts on a slave (services/ha/slave.py adds the socket and the
control-block words).

`apply(offset, data)` writes a chunk through `CommitLog.append_replicated` (into segments the
allocator made; the blank records at segment ends are the master's own bytes) and then walks
the records the chunk completed (`core.record.frames.walk_frames`: the TOTALSIZE and MAGICCODE
of each, the SYSFLAG and STORETIMESTAMP of the last): `written` is where the bytes end (what
the slave acknowledges), `boundary` the end of the last whole record (what the slave publishes
as WROTE, so that its flusher, reput and reader only ever see whole records, as on a master),
`last_store_ts` the store timestamp of the last whole record. A chunk may end inside a record: its rest comes with the
next chunk. A frame that is not a record (a size below the smallest record, a magic code that
is neither a record's nor a blank's) raises `ReplicaDamaged`: the slave stops following.
"""
from __future__ import annotations

from core.record.codec import BLANK_SIZE, read_i32, read_i64, store_timestamp_position
from core.record.frames import BAD, BLANK, walk_frames

_SYSFLAG_POS = 36


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
        """(where the walk stopped, whether it reached the segment's end to go on); the store
        timestamp of the last whole record only."""
        size = self.file_size
        seg_end = base + size
        at, last, why = walk_frames(buf, pos - base, min(end, seg_end) - base, size)
        pos = base + at
        if why == BLANK:
            total = read_i32(buf, at)
            if total != seg_end - pos:
                raise ReplicaDamaged(f"a blank record at {pos} of {total} bytes does not end its segment")
            if seg_end <= end:                # the blank's whole length is written too
                pos = seg_end
        elif why == BAD:
            raise ReplicaDamaged(f"no record at CommitLog offset {pos} (size {read_i32(buf, at)}, "
                                 f"magic {read_i32(buf, at + 4):#x})")
        if last >= 0:
            self.last_store_ts = read_i64(buf, last + store_timestamp_position(read_i32(buf, last + _SYSFLAG_POS)))
        return pos, pos == seg_end and pos <= end
