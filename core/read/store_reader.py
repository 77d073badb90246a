"""`StoreReader`: the read operations of the store (DESIGN.md section 6): pulls from a consume
queue with tag filter and RocketMQ's batch limits, lookups by physical offset and message id,
queries through the index, and offset-by-time.

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
from core.record.crc_property import crc_mode
from core.status import GetMessageResult, GetMessageStatus, QueryMessageResult
from core.read.subscription import subscription_codes

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024
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


class _SegmentReader:
    """Copies records out of CommitLog segments, holding one segment across consecutive reads
    instead of looking it up and taking a reference per record. `base` and `readable` describe
    the held segment, so that a caller can test whether a record lies in it without a call."""

    def __init__(self, queue):
        self.queue = queue
        self.mf = None
        self.buf = None
        self.base = 0              # global offset of the held segment's first byte
        self.readable = 0          # its read position when last looked at; 0 when none held

    def seek(self, phys: int, size: int) -> int:
        """Hold the segment of `phys` (or look again at the read position of the one held);
        the position of the record in `buf`, or -1 if it is not readable."""
        mf = self.mf
        if mf is None or not self.base <= phys < self.base + mf.file_size:
            self.close()
            mf = self.queue.find_mapped_file_by_offset(phys)
            if mf is None or self.queue.hold(mf) is None:
                return -1
            self.mf, self.buf, self.base = mf, mf.buf, mf.file_from_offset
        self.readable = mf.read_position
        pos = phys - self.base
        return pos if pos + size <= self.readable else -1

    def close(self) -> None:
        if self.mf is not None:
            self.mf.release()
            self.mf = self.buf = None
            self.base = self.readable = 0


class StoreReader:
    def __init__(self, config, commitlog, cq_store, index_service):
        self.config = config
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.memory_window = _total_memory() * config.access_message_in_memory_max_ratio // 100
        self.correct = corrects_offsets(config)
        self.check_crc = crc_mode(config)
        self.damage = DamageLog()

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

    def _collect(self, raw, offset, max_msgs, tag_filter, lo, hi, cq) -> GetMessageResult:
        codes = subscription_codes(tag_filter)
        topic_b, queue_id, check_crc = cq.topic.encode("utf-8"), cq.queue_id, self.check_crc
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        buffers, offsets = result.buffers, result.queue_offsets
        near, mem_count, mem_bytes, disk_count, disk_bytes = self._batch_limits(max_msgs)
        seg = _SegmentReader(self.commitlog.queue)
        chosen, sizes = [], []
        count = total = scanned = 0
        try:
            for phys, size, tags in ENTRY.iter_unpack(raw):
                if count:                      # RocketMQ's batch limits, by where the record is
                    if phys >= near:
                        if count >= mem_count or total + size > mem_bytes:
                            break
                    elif count >= disk_count or total + size > disk_bytes:
                        break
                scanned += 1
                if size == BLANK_SIZE or (codes is not None and tags not in codes):
                    continue
                pos = phys - seg.base
                if pos < 0 or pos + size > seg.readable:
                    pos = seg.seek(phys, size)
                    if pos < 0:
                        if phys >= self.commitlog.get_min_offset():     # now, not as of the start
                            # Still in the log but not readable here yet (a reader's view of
                            # the log can trail the queue): stop, so the next pull starts here.
                            scanned -= 1
                            break
                        if not count:
                            result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                        continue
                buffers.append(bytes(seg.buf[pos:pos + size]))
                offsets.append(offset + scanned - 1)
                chosen.append(phys)
                sizes.append(size)
                count += 1
                total += size
        finally:
            seg.close()
        result.next_begin_offset = offset + scanned
        if count:
            result.status = GetMessageStatus.FOUND
            damaged = check_run(b"".join(buffers), sizes, chosen, topic_b, queue_id, offsets, check_crc)
            if damaged is not None:
                self._stop_before(result, damaged, chosen, cq)
        return result

    def _stop_before(self, result, damaged, phys, cq) -> None:
        """Cut `result` before its record number `i`, which is damaged: the next pull starts at
        it; or, when it is the first, answer MESSAGE_DAMAGED with the reason, the next pull
        starting after it."""
        i, why = damaged
        offsets = result.queue_offsets
        if i:
            result.next_begin_offset = offsets[i]
        else:
            result.status = GetMessageStatus.MESSAGE_DAMAGED
            result.next_begin_offset = offsets[0] + 1
            result.reason = self.damage.note(f"{cq.topic}:{cq.queue_id} offset {offsets[0]}", phys[0], why)
        del result.buffers[i:], offsets[i:]

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
