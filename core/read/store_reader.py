"""`StoreReader`: the read operations of the store (DESIGN.md section 6): pulls from a consume
queue with tag filter and RocketMQ's batch limits, lookups by physical offset and message id,
queries through the index, and offset-by-time.

A pull walks the consume queue once (`StoreReader._collect`), copying runs of back-to-back
records with one slice each; the reader process (services/reader/pull.py) answers through the
same walk, keeping the runs as they are, and adds its fast path and repeated pulls.

No read serves a damaged record (`core.read.check`): a pull checks each record against its
consume-queue entry and its CRC and stops before the first that fails; a pull that starts at
one answers MESSAGE_DAMAGED with the reason and the offset after it, so that a consumer goes on
past it knowingly. A lookup or a query returns nothing for a damaged record. Each refusal is
counted and logged (`damage`).
"""
from __future__ import annotations

import os

from core.record.codec import MAGIC_V1, MAGIC_V2
from core.record.decode import decode_message
from core.log.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE
from core.record.message import decode_message_id
from core.read.check import DamageLog, check_run, record_problem
from core.read.rederive import find_record
from core.record.crc_property import crc_mode
from core.status import GetMessageResult, GetMessageStatus, QueryMessageResult
from core.read.subscription import subscription_codes

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024
REDERIVED_KEPT = 4096            # re-derived entries a reader remembers (a view cannot repair them)
_MAGICS = (MAGIC_V1.to_bytes(4, "big", signed=True), MAGIC_V2.to_bytes(4, "big", signed=True))


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


def out_of_range(offset: int, lo: int, hi: int, correct: bool = True) -> GetMessageResult | None:
    """The answer to a pull at `offset` of a queue holding [lo, hi) when there is nothing to
    read there (RocketMQ 5's statuses and next offsets); None when `offset` is inside.

    `correct` is RocketMQ's nextOffsetCorrection: a slave that does not check offsets
    (`offset_check_in_slave` off) answers the requested offset as the next one instead of the
    corrected one, since its queue may only lag the master's."""
    S = GetMessageStatus
    if hi == 0:
        status, corrected = S.NO_MESSAGE_IN_QUEUE, 0
    elif offset < lo:
        status, corrected = S.OFFSET_TOO_SMALL, lo
    elif offset == hi:
        return GetMessageResult(S.OFFSET_OVERFLOW_ONE, offset, lo, hi)
    elif offset > hi:
        status, corrected = S.OFFSET_OVERFLOW_BADLY, hi
    else:
        return None
    return GetMessageResult(status, corrected if correct else offset, lo, hi)


def corrects_offsets(config) -> bool:
    """Whether pulls correct a bad offset (RocketMQ: not on a slave, unless offsetCheckInSlave)."""
    return not config.is_slave or config.offset_check_in_slave


class StoreReader:
    log_leads_queues = True     # every entry's record is in `commitlog` (the writer's own log)

    def __init__(self, config, commitlog, cq_store, index_service):
        self.config = config
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.memory_window = _total_memory() * config.access_message_in_memory_max_ratio // 100
        self.correct = corrects_offsets(config)
        self.check_crc = crc_mode(config)
        self.damage = DamageLog()
        self._rederived: dict = {}       # (topic, queue id, offset) -> the record `_rederive` found

    # -- pulls ---------------------------------------------------------------------------
    def get_message(self, group, topic, queue_id, offset, max_msgs, tag_filter=None) -> GetMessageResult:
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:                   # RocketMQ creates the queue here: an empty one
            return out_of_range(offset, 0, 0, self.correct)
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        outside = out_of_range(offset, lo, hi, self.correct)
        if outside is not None:
            return outside
        max_msgs = max(1, max_msgs)
        scan_units = max(self.config.max_filter_message_size, max_msgs * UNIT_SIZE) // UNIT_SIZE
        raw = cq.get_entries(offset, scan_units)
        if raw is None:
            return self.found_null(cq, offset, lo, hi)
        return self._collect(raw, offset, max_msgs, tag_filter, lo, hi, cq)

    def found_null(self, cq, offset, lo, hi) -> GetMessageResult:
        """OFFSET_FOUND_NULL: `offset` is inside [lo, hi) but its consume-queue file is gone;
        the next offset is the next file's first (as requested, where offsets are not corrected)."""
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL,
                                cq.roll_next_file(offset) if self.correct else offset, lo, hi)

    def _collect(self, raw, offset, max_msgs, tag_filter, lo, hi, cq):
        """The pull walk (the only one: the reader process's BatchStoreReader answers through
        it too). It walks the consume-queue entries `raw` from queue offset `offset` once,
        applying the tag filter and RocketMQ's batch limits (count and bytes, in memory and on
        disk), and notes runs of chosen records that lie back to back in the CommitLog (a
        queue's records usually do); each run is copied out of the mapping with one slice
        (`copy_runs`) and checked (`first_damaged`). A record still in the log but not
        readable here yet (a reader's view of the log can trail the queue) stops the pull
        where it starts, so that the next pull starts at it; one below the log's first byte
        (retention) is skipped, MESSAGE_WAS_REMOVING when nothing else is found. The answer is
        made by `answer` (records one by one here, runs in the reader process)."""
        codes = subscription_codes(tag_filter)
        commitlog = self.commitlog
        end = commitlog.get_max_offset()
        min_phy = commitlog.get_min_offset()
        seg = commitlog.queue.mapped_file_size
        near, mem_count, mem_bytes, disk_count, disk_bytes = self._batch_limits(max_msgs)
        runs = []
        chosen_phys, chosen_sizes, chosen_offsets = [], [], []
        run_start = run_stop = -1
        run_n = count = total = scanned = 0
        removing = False
        suspect, past_end = None, False              # why the first entry cannot be right
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
                if not scanned:                      # starts at it (never skip a live record)
                    suspect, past_end = "its record would end past the log's end", True
                break
            if phys >= min_phy and (size <= 0 or phys % seg + size > seg):
                scanned -= 1                         # no record is so: the entry is damaged
                if not scanned:
                    suspect = f"size {size} at {phys} cannot be a record's"
                break
            if phys < min_phy:
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
            chosen_phys.append(phys)
            chosen_sizes.append(size)
            chosen_offsets.append(offset + scanned - 1)
        if suspect is not None:
            return self._suspect_first(cq, offset, suspect, past_end, lo, hi, codes)
        if run_n:
            runs.append((run_start, run_stop, run_n))
        chunks, lost = copy_runs(commitlog.queue, runs, places=True)
        if lost:                                     # removed by retention meanwhile
            count -= lost
            removing = True
            chunks, chosen_sizes, chosen_offsets = _without_lost(chunks, runs, chosen_sizes,
                                                                 chosen_offsets)
        elif count:
            damaged = first_damaged(chunks, runs, chosen_phys, chosen_sizes, chosen_offsets, cq,
                                    self.check_crc)
            if damaged is not None:
                return self._cut_before(damaged, chunks, chosen_phys, chosen_sizes, chosen_offsets,
                                        cq, lo, hi, codes)
        S = GetMessageStatus
        status = S.FOUND if count else (S.MESSAGE_WAS_REMOVING if removing else S.NO_MATCHED_MESSAGE)
        return self.answer(status, offset + scanned, lo, hi, chunks, count, chosen_sizes,
                           chosen_offsets)

    def _cut_before(self, damaged, chunks, phys, sizes, offsets, cq, lo, hi, codes):
        """The answer of a pull whose record number `i` (of those chosen) is damaged: the
        records before it, FOUND, the next pull starting at it. When it is the first, its
        record looked for in the CommitLog (`core.read.rederive`): found intact, the entry was
        the damaged part, and the pull serves that record (the entry is written again where
        this process writes the queue); else MESSAGE_DAMAGED with the reason, the next pull
        starting after it."""
        i, chunk_i, cut, why = damaged
        if i:
            kept = chunks[:chunk_i] + ([chunks[chunk_i][:cut]] if cut else [])
            return self.answer(GetMessageStatus.FOUND, offsets[i], lo, hi, kept, i, sizes, offsets)
        rederived = self._rederive(cq, offsets[0], phys[0], why, lo, hi, codes)
        if rederived is not None:
            return rederived
        reason = self.damage.note(f"{cq.topic}:{cq.queue_id} offset {offsets[0]}", phys[0], why)
        return self.answer(GetMessageStatus.MESSAGE_DAMAGED, offsets[0] + 1, lo, hi, [], 0, sizes,
                           offsets, reason)

    def _suspect_first(self, cq, offset, why, past_end, lo, hi, codes):
        """The answer of a pull whose first entry names no readable record: its record found
        in the CommitLog (`_rederive`); else, when it would end `past_end` of a reader whose log
        view may trail the queues (`log_leads_queues` false), nothing yet (the next pull starts
        at it again); else MESSAGE_DAMAGED, the next pull starting after it."""
        phys = ENTRY.unpack(cq.get_entries(offset, 1) or bytes(UNIT_SIZE))[0]
        rederived = self._rederive(cq, offset, phys, why, lo, hi, codes)
        if rederived is not None:
            return rederived
        if past_end and not self.log_leads_queues:
            return self.answer(GetMessageStatus.NO_MATCHED_MESSAGE, offset, lo, hi, [], 0, [], [])
        reason = self.damage.note(f"{cq.topic}:{cq.queue_id} offset {offset}", phys, why)
        return self.answer(GetMessageStatus.MESSAGE_DAMAGED, offset + 1, lo, hi, [], 0, [], [],
                           reason)

    def _rederive(self, cq, index, phys, why, lo, hi, codes):
        """FOUND with the record of entry `index` when the CommitLog holds it intact
        (`core.read.rederive`; the entry is written again where this process writes the
        queue), or NO_MATCHED_MESSAGE past it when its tag code is not among the filter's
        `codes`; None when the CommitLog does not hold it. Where the entry is not written again
        (a view), the record found is remembered, so that the next pulls of it read it at once
        instead of walking again."""
        key = (cq.topic, cq.queue_id, index)
        found = self._rederived.get(key)
        if found is None:
            found = find_record(self.commitlog, cq, index, self.check_crc, self.config.delay_levels_ms)
        record = self.commitlog.read(found.commit_log_offset, found.msg_size) if found else None
        if record is None or record_problem(record, 0, len(record), found.commit_log_offset,
                                            cq.topic.encode(), cq.queue_id, index, self.check_crc):
            self._rederived.pop(key, None)
            return None
        repaired = cq.repair_entry(index, found.commit_log_offset, found.msg_size, found.tags_code)
        if not repaired:                             # a view's queue keeps the damaged entry
            if len(self._rederived) >= REDERIVED_KEPT:
                self._rederived.pop(next(iter(self._rederived)))
            self._rederived[key] = found
        self.damage.note_entry(f"{cq.topic}:{cq.queue_id} offset {index}", phys, why,
                               found.commit_log_offset, repaired)
        if codes is not None and found.tags_code not in codes:
            return self.answer(GetMessageStatus.NO_MATCHED_MESSAGE, index + 1, lo, hi, [], 0, [], [])
        return self.answer(GetMessageStatus.FOUND, index + 1, lo, hi, [record], 1,
                           [found.msg_size], [index])

    def answer(self, status, next_offset, lo, hi, chunks, count, sizes, offsets, reason=""):
        """A pull's GetMessageResult: the `count` records of `chunks` (runs of whole records,
        of `sizes` and queue `offsets` in order) one by one."""
        result = GetMessageResult(status, next_offset, lo, hi, reason=reason)
        if count:
            buffers = result.buffers
            i = 0
            for chunk in chunks:
                mv, pos, n = memoryview(chunk), 0, len(chunk)
                while pos < n:
                    size = sizes[i]
                    buffers.append(bytes(mv[pos:pos + size]))
                    pos += size
                    i += 1
            result.queue_offsets = offsets[:count]
        return result

    def _batch_limits(self, max_msgs) -> tuple:
        """(near, count and bytes limits in memory, in disk): a record at or past `near` counts
        as in memory (within the memory window of the CommitLog's end)."""
        cfg = self.config
        return (self.commitlog.get_max_offset() - self.memory_window,
                min(max_msgs, cfg.max_transfer_count_on_message_in_memory),
                min(MAX_PULL_MSG_SIZE, cfg.max_transfer_bytes_on_message_in_memory),
                min(max_msgs, cfg.max_transfer_count_on_message_in_disk),
                min(MAX_PULL_MSG_SIZE, cfg.max_transfer_bytes_on_message_in_disk))

    # -- lookups -------------------------------------------------------------------------
    def look_message_by_offset(self, phys: int, size: int | None = None):
        rec = self.commitlog.read(phys, size) if size else self.commitlog.look_record(phys)
        if rec is None:
            return None
        why = record_problem(rec, 0, len(rec), phys, check_crc=self.check_crc)
        if why is not None:
            if len(rec) >= 8 and rec[4:8] in _MAGICS:            # a record, damaged: say so
                self.damage.note("lookup", phys, why)
            return None
        try:
            msg = decode_message(rec)
            msg.topic            # parse topic and properties now: a lookup finds no corrupt record
        except ValueError:
            return None
        return msg

    def view_message_by_id(self, msg_id: str):
        try:
            _, phys = decode_message_id(msg_id)
        except (ValueError, TypeError, AttributeError):
            return None
        return self.look_message_by_offset(phys)

    def query_message(self, topic, key, max_num, begin_ts, end_ts) -> QueryMessageResult:
        result = QueryMessageResult()
        if self.index_service is None:
            return result
        max_num = max(0, min(max_num, self.config.max_msgs_num_batch))
        offsets, ts, phy = self.index_service.query_offset(topic, key, max_num, begin_ts, end_ts)
        result.index_last_update_timestamp, result.index_last_update_phyoffset = ts, phy
        for phys in offsets:
            msg = self.look_message_by_offset(phys)
            if msg is not None and msg.topic == topic and (
                    key in msg.keys_list or msg.uniq_key == key):
                result.messages.append(msg)
        return result

    # -- queue positions -----------------------------------------------------------------
    def get_max_offset_in_queue(self, topic, queue_id) -> int:
        cq = self.cq_store.find(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq else 0

    def get_min_offset_in_queue(self, topic, queue_id) -> int:
        cq = self.cq_store.find(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq else 0     # as RocketMQ's new, empty queue

    def get_commit_log_offset_in_queue(self, topic, queue_id, cq_offset) -> int:
        cq = self.cq_store.find(topic, queue_id)
        entry = cq.get_entry(cq_offset) if cq else None
        return entry[0] if entry else 0

    def get_offset_in_queue_by_time(self, topic, queue_id, timestamp) -> int:
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp, self.commitlog.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic, queue_id, cq_offset) -> int:
        cq = self.cq_store.find(topic, queue_id)
        entry = cq.get_entry(cq_offset) if cq and cq_offset >= 0 else None
        if entry is None or entry[1] == BLANK_SIZE:
            return -1
        return self.commitlog.pickup_store_timestamp(entry[0], entry[1])

    def get_earliest_message_time(self, topic=None, queue_id=None) -> int:
        if topic is None:
            phys = self.commitlog.get_min_offset()
            rec = self.commitlog.look_record(phys) if phys >= 0 else None
            return self.commitlog.pickup_store_timestamp(phys, len(rec)) if rec else -1
        return self.get_message_store_timestamp(
            topic, queue_id, self.get_min_offset_in_queue(topic, queue_id))


def first_damaged(chunks, runs, phys, sizes, offsets, cq, check_crc):
    """The first damaged record of a pull's `chunks` (the copies of `runs`, records of `phys`,
    `sizes` and queue `offsets` in order) as (its number, its chunk, where it starts in that
    chunk, the reason); None when all pass."""
    topic = cq.topic.encode("utf-8")
    a = 0
    for chunk_i, (chunk, (_, _, n)) in enumerate(zip(chunks, runs)):
        b = a + n
        sizes_ab = list(sizes[a:b])
        found = check_run(chunk, sizes_ab, phys[a:b], topic, cq.queue_id, offsets[a:b], check_crc)
        if found is not None:
            j, why = found
            return a + j, chunk_i, sum(sizes_ab[:j]), why
        a = b
    return None


def _without_lost(chunks, runs, sizes, offsets):
    """The chunks, sizes and queue offsets of the runs `copy_runs(places=True)` could copy."""
    kept, kept_sizes, kept_offsets = [], [], []
    a = 0
    for chunk, (_, _, n) in zip(chunks, runs):
        if chunk is not None:
            kept.append(chunk)
            kept_sizes += sizes[a:a + n]
            kept_offsets += offsets[a:a + n]
        a += n
    return kept, kept_sizes, kept_offsets


def copy_runs(queue, runs, views: bool = False, places: bool = False) -> tuple[list, int]:
    """Copy each (start, stop, records) run out of the segments, holding each segment once
    (and looking at its read position when it is taken); return the copies and how many
    records could not be read (with `places`, a run that could not be read has None in the
    copies). With `views`, memoryviews of the mapping instead of copies (a segment unmapped
    meanwhile stays mapped until they are released: core.files.fileops.Mapping.close)."""
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
                    if places:
                        chunks.append(None)
                    continue
                base, end = mf.file_from_offset, mf.file_from_offset + mf.read_position
            if stop > end:
                lost += n
                if places:
                    chunks.append(None)
                continue
            chunks.append(memoryview(buf)[start - base:stop - base] if views else buf[start - base:stop - base])
    finally:
        if mf is not None:
            mf.release()
    return chunks, lost
