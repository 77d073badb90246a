"""The reput logic as a function over a CommitLog range: read records from a physical offset
up to a limit (never past the confirm offset), and hand the valid ones to the consume queues
and the index. Blanks jump to the next segment; the first invalid record stops the run.

Records are parsed by `core.record.scan` into a `ScanBatch` (numpy columns for a producer's
runs of equal records) and applied in batches of up to `BATCH_RECORDS`: the queued records
are sorted stably by topic and queue (numpy), each queue's consecutive entries are built as
one structured array and written with one copy, and the index gets the batch's keys at once
(for runs of one topic with only UNIQ_KEYs, as a matrix of bytes, without a string per key),
so a record costs well under a microsecond. Batches of fewer than `FEW_RECORDS` records taken
one by one (the live reput's usual case) are applied in plain Python instead, where numpy's
per-call cost would dominate; both write the same bytes. A batch is applied before the run
looks past it, so a stop (an invalid record, the limit) leaves everything before it
dispatched, as record-by-record dispatch would.
"""
from __future__ import annotations

import logging

import numpy as np

from core.record.codec import DELAY_LEVEL_MS, MIN_RECORD_SIZE
from core.log.consume_queue import ENTRY, ENTRY_DTYPE, UNIT_SIZE
from core.log.index_service import build_key
from core.record.message import (
    KEY_SEPARATOR, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_NOT, SYSFLAG_TRANSACTION_ROLLBACK,
    SYSFLAG_TRANSACTION_UNQUEUED,
)
from core.record.scan import ScanEnd, scan_segment
from core.record.stop import Stop
from core.record.scan_batch import Rows, ScanBatch

BATCH_RECORDS = 4096
# How often a reput (the embedded thread and the reput process alike) looks for new records:
# every millisecond, as RocketMQ's; once nothing has been dispatched for IDLE_AFTER_S, every
# IDLE_INTERVAL_MS, so that an idle store does not wake 1,000 times a second.
IDLE_AFTER_S = 1.0
IDLE_INTERVAL_MS = 5
FEW_RECORDS = 32                  # smaller batches of `Rows` are applied without numpy
log = logging.getLogger(__name__)


def _carry_on() -> None:
    """The default `give_way`: nothing."""


DispatchStop = Stop        # why dispatch returned: DONE, PARTIAL or INVALID


class Dispatcher:
    """Builds consume queues and the index from CommitLog records.

    `on_arrive(topic, queue_id, next_queue_offset)` is called once per queue and batch after
    its entries are written (long-poll wakeups). `give_way()`, when given, is called between
    the steps of each batch (after the scan, between consume queues and index): the reput
    process passes `os.sched_yield` (services/reput.py says why). `short_steps=(bytes,
    records)`: a run over at most `bytes` of the log (a live store's few new records) is
    taken `records` at a time, so that it gives way every few records."""

    def __init__(self, commitlog, cq_store, index_service=None, on_arrive=None, give_way=None,
                 short_steps: tuple[int, int] | None = None, delay_levels: tuple = DELAY_LEVEL_MS):
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.on_arrive = on_arrive
        self.give_way = give_way or _carry_on
        self.short_steps = short_steps
        self.delay_levels = delay_levels     # the tag codes of delay records (message_delay_level)
        self.last_store_timestamp = 0

    def run(self, from_offset: int, limit: int, check_crc: bool = False, progress=None,
            apply: bool = True):
        """Dispatch every valid record in [from_offset, limit); return (offset reached, DispatchStop).

        With apply=False it only walks and checks the records (finding the end of the log)."""
        queue = self.commitlog.queue
        offset = from_offset
        step = BATCH_RECORDS
        if self.short_steps is not None and limit - from_offset <= self.short_steps[0]:
            step = self.short_steps[1]
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
                    pos, why = scan_segment(buf, pos, end, base, check_crc, batch, step, self.delay_levels)
                    if apply and batch:
                        self.give_way()
                        self.apply(batch)
                    if why is not ScanEnd.LIMIT or pos >= end:
                        break
                    if progress is not None:
                        progress(base + pos)
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
        if len(batch.parts) == 1 and batch.parts[0].__class__ is Rows \
                and len(batch) < FEW_RECORDS:
            self._apply_few(batch.parts[0])
            return
        kinds = batch.column("sys_flag") & SYSFLAG_TRANSACTION_MASK
        plain = kinds == SYSFLAG_TRANSACTION_NOT
        skipped = None
        if plain.all():                                  # all plain messages (the usual)
            self._put_queues(batch, None)
        else:
            queued = np.flatnonzero(~np.isin(kinds, SYSFLAG_TRANSACTION_UNQUEUED))
            if len(queued):
                self._put_queues(batch, queued)
            skipped = kinds == SYSFLAG_TRANSACTION_ROLLBACK
        store_ts = batch.column("store_ts")
        if self.index_service is not None:
            self.give_way()
            self._index(batch, store_ts, skipped)
        self.last_store_timestamp = int(store_ts[-1])

    def _put_queues(self, batch: ScanBatch, queued) -> None:
        """Write each queue's run of consecutive queue offsets as one block of entries: the
        queued records (`queued`: their rows, None for all) are sorted (stably, so each queue
        keeps log order) by topic and queue, unless they are one run already."""
        topics, topic_ids = batch.topic_ids()
        queue_ids, offsets = batch.column("queue_id"), batch.column("queue_offset")
        phys, size, tags = batch.column("phys"), batch.column("size"), batch.column("tags")
        key = queue_ids & 0xFFFFFFFF
        if topic_ids is not None:
            key |= topic_ids << 32
        if queued is None and (key == key[0]).all() and (offsets[1:] == offsets[:-1] + 1).all():
            order, cuts = None, []                       # one queue's run (no sort)
            entries = np.empty(len(phys), ENTRY_DTYPE)
            entries["phys"], entries["size"], entries["tags"] = phys, size, tags
        else:
            order = np.argsort(key, kind="stable") if queued is None \
                else queued[np.argsort(key[queued], kind="stable")]
            key, run_offsets = key[order], offsets[order]
            cuts = (np.flatnonzero((key[1:] != key[:-1])
                                   | (run_offsets[1:] != run_offsets[:-1] + 1)) + 1).tolist()
            entries = np.empty(len(order), ENTRY_DTYPE)          # built in queue order
            entries["phys"], entries["size"] = phys[order], size[order]
            entries["tags"] = tags[order]
        packed = entries.tobytes()
        lo = 0
        for hi in (*cuts, len(packed) // UNIT_SIZE):
            first, last = (lo, hi - 1) if order is None else (int(order[lo]), int(order[hi - 1]))
            topic = topics[0] if topic_ids is None else topics[topic_ids[first]]
            self._put_run(topic, int(queue_ids[first]), int(offsets[first]),
                          packed[lo * UNIT_SIZE:hi * UNIT_SIZE], int(offsets[last]),
                          int(phys[last] + size[last]))
            lo = hi

    def _index(self, batch: ScanBatch, store_ts, skipped) -> None:
        """Hand the batch's index keys to the index service (`skipped`: which records are
        rolled-back transactions, None when none is: RocketMQ indexes every other record,
        prepared ones too, though only plain and committed ones enter a consume queue). The common batch (runs of
        one topic whose records have a UNIQ_KEY and no KEYS) passes the UNIQ_KEYs as a
        matrix of bytes with the topic as a prefix, without building a string per key."""
        phys = batch.column("phys")
        found = batch.uniq_matrix() if skipped is None or not skipped.any() else None
        if found is not None:
            topic, units = found
            self.index_service.build_batch(units, phys, store_ts, prefix=topic + "#")
            return
        skips = [False] * len(phys) if skipped is None else skipped.tolist()
        self._index_each(*batch.strings(), phys.tolist(), store_ts.tolist(), skips)

    def _index_each(self, topics, keys_, uniqs, phys, store_ts, skips) -> None:
        """Index the records given as columns (lists), building each key as a string."""
        keys: list = []
        offsets: list = []
        stamps: list = []
        for topic, record_keys, uniq, offset, ts, skip in zip(topics, keys_, uniqs, phys, store_ts,
                                                               skips):
            if skip or not (uniq or record_keys):
                continue
            if uniq:
                keys.append(build_key(topic, uniq))
                offsets.append(offset)
                stamps.append(ts)
            if record_keys:
                for k in record_keys.split(KEY_SEPARATOR):
                    if k:
                        keys.append(build_key(topic, k))
                        offsets.append(offset)
                        stamps.append(ts)
        if keys:
            self.index_service.build_batch(keys, offsets, stamps)

    def _apply_few(self, rows: Rows) -> None:
        """`apply` for a batch of a few records taken one by one (the live reput's usual batch),
        in plain Python rather than numpy, whose per-call cost would dominate: each queue's
        records are written as blocks of consecutive queue offsets, in log order."""
        kinds = [flag & SYSFLAG_TRANSACTION_MASK for flag in rows.sys_flag]
        runs: dict = {}          # (topic, queue id) -> [first offset, entries, last offset, end]
        for topic, queue_id, queue_offset, phys, size, tags, kind in zip(
                rows.topic, rows.queue_id, rows.queue_offset, rows.phys, rows.size, rows.tags,
                kinds):
            if kind in SYSFLAG_TRANSACTION_UNQUEUED:
                continue
            run = runs.get((topic, queue_id))
            if run is not None and run[2] + 1 != queue_offset:
                self._put_run(topic, queue_id, run[0], b"".join(run[1]), run[2], run[3])
                run = None
            if run is None:
                runs[topic, queue_id] = [queue_offset, [ENTRY.pack(phys, size, tags)],
                                         queue_offset, phys + size]
            else:
                run[1].append(ENTRY.pack(phys, size, tags))
                run[2], run[3] = queue_offset, phys + size
        for (topic, queue_id), run in runs.items():
            self._put_run(topic, queue_id, run[0], b"".join(run[1]), run[2], run[3])
        if self.index_service is not None:
            self.give_way()
            skips = [kind == SYSFLAG_TRANSACTION_ROLLBACK for kind in kinds]
            self._index_each(rows.topic, rows.keys, rows.uniq, rows.phys, rows.store_ts, skips)
        self.last_store_timestamp = rows.store_ts[-1]

    def _put_run(self, topic: str, queue_id: int, first: int, entries: bytes, last: int,
                 end: int) -> None:
        """Write one queue's packed entries from queue offset `first` to `last` (the log
        position past the last record: `end`), then say they arrived.

        A run whose first QUEUEOFFSET the log cannot hold is left out: every entry below it
        stands for a record of at least MIN_RECORD_SIZE bytes before this one. Such an offset is
        damaged (QUEUEOFFSET is outside the body CRC), and the consume queue would fill blanks
        up to it: one flipped bit asked for 2^28 of them, 5 GB. The queue goes on at its next
        good record, with a blank where this one stood."""
        phys = ENTRY.unpack_from(entries)[0]
        if first * MIN_RECORD_SIZE > phys:
            log.error("record at %d: QUEUEOFFSET %d of %s-%d is more than the log can hold "
                      "before it; the header is damaged, the record is left out of its queue",
                      phys, first, topic, queue_id)
            return
        self.cq_store.put_entries(topic, queue_id, first, entries, end)
        if self.on_arrive is not None:
            self.on_arrive(topic, queue_id, last + 1)
