"""Pulls in the reader process: `BatchStoreReader` is `core.read_path.StoreReader` (the same
statuses, tag filter and RocketMQ batch limits, over the read-only views) with a collect step
that does not copy records one by one. It walks the consume-queue entries once, applying
the tag filter and `StoreReader._batch_full`'s limits, and notes runs of chosen records that
lie back to back in the CommitLog (a queue's records usually do); each run is then copied out
of the mapping with one slice. A pull of 100 messages thus costs a handful of copies, and the
"raw" format sends those copies as they are.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from core.codec import decode_message, read_i32
from core.consume_queue import BLANK_SIZE, ENTRY
from core.read_path import MAX_PULL_MSG_SIZE, StoreReader
from core.status import GetMessageResult, GetMessageStatus
from core.subscription import subscription_codes

S = GetMessageStatus


@dataclass(slots=True)
class PullBatch(GetMessageResult):
    """A pull's answer whose records are `chunks`: runs of whole stored records, in queue order."""
    chunks: list = field(default_factory=list)
    count: int = 0

    @property
    def message_count(self) -> int:
        return self.count

    @property
    def messages(self) -> list:
        return [decode_message(rec) for rec in iter_records(self.chunks)]

    def raw(self) -> bytes:
        """The stored records concatenated, byte for byte."""
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)


def iter_records(chunks):
    """Each record of `chunks` as a memoryview (TOTALSIZE says where the next one starts)."""
    for chunk in chunks:
        mv = memoryview(chunk)
        pos, n = 0, len(chunk)
        while pos < n:
            size = read_i32(chunk, pos)
            yield mv[pos:pos + size]
            pos += size


class BatchStoreReader(StoreReader):
    """StoreReader whose pulls return a `PullBatch`; everything else is inherited."""

    def _collect(self, raw, offset, max_msgs, tag_filter, lo, hi) -> PullBatch:
        cfg = self.config
        codes = subscription_codes(tag_filter)
        commitlog = self.commitlog
        end = commitlog.get_max_offset()
        min_phy = commitlog.get_min_offset()
        seg = commitlog.file_size
        near = end - self.memory_window          # records at or past this are "in memory"
        mem_count = min(max_msgs, cfg.max_transfer_count_on_message_in_memory)
        mem_bytes = min(MAX_PULL_MSG_SIZE, cfg.max_transfer_bytes_on_message_in_memory)
        disk_count = min(max_msgs, cfg.max_transfer_count_on_message_in_disk)
        disk_bytes = min(MAX_PULL_MSG_SIZE, cfg.max_transfer_bytes_on_message_in_disk)
        runs = []
        run_start = run_stop = -1
        run_n = count = total = scanned = 0
        removing = False
        for phys, size, tags in ENTRY.iter_unpack(raw):
            if count:                                # StoreReader._batch_full, inlined
                if phys >= near:
                    if count >= mem_count or total + size > mem_bytes:
                        break
                elif count >= disk_count or total + size > disk_bytes:
                    break
            scanned += 1
            if size == BLANK_SIZE or (codes is not None and tags not in codes):
                continue
            if phys >= min_phy and size > 0 and phys + size > end:
                scanned -= 1                         # not readable here yet: the next pull
                break                                # starts at it (never skip a live record)
            if size <= 0 or phys < min_phy or phys % seg + size > seg:
                removing = True                      # not readable any more
                continue
            if phys == run_stop:
                run_stop += size
                run_n += 1
            else:
                if run_n:
                    runs.append((run_start, run_stop, run_n))
                run_start, run_stop, run_n = phys, phys + size, 1
            count += 1
            total += size
        if run_n:
            runs.append((run_start, run_stop, run_n))
        chunks, lost = _copy_runs(commitlog.queue, runs)
        if lost:                                     # removed by retention meanwhile
            count -= lost
            removing = True
        status = S.FOUND if count else (S.MESSAGE_WAS_REMOVING if removing else S.NO_MATCHED_MESSAGE)
        return PullBatch(status, offset + scanned, lo, hi, chunks=chunks, count=count)


def _copy_runs(queue, runs) -> tuple[list, int]:
    """Copy each (start, stop, records) run out of the segments, holding each segment once;
    return the copies and how many records could not be read."""
    chunks, lost = [], 0
    mf = buf = None
    base = end = 0
    try:
        for start, stop, n in runs:
            if mf is None or not base <= start < end:
                if mf is not None:
                    mf.release()
                mf = queue.find_mapped_file_by_offset(start)
                buf = queue.hold(mf) if mf is not None else None
                if buf is None:
                    mf = None
                    lost += n
                    continue
                base, end = mf.file_from_offset, mf.file_from_offset + mf.read_position
            if stop > end:
                lost += n
                continue
            chunks.append(buf[start - base:stop - base])
    finally:
        if mf is not None:
            mf.release()
    return chunks, lost
