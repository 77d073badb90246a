"""Consume-queue entries checked at load against what the CommitLog can hold (integrity,
DESIGN.md section 7): `damaged_queues` reads the entries of each queue's last three files (the
ones its recovery reads) and finds the first that cannot be right: a negative offset or size,
a record past the end of the log, or one that starts before the previous entry's record ends
(a queue's records lie in log order). Recovery cuts a queue at such an entry as at its end;
the records of the entries after it are intact in the CommitLog, so recovery dispatches the log
again from the record before the damaged entry (`core.log.recovery`), which writes the queue anew
from the CommitLog instead of losing the rest of it.
"""
from __future__ import annotations

import logging

import numpy as np

from core.log.consume_queue import BLANK_SIZE, ENTRY_DTYPE

log = logging.getLogger(__name__)


def damaged_queues(cq_store, log_limit: int) -> dict:
    """{(topic, queue id): the physical offset to dispatch again from} for each queue with a
    damaged entry among those its recovery reads."""
    out = {}
    for key, cq in list(cq_store.queues.items()):
        entries = _tail_entries(cq)
        if not len(entries):
            continue
        phys, size = entries["phys"].astype(np.int64), entries["size"].astype(np.int64)
        real = size != BLANK_SIZE
        ends = np.where(real, phys + size, 0)
        before = np.maximum.accumulate(np.concatenate(([0], ends[:-1])))
        bad = (phys < 0) | (size <= 0) | (real & ((ends > log_limit) | (phys < before)))
        if not bad.any():
            continue
        k = int(np.argmax(bad))
        restart = int(before[k]) if k else max(0, int(phys[0]) if phys[0] >= 0 else 0)
        log.warning("consume queue %s-%d: entry %d of its last files (offset %d, size %d) cannot "
                    "be right; the queue is written again from the CommitLog from %d", key[0], key[1],
                    k, int(phys[k]), int(size[k]), restart)
        out[key] = restart
    return out


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
