"""A consume-queue entry re-derived from the CommitLog when a pull finds it wrong (integrity,
DESIGN.md section 7).

A pull that finds the record an entry names damaged, or not the entry's (another size,
offset, queue or queue offset), does not know yet which of the two is wrong. `find_record`
looks for the queue's record where it must lie in the CommitLog: after the record of the
queue's entry before (a queue's records are in log order) and before the record of the entry
after, walking the records there one by one with every check of
`core.record.codec.check_record`, CRC included, and stepping over a damaged one to the next
record that lies where it says it does (`core.log.quarantine.next_record`). A record of the
entry's topic, queue id and queue offset found there means the entry was the damaged part:
the pull serves that record, and the queue's writer writes the entry again
(`ConsumeQueue.repair_entry`). When no such record is found (the record itself is damaged),
the pull answers MESSAGE_DAMAGED as before.

Between two entries of one queue lie the records every other queue got meanwhile: the walk
stops after `MAX_WALK` bytes, and the entry is then left to `mqstore check --fix`.
"""
from __future__ import annotations

from core.log.consume_queue import BLANK_SIZE, ENTRY
from core.log.quarantine import next_record
from core.record.codec import DispatchRequest, check_record

MAX_WALK = 64 << 20            # CommitLog bytes walked for one entry at most
NEIGHBOURS = 16                # entries looked at on each side for a real one


def find_record(commitlog, cq, index: int, check_crc, delay_levels: tuple) -> DispatchRequest | None:
    """The intact record of entry `index` of `cq` in the CommitLog, as the dispatcher reads
    it (its offset, size and tag code), or None when none is found."""
    lo = _after_entry_before(commitlog, cq, index)
    hi = min(_entry_after(commitlog, cq, index), lo + MAX_WALK)
    queue = commitlog.queue
    at = lo
    while at is not None and at < hi:
        mf = queue.find_mapped_file_by_offset(at)
        buf = queue.hold(mf) if mf is not None else None
        if buf is None:
            return None
        try:
            found, at, damaged = _walk(buf, mf, at, hi, cq, index, check_crc, delay_levels)
        finally:
            mf.release()
        if found is not None:
            return found
        if damaged:                          # a damaged record, or a blank: the next intact one
            at = next_record(queue, commitlog.file_size, at, check_crc)
    return None


def _after_entry_before(commitlog, cq, index: int) -> int:
    """Where the walk starts: the end of the record of the nearest real entry before `index`
    (the log's start when there is none)."""
    low = max(cq.get_min_offset_in_queue(), index - NEIGHBOURS)
    start = max(commitlog.get_min_offset(), 0)
    raw = cq.get_entries(low, index - low) if low < index else None
    for phys, size, _ in reversed(list(ENTRY.iter_unpack(raw or b""))):
        if 0 < size != BLANK_SIZE and start <= phys < commitlog.get_max_offset():
            return phys + size
    return start


def _entry_after(commitlog, cq, index: int) -> int:
    """Where the walk ends: the record of the nearest real entry after `index` (the log's
    readable end when there is none)."""
    end = commitlog.get_max_offset()
    for phys, size, _ in ENTRY.iter_unpack(cq.get_entries(index + 1, NEIGHBOURS) or b""):
        if 0 < size != BLANK_SIZE and 0 <= phys < end:
            return phys
    return end


def _walk(buf, mf, at: int, hi: int, cq, index: int, check_crc, delay_levels) -> tuple:
    """Walk the records of segment `mf` (mapped as `buf`) from `at`, below `hi`: (the record
    found or None, where the walk stopped, whether it stopped at damage or a blank). A walk
    that reaches the segment's end goes on at the next segment's start; one that reaches the
    log's end stops (None)."""
    base, readable = mf.file_from_offset, mf.read_position
    pos, stop = at - base, min(readable, hi - base)
    while pos < stop:
        req, size = check_record(buf, pos, readable, check_crc, delay_levels)
        if req.__class__ is not DispatchRequest or req.commit_log_offset != base + pos:
            return None, base + pos, True
        if req.topic == cq.topic and req.queue_id == cq.queue_id and req.consume_queue_offset == index:
            return req, None, False
        pos += size
    if pos >= mf.file_size:
        return None, base + mf.file_size, False
    return None, None if pos >= readable else base + pos, False
