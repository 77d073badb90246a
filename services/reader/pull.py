"""Pulls in the reader process: `BatchStoreReader` is `core.read.store_reader.StoreReader` (the same
statuses, tag filter and RocketMQ batch limits, over the read-only views, through the same
walk of the consume queue) whose answers keep the walk's runs of back-to-back records as they
were copied (one slice each) instead of splitting them record by record: a pull of 100
messages thus costs a handful of copies, and the "raw" format sends those copies as they are.

The common pull (no tag filter, records in memory, back to back, readable, within the byte
limit) takes a fast path with no loop over messages in Python: it reads only the entries the
count limit allows, unpacks them with one struct call, checks the conditions above and finds
the runs on the unpacked tuples with C-level iteration, then copies the runs. When any
condition fails it falls back to the general walk, which answers identically.

A repeated pull (`repeat`, docs/PROTOCOL.md) is answered as the pulls in a row it stands for,
merged into one answer. On the fast path the entries of several of those pulls are read and
checked at once (each pull's share against the byte limit) and their records copied as
longer runs; a pull the fast path cannot take runs on its own, through the general walk.

Every record copied is checked before it is served (`core.read.check.check_run`, one numpy step
and a CRC call per record for a run of one size): on the fast path a damaged record sends the
pull to the general walk, which serves the records before it and stops there; a pull that
starts at a damaged record answers MESSAGE_DAMAGED (core.read.store_reader).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from itertools import chain, compress, count
from operator import add, ne

import numpy as np

from core.record.codec import read_i32
from core.log.consume_queue import BLANK_SIZE, ENTRY_DTYPE, UNIT_SIZE
from core.record.decode import decode_message
from core.read.store_reader import MAX_PULL_MSG_SIZE, StoreReader, copy_runs, first_damaged, out_of_range
from core.status import GetMessageResult, GetMessageStatus
from core.read.subscription import subscription_codes

S = GetMessageStatus
_ENTRIES: dict[int, struct.Struct] = {}       # k -> the struct of k consume-queue entries
MAX_REPEAT_BYTES = 2 << 20                    # a repeated pull starts no pull past this much
ARRAYS_MIN_ENTRIES = 128                      # from this many entries on, plan with numpy


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
    log_leads_queues = False    # the log view's end is learnt and can trail the queues'

    def get_message(self, group, topic, queue_id, offset, max_msgs, tag_filter=None):
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return out_of_range(offset, 0, 0, self.correct)
        return self.pull(cq, offset, max_msgs, tag_filter)

    def pull(self, cq, offset: int, max_msgs: int, tag_filter=None, views: bool = False,
             repeat: int = 1) -> GetMessageResult:
        """`get_message` on a consume queue the caller already found. With `views`, the chunks
        of the fast path are memoryviews of the mapped segments instead of copies: for a reply
        that is sent (and copied by ZeroMQ) at once and then dropped, never kept. With
        `repeat` > 1, a pull that finds messages is followed by more (`_repeat`)."""
        result, pulls = self._pull_once(cq, offset, max_msgs, tag_filter, views, repeat)
        if pulls < repeat and result.status is S.FOUND:
            return self._repeat(cq, result, pulls, max_msgs, tag_filter, views, repeat)
        return result

    def _repeat(self, cq, first: PullBatch, pulls: int, max_msgs: int, tag_filter, views: bool,
                repeat: int) -> PullBatch:
        """`first` (the answer of `pulls` pulls) and further pulls up to `repeat` in all, each
        at the previous one's next_begin_offset and each under the transfer limits of a single
        pull, while each finds messages, the queue has more, all of them stay within `max_msgs`
        and the records so far are fewer than MAX_REPEAT_BYTES: one answer, as the client would
        have got by pulling again at each next_begin_offset (docs/PROTOCOL.md, `repeat`)."""
        chunks, total, last = list(first.chunks), first.count, first
        size = sum(map(len, chunks))
        while pulls < repeat:
            if total >= max_msgs or size >= MAX_REPEAT_BYTES or last.next_begin_offset >= last.max_offset:
                break
            more, n = self._pull_once(cq, last.next_begin_offset, max_msgs - total, tag_filter, views,
                                      repeat - pulls, size)
            if more.status is not S.FOUND:
                break
            chunks += more.chunks
            size += sum(map(len, more.chunks))
            total += more.count
            pulls += n
            last = more
        if last is first:
            return first
        return PullBatch(S.FOUND, last.next_begin_offset, last.min_offset, last.max_offset,
                         chunks=chunks, count=total)

    def _pull_once(self, cq, offset: int, max_msgs: int, tag_filter, views: bool,
                   repeat: int = 1, held: int = 0) -> tuple[GetMessageResult, int]:
        """One pull's answer, and 1; or, on the fast path with `repeat` > 1, the answer of
        several pulls in a row and how many (`_plain_pull`; `held`: the bytes of the pulls
        before them)."""
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        outside = out_of_range(offset, lo, hi, self.correct)
        if outside is not None:
            return outside, 1
        max_msgs = max(1, max_msgs)
        if subscription_codes(tag_filter) is None:
            found = self._plain_pull(cq, offset, max_msgs, lo, hi, views, repeat, held)
            if found is not None:
                return found
        scan_units = max(self.config.max_filter_message_size, max_msgs * UNIT_SIZE) // UNIT_SIZE
        raw = cq.get_entries(offset, scan_units)
        if raw is None:
            return self.found_null(cq, offset, lo, hi), 1
        return self._collect(raw, offset, max_msgs, tag_filter, lo, hi, cq), 1

    def _plain_pull(self, cq, offset, max_msgs, lo, hi, views=False, repeat=1,
                    held=0) -> tuple[PullBatch, int] | None:
        """The fast path of the module docstring: (answer, 1) when the next `k` entries (k =
        the in-memory count limit, or fewer at the end of the queue's segment) are all whole,
        readable records in memory that fit the byte limit; None otherwise. With `repeat` > 1
        it first tries the entries of that many pulls in a row at once (`_plain_entries`)."""
        per = min(max_msgs, self.config.max_transfer_count_on_message_in_memory)
        if repeat > 1 and max_msgs > per:
            found = self._plain_entries(cq, offset, min(max_msgs, per * repeat), per, lo, hi, views, held)
            if found is not None:
                return found
        return self._plain_entries(cq, offset, per, per, lo, hi, views)

    def _plain_entries(self, cq, offset, want, per, lo, hi, views, held=0) -> tuple[PullBatch, int] | None:
        """The next `want` entries (fewer at the end of the queue's segment) as the answer of
        pulls of `per` entries each, back to back, when every one of those pulls takes the fast
        path: the entries are whole, readable records in memory and each pull's share fits the
        byte limit. A pull starts only while the ones before it (and `held` bytes of earlier
        pulls) hold fewer than MAX_REPEAT_BYTES, as in `_repeat`. None when a condition fails."""
        raw = cq.get_entries(offset, want)
        if not raw:
            return None
        commitlog = self.commitlog
        end = commitlog.get_max_offset()
        limits = (end, max(end - self.memory_window, commitlog.get_min_offset()), commitlog.file_size,
                  min(MAX_PULL_MSG_SIZE, self.config.max_transfer_bytes_on_message_in_memory))
        k = len(raw) // UNIT_SIZE
        plan = (_plan_arrays if k >= ARRAYS_MIN_ENTRIES else _plan_tuples)(raw, k, per, held, *limits)
        if plan is None:
            return None
        runs, k, pulls = plan
        chunks, lost = copy_runs(commitlog.queue, runs, views)
        if lost:
            return None
        entries = _entries_struct(k).unpack_from(raw)
        if first_damaged(chunks, runs, entries[0::3], entries[1::3], range(offset, offset + k), cq,
                          self.check_crc) is not None:
            return None                              # the general walk says which and why
        return PullBatch(S.FOUND, offset + k, lo, hi, chunks=chunks, count=k), pulls

    def answer(self, status, next_offset, lo, hi, chunks, count, sizes, offsets, reason=""):
        """The general walk's answer (core.read.store_reader.StoreReader._collect) as a
        PullBatch of its runs, not copied again record by record."""
        return PullBatch(status, next_offset, lo, hi, reason=reason, chunks=chunks, count=count)


def _plan_tuples(raw, k, per, held, end, low, seg, limit):
    """(runs, entries, pulls) of `_plain_entries` for `k` entries, on the unpacked tuples: the
    runs of back to back records found with C-level iteration (`map`, `compress`); None when a
    condition fails. For a few entries (a single pull): cheaper than arrays."""
    values = _entries_struct(k).unpack(raw)
    phys, sizes = values[0::3], values[1::3]
    ends = list(map(add, phys, sizes))
    if min(sizes) <= 0 or BLANK_SIZE in sizes or max(ends) > end or min(phys) < low:
        return None
    shares = [sum(sizes)] if k <= per else [sum(sizes[i:i + per]) for i in range(0, k, per)]
    if max(shares) > limit:
        return None
    pulls = len(shares)
    if pulls > 1:
        for n, share in enumerate(shares, 1):
            held += share
            if held >= MAX_REPEAT_BYTES and n < pulls:
                pulls, k = n, n * per
                phys, ends = phys[:k], ends[:k]
                break
    runs = []
    a = 0
    for b in chain(compress(count(1), map(ne, phys[1:], ends)), (k,)):
        start, stop = phys[a], ends[b - 1]
        if start % seg + stop - start > seg:
            return None                              # a record across a segment end
        runs.append((start, stop, b - a))
        a = b
    return runs, k, pulls


def _plan_arrays(raw, k, per, held, end, low, seg, limit):
    """`_plan_tuples` with numpy arrays: the same answer, cheaper for many entries (a repeated
    pull)."""
    entries = np.frombuffer(raw, dtype=ENTRY_DTYPE, count=k)
    phys, sizes = entries["phys"].astype(np.int64), entries["size"].astype(np.int64)
    ends = phys + sizes
    if sizes.min() <= 0 or (sizes == BLANK_SIZE).any() or ends.max() > end or phys.min() < low:
        return None
    shares = np.add.reduceat(sizes, np.arange(0, k, per))
    if shares.max() > limit:
        return None
    pulls = len(shares)
    over = np.flatnonzero(np.cumsum(shares) + held >= MAX_REPEAT_BYTES)
    if over.size and over[0] + 1 < pulls:
        pulls = int(over[0]) + 1
        k = pulls * per
        phys, ends = phys[:k], ends[:k]
    cuts = np.flatnonzero(phys[1:] != ends[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [k]))
    starts, stops = phys[bounds[:-1]], ends[bounds[1:] - 1]
    if (starts % seg + stops - starts > seg).any():
        return None                                  # a record across a segment end
    return list(zip(starts.tolist(), stops.tolist(), np.diff(bounds).tolist())), k, pulls
