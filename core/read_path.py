"""`StoreReader`: the read operations of the store (DESIGN.md section 6): pulls from a consume
queue with tag filter and RocketMQ's batch limits, lookups by physical offset and message id,
queries through the index, and offset-by-time.
"""
from __future__ import annotations

import os

from core.codec import decode_message
from core.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE
from core.message import decode_message_id
from core.status import GetMessageResult, GetMessageStatus, QueryMessageResult
from core.subscription import subscription_codes

MAX_PULL_MSG_SIZE = 128 * 1024 * 1024


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class _SegmentReader:
    """Copies records out of CommitLog segments, holding one segment across consecutive reads
    instead of looking it up and taking a reference per record."""

    def __init__(self, queue):
        self.queue = queue
        self.mf = None
        self.buf = None
        self.lo = self.hi = 0

    def read(self, phys: int, size: int):
        if not self.lo <= phys < self.hi:
            self.close()
            mf = self.queue.find_mapped_file_by_offset(phys)
            if mf is None or self.queue.hold(mf) is None:
                return None
            self.mf, self.buf = mf, mf.buf
            self.lo, self.hi = mf.file_from_offset, mf.file_from_offset + mf.file_size
        pos = phys - self.lo
        if pos + size > self.mf.read_position:
            return None
        return bytes(self.buf[pos:pos + size])

    def close(self) -> None:
        if self.mf is not None:
            self.mf.release()
            self.mf = self.buf = None
            self.lo = self.hi = 0


class StoreReader:
    def __init__(self, config, commitlog, cq_store, index_service):
        self.config = config
        self.commitlog = commitlog
        self.cq_store = cq_store
        self.index_service = index_service
        self.memory_window = _total_memory() * config.access_message_in_memory_max_ratio // 100

    # -- pulls ---------------------------------------------------------------------------
    def get_message(self, group, topic, queue_id, offset, max_msgs, tag_filter=None) -> GetMessageResult:
        cq = self.cq_store.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        lo, hi = cq.get_min_offset_in_queue(), cq.get_max_offset_in_queue()
        S = GetMessageStatus
        if hi == 0:
            return GetMessageResult(S.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(S.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(S.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(S.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        max_msgs = max(1, max_msgs)
        scan_units = max(self.config.max_filter_message_size, max_msgs * UNIT_SIZE) // UNIT_SIZE
        raw = cq.get_entries(offset, scan_units)
        if raw is None:
            return GetMessageResult(S.OFFSET_FOUND_NULL, cq.roll_next_file(offset), lo, hi)
        return self._collect(raw, offset, max_msgs, tag_filter, lo, hi)

    def _collect(self, raw, offset, max_msgs, tag_filter, lo, hi) -> GetMessageResult:
        codes = subscription_codes(tag_filter)
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        buffers, offsets = result.buffers, result.queue_offsets
        max_phy = self.commitlog.get_max_offset()
        records = _SegmentReader(self.commitlog.queue)
        total = 0
        scanned = 0
        try:
            for phys, size, tags in ENTRY.iter_unpack(raw):
                if buffers and self._batch_full(len(buffers), total, size, max_msgs, max_phy - phys):
                    break
                scanned += 1
                if size == BLANK_SIZE or (codes is not None and tags not in codes):
                    continue
                rec = records.read(phys, size)
                if rec is None:
                    if phys >= self.commitlog.get_min_offset():     # now, not as of the start
                        # Still in the log but not readable here yet (a reader's view of the
                        # log can trail the queue): stop, so that the next pull starts here.
                        scanned -= 1
                        break
                    if not buffers:
                        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                buffers.append(rec)
                offsets.append(offset + scanned - 1)
                total += size
        finally:
            records.close()
        if buffers:
            result.status = GetMessageStatus.FOUND
        result.next_begin_offset = offset + scanned
        return result

    def _batch_full(self, count, total, size, max_msgs, distance) -> bool:
        cfg = self.config
        if count >= max_msgs:
            return True
        if total + size > MAX_PULL_MSG_SIZE:
            return True
        if distance > self.memory_window:
            return (total + size > cfg.max_transfer_bytes_on_message_in_disk
                    or count >= cfg.max_transfer_count_on_message_in_disk)
        return (total + size > cfg.max_transfer_bytes_on_message_in_memory
                or count >= cfg.max_transfer_count_on_message_in_memory)

    # -- lookups -------------------------------------------------------------------------
    def look_message_by_offset(self, phys: int, size: int | None = None):
        rec = self.commitlog.read(phys, size) if size else self.commitlog.look_record(phys)
        if rec is None:
            return None
        try:
            return decode_message(rec)
        except ValueError:
            return None

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
        return cq.get_min_offset_in_queue() if cq else -1

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
