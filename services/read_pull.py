"""Pulls in the reader process: `BatchStoreReader` is `core.read_path.StoreReader` (the same
statuses, tag filter and RocketMQ batch limits, over the read-only views) with a collect step
that does not copy records one by one. It walks the consume-queue entries once, applying
the tag filter and RocketMQ's batch limits (count and bytes, in memory and on disk), and notes
runs of chosen records that lie back to back in the CommitLog (a queue's records usually do);
each run is then copied out of the mapping with one slice. A pull of 100 messages thus costs a
handful of copies, and the "raw" format sends those copies as they are.

The common pull (no tag filter, records in memory, back to back, readable, within the byte
limit) takes a fast path with no loop over messages in Python: it reads only the entries the
count limit allows, unpacks them with one struct call, checks the conditions above and finds
the runs on the unpacked tuples with C-level iteration, then copies the runs. When any
condition fails it falls back to the general walk, which answers identically.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import chain, compress, count
from operator import add, ne

from core.codec import read_i32
from core.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE
from core.decode import decode_message
from core.read_path import MAX_PULL_MSG_SIZE, StoreReader, out_of_range
from core.status import GetMessageResult, GetMessageStatus
from core.subscription import subscription_codes

S = GetMessageStatus
_ENTRIES: dict[int, struct.Struct] = {}       # k -> the struct of k consume-queue entries


def _entries_struct(k: int) -> struct.Struct:
    st = _ENTRIES.get(k)
    if st is None:
        st = _ENTRIES[k] = struct.Struct(">" + "qiq" * k)
    return st


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

    def get_message(self, group, topic, queue_id, offset, max_msgs, tag_filter=None):
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(S.NO_MATCHED_LOGIC_QUEUE, 0)
        return self.pull(cq, offset, max_msgs, tag_filter)

    def pull(self, cq, offset: int, max_msgs: int, tag_filter=None, views: bool = False) -> GetMessageResult:
        """`get_message` on a consume queue the caller already found. With `views`, the chunks
        of the fast path are memoryviews of the mapped segments instead of copies: for a reply
        that is sent (and copied by ZeroMQ) at once and then dropped, never kept."""
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        outside = out_of_range(offset, lo, hi)
        if outside is not None:
            return outside
        max_msgs = max(1, max_msgs)
        if subscription_codes(tag_filter) is None:
            found = self._plain_pull(cq, offset, max_msgs, lo, hi, views)
            if found is not None:
                return found
        scan_units = max(self.config.max_filter_message_size, max_msgs * UNIT_SIZE) // UNIT_SIZE
        raw = cq.get_entries(offset, scan_units)
        if raw is None:
            return GetMessageResult(S.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
        return self._collect(raw, offset, max_msgs, tag_filter, lo, hi)

    def _plain_pull(self, cq, offset, max_msgs, lo, hi, views=False) -> PullBatch | None:
        """The fast path of the module docstring: the answer when the next `k` entries (k =
        the in-memory count limit, or fewer at the end of the queue's segment) are all whole,
        readable records in memory that fit the byte limit; None otherwise. Runs of back to
        back records are found with C-level iteration (`map`, `compress`)."""
        cfg = self.config
        raw = cq.get_entries(offset, min(max_msgs, cfg.max_transfer_count_on_message_in_memory))
        if not raw:
            return None
        k = len(raw) // UNIT_SIZE
        values = _entries_struct(k).unpack(raw)
        phys, sizes = values[0::3], values[1::3]
        ends = list(map(add, phys, sizes))
        commitlog = self.commitlog
        end = commitlog.get_max_offset()
        low = min(phys)
        if (min(sizes) <= 0 or BLANK_SIZE in sizes or max(ends) > end
                or sum(sizes) > min(MAX_PULL_MSG_SIZE, cfg.max_transfer_bytes_on_message_in_memory)
                or low < end - self.memory_window or low < commitlog.get_min_offset()):
            return None
        seg = commitlog.file_size
        runs = []
        a = 0
        for b in chain(compress(count(1), map(ne, phys[1:], ends)), (k,)):
            start, stop = phys[a], ends[b - 1]
            if start % seg + stop - start > seg:
                return None                          # a record across a segment end
            runs.append((start, stop, b - a))
            a = b
        chunks, lost = _copy_runs(commitlog.queue, runs, views)
        if lost:
            return None
        return PullBatch(S.FOUND, offset + k, lo, hi, chunks=chunks, count=k)

    def _collect(self, raw, offset, max_msgs, tag_filter, lo, hi) -> PullBatch:
        codes = subscription_codes(tag_filter)
        commitlog = self.commitlog
        end = commitlog.get_max_offset()
        min_phy = commitlog.get_min_offset()
        seg = commitlog.file_size
        near, mem_count, mem_bytes, disk_count, disk_bytes = self._batch_limits(max_msgs)
        runs = []
        run_start = run_stop = -1
        run_n = count = total = scanned = 0
        removing = False
        for phys, size, tags in ENTRY.iter_unpack(raw):
            if count:                                # the batch limits, inlined
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


def _copy_runs(queue, runs, views: bool = False) -> tuple[list, int]:
    """Copy each (start, stop, records) run out of the segments, holding each segment once;
    return the copies and how many records could not be read. With `views`, memoryviews of
    the mapping instead of copies (a segment unmapped meanwhile stays mapped until they are
    released: core.fileops.Mapping.close)."""
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
            chunks.append(memoryview(buf)[start - base:stop - base] if views else buf[start - base:stop - base])
    finally:
        if mf is not None:
            mf.release()
    return chunks, lost
