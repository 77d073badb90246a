"""`ReplicaLog`: a slave's CommitLog as its master's chunks arrive (DESIGN.md section 10): the
job the `ha` process hosts on a slave (services/ha_slave.py adds the socket and the
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

from core.codec import (
    BLANK_SIZE, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, read_i32, read_i64, store_timestamp_position,
)

_SYSFLAG_POS = 36
_HEAD = 80                  # enough for SYSFLAG and STORETIMESTAMP with IPv6 hosts


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
        queue, size = self.commitlog.queue, self.file_size
        pos, end = self.boundary, self.written
        while pos + BLANK_SIZE <= end:
            head = queue.read(pos, min(_HEAD, end - pos))
            if head is None:
                break
            total, magic = read_i32(head, 0), read_i32(head, 4)
            if magic == MAGIC_BLANK:
                seg_end = pos - pos % size + size
                if total != seg_end - pos:
                    raise ReplicaDamaged(f"a blank record at {pos} of {total} bytes does not end its segment")
                if seg_end > end:
                    break
                pos = seg_end
                continue
            if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE or pos % size + total > size:
                raise ReplicaDamaged(f"no record at CommitLog offset {pos} (size {total}, magic {magic:#x})")
            if pos + total > end:
                break
            if len(head) >= _HEAD or len(head) >= store_timestamp_position(read_i32(head, _SYSFLAG_POS)) + 8:
                self.last_store_ts = read_i64(head, store_timestamp_position(read_i32(head, _SYSFLAG_POS)))
            pos += total
        self.boundary = pos
