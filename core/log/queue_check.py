"""Consume-queue entries checked at load against the CommitLog (integrity, DESIGN.md section
7): `damaged_queues` reads the entries of each queue's last three files (the ones its recovery
reads) and finds the first that cannot be right: a negative offset or size, a record past the
end of the log, or one whose record's header is not the entry's (TOTALSIZE its size, QUEUEID
the queue's, QUEUEOFFSET its number, PHYSICALOFFSET its offset; read for all entries of a
segment at once). Recovery cuts a queue at such an entry as at its end; the records of the
entries after it are intact in the CommitLog, so recovery dispatches the log again from the
end of the last entry before it that is right (`core.log.recovery`), which writes the queue
anew from the CommitLog instead of losing the rest of it.

An entry damaged without breaking the queue's order (a small offset or size flip) was left
until then, and the last good entry was taken as the one before the first out of order: a
flip that made an entry's record end further on put the restart past the entry itself, which
then stayed damaged and its intact record was never served again (issue 33's soak: 3 of its
consume-queue flips). Entries below the log's first segment are not checked (their segments
expired).
"""
from __future__ import annotations

import logging

import numpy as np

from core.log.consume_queue import BLANK_SIZE, ENTRY_DTYPE, UNIT_SIZE
from core.record.layout import PHYS_OFFSET_POS, QUEUE_OFFSET_POS, SYSFLAG_POS, offsets

log = logging.getLogger(__name__)
_QUEUE_ID_POS = offsets()["queue_id"]
_HEAD = SYSFLAG_POS                 # the header bytes read: up to SYSFLAG


def damaged_queues(cq_store, log_limit: int, commitlog=None) -> dict:
    """{(topic, queue id): the physical offset to dispatch again from} for each queue with a
    damaged entry among those its recovery reads; each entry's record header is compared when
    `commitlog` is given."""
    out = {}
    for key, cq in list(cq_store.queues.items()):
        entries = _tail_entries(cq)
        if not len(entries):
            continue
        phys, size = entries["phys"].astype(np.int64), entries["size"].astype(np.int64)
        real = size != BLANK_SIZE
        bad = (phys < 0) | (size <= 0) | (real & (phys + size > log_limit))
        if commitlog is not None:
            first = cq.queue.files[-min(3, len(cq.queue.files))].file_from_offset // UNIT_SIZE
            bad |= real & ~bad & ~_headers_match(commitlog, phys, size, cq.queue_id,
                                                 first + np.arange(len(phys)))
        if not bad.any():
            continue
        k = int(np.argmax(bad))
        good_ends = np.where(real[:k] & ~bad[:k], phys[:k] + size[:k], -1)
        restart = int(good_ends.max()) if k and good_ends.max() >= 0 else 0
        log.warning("consume queue %s-%d: entry %d of its last files (offset %d, size %d) cannot "
                    "be right; the queue is written again from the CommitLog from %d", key[0], key[1],
                    k, int(phys[k]), int(size[k]), restart)
        out[key] = restart
    return out


def _headers_match(commitlog, phys, size, queue_id: int, queue_offsets) -> np.ndarray:
    """Whether the record at each `phys` has TOTALSIZE `size`, QUEUEID `queue_id`, QUEUEOFFSET
    its queue offset and PHYSICALOFFSET `phys`; True below the log's first segment."""
    ok = phys < commitlog.queue.get_min_offset()
    file_size = commitlog.file_size
    for mf in commitlog.queue.files:
        lo = mf.file_from_offset
        sel = np.flatnonzero(~ok & (phys >= lo) & (phys < lo + file_size))
        if not len(sel):
            continue
        pos = phys[sel] - lo
        fits = pos + _HEAD <= file_size
        sel, pos = sel[fits], pos[fits]
        buf = commitlog.queue.hold(mf)
        if buf is None:
            continue
        try:
            head = np.frombuffer(buf, np.uint8)[pos[:, None] + np.arange(_HEAD)]
        finally:
            mf.release()
        def field(at: int, kind: str) -> np.ndarray:
            width = np.dtype(kind).itemsize
            return np.ascontiguousarray(head[:, at:at + width]).view(kind)[:, 0].astype(np.int64)
        ok[sel] = ((field(0, ">i4") == size[sel]) & (field(_QUEUE_ID_POS, ">i4") == queue_id)
                   & (field(QUEUE_OFFSET_POS, ">i8") == queue_offsets[sel])
                   & (field(PHYS_OFFSET_POS, ">i8") == phys[sel]))
    return ok


def _tail_entries(cq) -> np.ndarray:
    """The written entries of the queue's last three files, up to the last non-zero one, read
    with pread over the files' data only (consume-queue files are sparse: their holes are
    never read, and nothing is mapped; see core/log/consume_queue.py)."""
    parts = []
    for mf in cq.queue.files[-3:]:
        with cq.queue.fileops.open_reader(mf.path) as reader:
            ranges = reader.data_ranges(0, mf.file_size)
            end = ranges[-1][1] if ranges else 0
            parts.append(reader.read(0, end).ljust(mf.file_size if mf is not cq.queue.files[-1]
                                                   else end, b"\0"))
    data = b"".join(parts).rstrip(b"\0")
    data += bytes(-len(data) % ENTRY_DTYPE.itemsize)
    return np.frombuffer(data, ENTRY_DTYPE)
