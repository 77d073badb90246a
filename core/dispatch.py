"""The reput logic as a function over a CommitLog range: read records from a physical offset
up to a limit (never past the confirm offset), and hand the valid ones to the consume queues
and the index. Blanks jump to the next segment; the first invalid record stops the run.

Records are parsed by `core.record_scan` and applied in batches of up to `BATCH_RECORDS`:
each queue's consecutive entries are written with one copy and the batch's index keys are
hashed together; the runs are found with numpy (a stable sort by topic and queue) and a
batch of one topic with only UNIQ_KEYs hands them over without a string per key, so the cost
per record is about a microsecond of Python. A batch is applied before the run looks past
it, so a stop (an invalid record, the limit) leaves everything before it dispatched, as
record-by-record dispatch would.
"""
from __future__ import annotations

import numpy as np

from core.consume_queue import ENTRY_DTYPE, UNIT_SIZE
from core.message import (
    KEY_SEPARATOR, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_NOT,
    SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
)
from core.record_scan import ScanBatch, ScanEnd, scan_segment

BATCH_RECORDS = 1024


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
                    batch = ScanBatch()
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

    def apply(self, batch: ScanBatch) -> None:
        """Build the consume queue entries and index keys of `batch` (in log order)."""
        flags = batch.sys_flag
        if flags.count(flags[0]) == len(flags) \
                and flags[0] & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_NOT:
            kinds = None                                     # all plain messages (the usual)
            if not self._put_one_run(batch):
                self._put_queues(batch, np.ones(len(flags), bool))
        else:
            kinds = np.array(flags, np.int64) & SYSFLAG_TRANSACTION_MASK
            queued = (kinds == SYSFLAG_TRANSACTION_NOT) | (kinds == SYSFLAG_TRANSACTION_COMMIT)
            if queued.any():
                self._put_queues(batch, queued)
        if self.index_service is not None:
            self._index(batch, kinds)
        self.last_store_timestamp = batch.store_ts[-1]

    def _put_one_run(self, batch: ScanBatch) -> bool:
        """`_put_queues` for a batch, all queued, that is one run of one queue (consecutive
        queue offsets), without sorting; False when it is not."""
        topics, queue_ids, queue_offsets = batch.topic, batch.queue_id, batch.queue_offset
        n, first = len(topics), queue_offsets[0]
        if topics.count(topics[0]) != n or queue_ids.count(queue_ids[0]) != n \
                or queue_offsets != list(range(first, first + n)):
            return False
        entries = np.empty(n, ENTRY_DTYPE)
        entries["phys"], entries["size"], entries["tags"] = batch.phys, batch.size, batch.tags
        self.cq_store.put_entries(topics[0], queue_ids[0], first, entries.tobytes(),
                                  batch.phys[-1] + batch.size[-1])
        if self.on_arrive is not None:
            self.on_arrive(topics[0], queue_ids[0], first + n)
        return True

    def _put_queues(self, batch: ScanBatch, queued) -> None:
        """Write each queue's run of consecutive queue offsets as one block of entries: the
        queued records are sorted (stably, so each queue keeps log order) by topic and queue."""
        topics, queue_ids, queue_offsets = batch.topic, batch.queue_id, batch.queue_offset
        key = np.array(queue_ids, np.int64) & 0xFFFFFFFF
        if topics.count(topics[0]) != len(topics):
            ids: dict = {}
            key |= np.array([ids.setdefault(t, len(ids)) for t in topics], np.int64) << 32
        rows = np.flatnonzero(queued)
        order = rows[np.argsort(key[rows], kind="stable")]
        key = key[order]
        offsets = np.array(queue_offsets, np.int64)[order]
        cuts = np.flatnonzero((key[1:] != key[:-1]) | (offsets[1:] != offsets[:-1] + 1)) + 1
        entries = np.empty(len(topics), ENTRY_DTYPE)
        entries["phys"], entries["size"], entries["tags"] = batch.phys, batch.size, batch.tags
        packed = entries[order].tobytes()
        order = order.tolist()
        phys, size = batch.phys, batch.size
        lo = 0
        for hi in (*cuts.tolist(), len(order)):
            first, last = order[lo], order[hi - 1]
            topic, queue_id = topics[first], queue_ids[first]
            self.cq_store.put_entries(topic, queue_id, queue_offsets[first],
                                      packed[lo * UNIT_SIZE:hi * UNIT_SIZE],
                                      phys[last] + size[last])
            if self.on_arrive is not None:
                self.on_arrive(topic, queue_id, queue_offsets[last] + 1)
            lo = hi

    def _index(self, batch: ScanBatch, kinds) -> None:
        """Hand the batch's index keys to the index service (`kinds`: the records' transaction
        types, None when every record is a plain message). The common batch (one topic,
        every record with a UNIQ_KEY and no KEYS, none a skipped transaction type) passes
        the UNIQ_KEYs with the topic as a prefix, without building a string per key."""
        topics, uniqs, keys_ = batch.topic, batch.uniq, batch.keys
        n = len(topics)
        skipped = [False] * n if kinds is None else (               # None: no transactions
            (kinds == SYSFLAG_TRANSACTION_ROLLBACK) | (kinds == SYSFLAG_TRANSACTION_PREPARED)).tolist()
        if keys_.count("") == n and "" not in uniqs and topics.count(topics[0]) == n \
                and True not in skipped:
            units = batch.uniq_units
            if sum(map(len, units)) == n and len({u.shape[1] for u in units}) == 1:
                uniqs = units[0] if len(units) == 1 else np.concatenate(units)
            self.index_service.build_batch(uniqs, batch.phys, batch.store_ts,
                                           prefix=topics[0] + "#")
            return
        keys: list = []
        offsets: list = []
        stamps: list = []
        for topic, uniq, record_keys, phys, ts, skip in zip(
                topics, uniqs, keys_, batch.phys, batch.store_ts, skipped):
            if skip or not (uniq or record_keys):
                continue
            if uniq:
                keys.append(f"{topic}#{uniq}")
                offsets.append(phys)
                stamps.append(ts)
            if record_keys:
                for k in record_keys.split(KEY_SEPARATOR):
                    if k:
                        keys.append(f"{topic}#{k}")
                        offsets.append(phys)
                        stamps.append(ts)
        if keys:
            self.index_service.build_batch(keys, offsets, stamps)
