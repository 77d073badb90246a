"""The load-time damage check of consume-queue entries (integrity, DESIGN.md section 7).

`damage_restart` looks at the entries of a queue's last three files, as `ConsumeQueue.recover`
reads them: an entry with a negative offset or size, one whose record would end past the log's
end, one that starts before the previous entry's record ends (a queue's records lie in log
order), or, given the CommitLog, one of the last TAIL_ENTRIES whose record's header is not the
entry's. Recovery then writes the queue again from the CommitLog from the end of the last right
entry. Older entries are held to their records when a pull reads them (`core.read.rederive`),
so a start reads a few records of each queue, not the whole log.

`RecordHeaders` holds entries to their records' headers: an entry is right when the record at
its physical offset has TOTALSIZE its size, QUEUEID the queue's, QUEUEOFFSET its number and
PHYSICALOFFSET its offset. Without the headers, an entry damaged without breaking the queue's
order (a small offset or size flip) was left as it was, and one that made its record end
further on put recovery's restart past the entry itself, which then stayed damaged and its
intact record was never served again (issue 33's soak: 3 of its consume-queue flips). Entries
below the log's first segment are taken as right (their segments expired).
"""
from __future__ import annotations

import logging
import struct

import numpy as np

from core.log.cq_entry import BLANK_SIZE, ENTRY, ENTRY_DTYPE, UNIT_SIZE
from core.record.layout import PHYS_OFFSET_POS, QUEUE_OFFSET_POS, SYSFLAG_POS, offsets

_QUEUE_ID_POS = offsets()["queue_id"]
_HEAD = SYSFLAG_POS                 # the header bytes read: up to SYSFLAG
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
TAIL_ENTRIES = 256                   # entries checked at the end of a queue (recovery, headers)
FEW_ENTRIES = 256                    # up to this many, `damage_restart` checks one at a time
log = logging.getLogger(__name__)


def damage_restart(topic: str, queue_id: int, data: bytes, log_limit: int,
                   trimmed: bool = False, commitlog=None, first: int = 0) -> int | None:
    """The physical offset to dispatch again from when the packed entries `data` (a queue's
    last files, joined, zeros past the last entry; `trimmed` when it ends at its last written
    entry already; `first` the queue offset of its first entry) hold a damaged one; None when
    none is. With `commitlog`, the last TAIL_ENTRIES entries (those a crash can have torn) are
    held to their records' headers too; older ones are held to their records when a pull reads
    them (`core.read.rederive`), so that a start reads a few records of each queue, not the
    whole log. A damaged first entry dispatches the log again from its start: the offset it
    names cannot be trusted."""
    if not trimmed:
        data = data.rstrip(b"\0")
    data += bytes(-len(data) % UNIT_SIZE)
    bad = (_first_damaged_each if len(data) <= FEW_ENTRIES * UNIT_SIZE
           else _first_damaged_numpy)(data, log_limit)
    if commitlog is not None:
        upto = bad[0] if bad is not None else len(data) // UNIT_SIZE
        unlike = _first_unlike_its_record(data, max(0, upto - TAIL_ENTRIES), upto, commitlog,
                                          queue_id, first)
        bad = unlike if unlike is not None else bad
    if bad is None:
        return None
    k, before = bad
    phys, size, _ = ENTRY.unpack_from(data, k * UNIT_SIZE)
    log.warning("consume queue %s-%d: entry %d of its last files (offset %d, size %d) cannot "
                "be right; the queue is written again from the CommitLog from %d", topic, queue_id,
                k, phys, size, before)
    return before


def _first_damaged_each(data: bytes, log_limit: int) -> tuple[int, int] | None:
    """(the first damaged entry of `data`, the largest record end before it), or None; one
    entry at a time: most queues have a handful, where numpy's calls cost 35 us a queue (0.7 s
    of a 10,000-queue start)."""
    before = 0
    for k, (phys, size, _) in enumerate(ENTRY.iter_unpack(data)):
        if phys < 0 or size <= 0:
            return k, before
        if size != BLANK_SIZE:
            if phys + size > log_limit or phys < before:
                return k, before
            before = max(before, phys + size)
    return None


def _first_damaged_numpy(data: bytes, log_limit: int) -> tuple[int, int] | None:
    """`_first_damaged_each` for many entries, with numpy."""
    entries = np.frombuffer(data, ENTRY_DTYPE)
    phys, size = entries["phys"].astype(np.int64), entries["size"].astype(np.int64)
    real = size != BLANK_SIZE
    ends = np.where(real, phys + size, 0)
    before = np.maximum.accumulate(np.concatenate(([0], ends[:-1])))
    bad = (phys < 0) | (size <= 0) | (real & ((ends > log_limit) | (phys < before)))
    if not bad.any():
        return None
    k = int(np.argmax(bad))
    return k, int(before[k])


def _first_unlike_its_record(data: bytes, lo: int, hi: int, commitlog, queue_id: int,
                             first: int) -> tuple[int, int] | None:
    """(the first entry of [lo, hi) whose record's header is not the entry's, the largest
    record end before it), or None."""
    headers = RecordHeaders(commitlog)
    try:
        for k, (phys, size, _) in enumerate(ENTRY.iter_unpack(data[lo * UNIT_SIZE:hi * UNIT_SIZE]), lo):
            if size != BLANK_SIZE and not headers.matches(phys, size, queue_id, first + k):
                break
        else:
            return None
    finally:
        headers.close()
    head = np.frombuffer(data, ENTRY_DTYPE, k)
    real = head["size"] != BLANK_SIZE
    ends = head["phys"][real].astype(np.int64) + head["size"][real]
    return k, int(ends.max()) if len(ends) else 0


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
