"""The reput logic as a function over a CommitLog range: read records from a physical offset
up to a limit (never past the confirm offset), and hand the valid ones to the consume queues
and the index. Blanks jump to the next segment; the first invalid record stops the run.

Records are parsed by `core.record_scan` and applied in batches of up to `BATCH_RECORDS`:
each queue's consecutive entries are written with one copy and the batch's index keys are
hashed together, so the cost per record is a few microseconds of Python, not one call chain
per record. A batch is applied before the run looks past it, so a stop (an invalid record,
the limit) leaves everything before it dispatched, as record-by-record dispatch would.
"""
from __future__ import annotations

from core.consume_queue import ENTRY
from core.message import (
    KEY_SEPARATOR, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_NOT,
    SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
)
from core.record_scan import ScanEnd, scan_segment

BATCH_RECORDS = 1024
_CQ_TYPES = (SYSFLAG_TRANSACTION_NOT, SYSFLAG_TRANSACTION_COMMIT)
_NOT_INDEXED = (SYSFLAG_TRANSACTION_ROLLBACK, SYSFLAG_TRANSACTION_PREPARED)


class DispatchStop:
    DONE = "done"          # reached the limit
    PARTIAL = "partial"    # the next record is not wholly below the limit yet
    INVALID = "invalid"    # an invalid record: nothing valid follows here


class Dispatcher:
    """Builds consume queues and the index from CommitLog records.

    `on_arrive(topic, queue_id, next_queue_offset)` is called once per queue and batch after
    its entries are written (long-poll wakeups)."""

    def __init__(self, commitlog, cq_store, index_service=None, on_arrive=None):
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.on_arrive = on_arrive
        self.last_store_timestamp = 0

    def run(self, from_offset: int, limit: int, check_crc: bool = False, progress=None,
            apply: bool = True):
        """Dispatch every valid record in [from_offset, limit); return (offset reached, DispatchStop).

        With apply=False it only walks and checks the records (finding the end of the log)."""
        queue = self.commitlog.queue
        offset = from_offset
        while offset < limit:
            mf = queue.find_mapped_file_by_offset(offset)
            if mf is None:
                return offset, DispatchStop.INVALID
            buf = queue.hold(mf)
            if buf is None:
                return offset, DispatchStop.INVALID
            base = mf.file_from_offset
            try:
                pos = offset - base
                end = min(mf.read_position, limit - base)
                while True:
                    batch: list = []
                    pos, why = scan_segment(buf, pos, end, base, check_crc, batch, BATCH_RECORDS)
                    if apply and batch:
                        self.apply(batch)
                    if why is not ScanEnd.LIMIT or pos >= end:
                        break
            finally:
                mf.release()
            if why is ScanEnd.BLANK:
                pos = mf.file_size
            elif why is ScanEnd.END:
                growing = end < mf.read_position or mf.read_position < mf.file_size
                return base + pos, (DispatchStop.PARTIAL if growing else DispatchStop.INVALID)
            elif why is not ScanEnd.LIMIT:
                return base + pos, DispatchStop.INVALID
            offset = base + pos
            if progress is not None:
                progress(offset)
            if pos < mf.file_size:
                break
        return offset, (DispatchStop.DONE if offset >= limit else DispatchStop.PARTIAL)

    def apply(self, batch: list) -> None:
        """Build the consume queue entries and index keys of `batch` (`core.record_scan` tuples,
        in log order)."""
        runs: dict = {}           # (topic, queue_id) -> [first offset, next offset, entries, end]
        keys: list = []
        offsets: list = []
        stamps: list = []
        indexing = self.index_service is not None
        pack = ENTRY.pack
        for phys, size, topic, queue_id, queue_offset, tags, ts, keys_, uniq, sys_flag in batch:
            kind = sys_flag & SYSFLAG_TRANSACTION_MASK
            if kind in _CQ_TYPES:
                key = (topic, queue_id)
                run = runs.get(key)
                if run is None or run[1] != queue_offset:
                    if run is not None:
                        self._put_run(key, run)
                    run = runs[key] = [queue_offset, queue_offset, [], 0]
                run[1] += 1
                run[2].append(pack(phys, size, tags))
                run[3] = phys + size
            if indexing and (uniq or keys_) and kind not in _NOT_INDEXED:
                if uniq:
                    keys.append(f"{topic}#{uniq}")
                    offsets.append(phys)
                    stamps.append(ts)
                if keys_:
                    for k in keys_.split(KEY_SEPARATOR):
                        if k:
                            keys.append(f"{topic}#{k}")
                            offsets.append(phys)
                            stamps.append(ts)
        for key, run in runs.items():
            self._put_run(key, run)
        if keys:
            self.index_service.build_batch(keys, offsets, stamps)
        self.last_store_timestamp = batch[-1][6]

    def _put_run(self, key: tuple, run: list) -> None:
        topic, queue_id = key
        self.cq_store.put_entries(topic, queue_id, run[0], b"".join(run[2]), run[3])
        if self.on_arrive is not None:
            self.on_arrive(topic, queue_id, run[1])
