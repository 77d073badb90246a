"""`CommitLog`: every topic's records appended to one sequence of segments.

Owns the append path (records as `core.record` encodes them, copied into the mapped segment or
the transient buffer, queue offsets from the topic-queue table, blank record and roll at a segment's end, a batch as one
unit), reads by physical offset, and the written/committed/flushed/confirm positions.
With `enabled_append_prop_crc` every record it appends carries the whole-record CRC property,
sealed under the append lock once the position fields are set (`core.record.crc_property`).
"""
from __future__ import annotations

import mmap
import threading
import time

from core.record.batch_encode import PreparedBatch
from core.record.layout import (
    BLANK_SIZE, PHYS_OFFSET_POS, POSITIONS as _POSITIONS, QUEUE_OFFSET_POS, STORE_TIMESTAMP as _STORE_TS,
    store_timestamp_position,
)
from core.record.codec import PreparedRecord, PreparedRecords, prepare_record, read_i32, read_i64, write_blank
from core.files.cache_window import UnmapBehind
from core.record.crc_property import seal
from core.record.encode import encode_prepared, encode_record
from core.files.fileops import FileOps
from core.files.mapped_file_queue import MappedFileQueue
from core.record.message import (
    SYSFLAG_BORNHOST_V6, SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_UNQUEUED as _NO_QUEUE_OFFSET, host_to_bytes,
)
from core.files.prefault import NEVER, PrefaultAhead
from core.status import AppendMessageResult, AppendMessageStatus, PutMessageStatus, new_result, refuse
from core.files.transient_pool import TransientStorePool

_APPENDED = AppendMessageStatus.PUT_OK   # a global: an enum member is a slow attribute
_STORE_TS_V4 = store_timestamp_position(0)                     # 56
_STORE_TS_V6 = store_timestamp_position(SYSFLAG_BORNHOST_V6)   # 68, after an IPv6 born host


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLog:
    def __init__(self, config, fileops: FileOps, allocator=None, pool: TransientStorePool | None = None):
        self.config = config
        self.file_size = config.mapped_file_size_commitlog
        self.queue = MappedFileQueue(config.commitlog_dir, self.file_size, fileops, allocator,
                                     config.max_mapped_files)
        self.pool = pool
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.put_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.begin_time_in_lock = 0
        self.store_host_bytes = host_to_bytes(config.store_host_tuple)[0]
        self.max_message_size = config.max_message_size
        self.prop_crc = config.enabled_append_prop_crc
        self._writing = None              # the segment being appended to, held mapped
        self._target = None               # where its bytes go: its mapping or its pool buffer
        self._prefault: PrefaultAhead | None = None     # started with the first append
        self._prefault_at = 0             # the physical offset past which appends tell it again
        self._unmap = UnmapBehind(self.queue, config.page_cache_window_commitlog)

    # -- append --------------------------------------------------------------------------
    def prepare(self, msg):
        return prepare_record(msg, self.max_message_size, self.store_host_bytes, self.prop_crc)

    def append(self, rec: PreparedRecord) -> AppendMessageResult:
        """Append one prepared record (as `append_encoded` does the bytes of one)."""
        return self.append_encoded(*encode_prepared(rec))

    def append_message(self, msg) -> AppendMessageResult | PutMessageStatus:
        """The single put (`MessageStore.put_message`): the message appended as one record, or
        the PutMessageStatus refusing it (MESSAGE_ILLEGAL and the like, OS_PAGECACHE_BUSY).
        `core.record.encode.encode_record` encodes it (choosing its own way), outside the lock;
        `append_encoded` copies it in."""
        rec = encode_record(msg, self.max_message_size, self.store_host_bytes, self.prop_crc)
        if rec.__class__ is PutMessageStatus:
            return rec
        if self.begin_time_in_lock and self.is_os_page_cache_busy():
            return refuse(PutMessageStatus.OS_PAGECACHE_BUSY,
                          "the CommitLog is busy (os_page_cache_busy_timeout_ms)")
        return self.append_encoded(*rec)

    def append_encoded(self, data: bytes, topic: str, queue_id: int, sys_flag: int) -> AppendMessageResult:
        """Append one record as `core.record.encode.encode_record` gives it (the single put):
        one copy into the segment, then QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP set."""
        size = len(data)
        if size + BLANK_SIZE > self.file_size:
            return AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        with self.put_lock:
            self.begin_time_in_lock = store_ts = time.time_ns() // 1_000_000
            try:
                mf = self._segment_for(size)
                if mf is None:
                    return AppendMessageResult(AppendMessageStatus.UNKNOWN_ERROR)
                pos = mf.wrote_position
                phys = mf.file_from_offset + pos
                end = pos + size
                target = self._target
                target[pos:end] = data
                if (sys_flag & SYSFLAG_TRANSACTION_MASK) not in _NO_QUEUE_OFFSET:
                    key = (topic, queue_id)
                    table = self.topic_queue_table
                    table[key] = (qoff := table.get(key, 0)) + 1
                else:
                    qoff = 0
                _POSITIONS.pack_into(target, pos + QUEUE_OFFSET_POS, qoff, phys)
                _STORE_TS.pack_into(target, pos + (_STORE_TS_V6 if sys_flag & SYSFLAG_BORNHOST_V6 else _STORE_TS_V4),
                                    store_ts)
                if self.prop_crc:
                    seal(target, pos, size)              # it has the CRC reserve
                mf.wrote_position = end
                mf.store_timestamp = store_ts
                if phys + size >= self._prefault_at:
                    self._prefault_wrote(mf, end)
            finally:
                self.begin_time_in_lock = 0
        return new_result(AppendMessageResult, (_APPENDED, phys, size, store_ts, qoff, 1,
                                                self.store_host_bytes, (size,)))

    def append_batch(self, recs: list[PreparedRecord] | PreparedBatch) -> AppendMessageResult:
        """Append records of one topic and queue as one unit, all in one segment."""
        if recs.__class__ is list:
            recs = PreparedRecords(recs)          # record by record (tests pass a plain list)
        total = recs.total
        if total + BLANK_SIZE > self.file_size:
            return AppendMessageResult(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
        with self.put_lock:
            store_ts = now_ms()
            self.begin_time_in_lock = store_ts
            try:
                return self._append_locked(recs, total, store_ts)
            finally:
                self.begin_time_in_lock = 0

    def _append_locked(self, recs, total, store_ts) -> AppendMessageResult:
        mf = self._segment_with_room(total)
        if mf is None:
            return AppendMessageResult(AppendMessageStatus.UNKNOWN_ERROR)
        pos = mf.wrote_position
        target = self._target
        first = recs.first
        key = (first.topic, first.queue_id)
        table = self.topic_queue_table
        qoff = table.get(key, 0)
        base = mf.file_from_offset
        wrote_offset = base + pos
        counted = (first.sys_flag & SYSFLAG_TRANSACTION_MASK) not in _NO_QUEUE_OFFSET
        q = qoff + len(recs) if counted else qoff
        pos = recs.write(target, pos, qoff if counted else None, wrote_offset, store_ts)
        sizes = recs.record_sizes
        mf.wrote_position = pos
        mf.store_timestamp = store_ts
        if counted:
            table[key] = q
        if base + pos >= self._prefault_at:
            self._prefault_wrote(mf, pos)
        return new_result(AppendMessageResult, (_APPENDED, wrote_offset, total, store_ts,
                                                qoff, len(recs), self.store_host_bytes, sizes))

    def _prefault_wrote(self, mf, position: int) -> None:
        """Tell the prefault thread where the writer is; the appends call this again only once
        they pass `_prefault_at`. Zaps this process's mapping of what is a page cache window
        behind (core.files.cache_window)."""
        self._unmap.advance(mf.file_from_offset + position)
        if self._prefault is None:
            self._prefault_at = NEVER
        else:
            self._prefault_at = self._prefault.wrote(mf, position)

    def _segment_for(self, size: int):
        """Under put_lock: the held segment when `size` more bytes fit in it (the common case,
        checked inline), else `_segment_with_room`."""
        mf = self._writing
        if mf is None or mf.wrote_position + size + BLANK_SIZE > self.file_size or not mf.available:
            return self._segment_with_room(size)
        return mf

    def _segment_with_room(self, total: int):
        """The segment to append `total` bytes to, after a blank record and a roll when the held
        one lacks the room; None when no segment can be had."""
        mf = self._writable_segment()
        if mf is None:
            return None
        pos = mf.wrote_position
        if total + BLANK_SIZE > self.file_size - pos:
            write_blank(self._target, pos, self.file_size - pos)
            mf.wrote_position = self.file_size
            mf = self._writable_segment()
        return mf

    def _writable_segment(self):
        mf = self._writing
        if mf is not None and not mf.is_full and mf.available:
            return mf
        if mf is not None:
            mf.release()
            self._writing = self._target = None
        try:
            mf = self.queue.get_last_mapped_file(0, create=True)
        except OSError:
            return None
        if mf.write_buffer is None and self.pool is not None and mf.wrote_position == 0:
            mf.write_buffer = self.pool.borrow()
        buf = self.queue.hold(mf)
        if buf is None:
            return None
        self._writing = mf
        self._target = mf.write_buffer if mf.write_buffer is not None else buf
        if self._prefault is None and isinstance(buf, mmap.mmap):
            self._prefault = PrefaultAhead(self.queue, sync_flush=self.config.is_sync_flush)
        self._prefault_at = 0
        return mf

    # -- replication: a slave's only writer -----------------------------------------------
    def append_replicated(self, offset: int, data) -> int:
        """Write `data`, CommitLog bytes a master sent, at `offset`, which must be where this
        log ends (or, for an empty log, a segment's start); the chunk must stay inside one
        segment, as a master sends it. A chunk that starts a segment rolls into it (through the
        allocator). Returns the log's new end; ValueError when the chunk does not fit there."""
        n = len(data)
        size = self.file_size
        with self.put_lock:
            files = self.queue.files
            end = self.queue.get_max_wrote_position()
            if (files and offset != end) or (not files and offset % size):
                raise ValueError(f"a replicated chunk at {offset} does not continue the log, "
                                 f"which ends at {end}")
            if offset % size + n > size:
                raise ValueError(f"a replicated chunk of {n} bytes at {offset} crosses a segment")
            mf = self._writing
            if mf is None or not mf.available or mf.is_full or mf.file_from_offset != offset - offset % size:
                mf = self._replica_segment(offset)
                if mf is None:
                    raise OSError(f"no CommitLog segment for offset {offset}")
            pos = offset - mf.file_from_offset
            self._target[pos:pos + n] = data
            mf.wrote_position = pos + n
            if offset + n >= self._prefault_at:
                self._prefault_wrote(mf, pos + n)
            return offset + n

    def _replica_segment(self, offset: int):
        """Under put_lock: hold the segment that holds `offset` (the last one, or a new one
        when the last is full or there is none)."""
        if self._writing is not None:
            self._writing.release()
            self._writing = self._target = None
        last = self.queue.get_last_mapped_file()
        if last is not None and last.file_from_offset <= offset < last.file_from_offset + self.file_size:
            mf = last
        else:
            mf = self.queue.get_last_mapped_file(offset, create=True)
        buf = self.queue.hold(mf)
        if buf is None:
            return None
        self._writing, self._target = mf, buf
        if self._prefault is None and isinstance(buf, mmap.mmap):
            self._prefault = PrefaultAhead(self.queue, sync_flush=self.config.is_sync_flush)
        self._prefault_at = 0
        return mf

    def reset_writer(self) -> None:
        """Forget the held segment (after a truncation or at shutdown)."""
        with self.put_lock:
            if self._writing is not None:
                self._writing.release()
                self._writing = self._target = None

    def is_os_page_cache_busy(self) -> bool:
        begin = self.begin_time_in_lock
        diff = now_ms() - begin
        return begin != 0 and self.config.os_page_cache_busy_timeout_ms < diff < 10_000_000

    # -- positions -----------------------------------------------------------------------
    def get_min_offset(self) -> int:
        first = self.queue.get_first_mapped_file()
        if first is None:
            return -1
        if first.available:
            return first.file_from_offset
        return first.file_from_offset + self.file_size

    def get_max_offset(self) -> int:
        return self.queue.get_max_offset()

    def get_confirm_offset(self) -> int:
        """What readers may see: the flushed position under SYNC_FLUSH, else what is written
        (committed, with the transient pool)."""
        if self.config.is_sync_flush:
            return self.queue.flushed_where
        return self.queue.get_max_offset()

    # -- flush and commit ----------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> bool:
        with self._flush_lock:                      # the flush thread and MessageStore.flush
            return self.queue.flush(least_pages)

    def commit(self, least_pages: int = 0) -> bool:
        with self._flush_lock:
            return self._commit(least_pages)

    def _commit(self, least_pages: int) -> bool:
        result = self.queue.commit(least_pages)
        if self.pool is not None:
            for mf in self.queue.files:
                if mf.write_buffer is not None and mf.committed_position == self.file_size:
                    self.pool.give_back(mf.write_buffer)
                    mf.write_buffer = None
        return result

    # -- reads ---------------------------------------------------------------------------
    def read(self, phys: int, size: int) -> bytes | None:
        return self.queue.read(phys, size)

    def look_record(self, phys: int) -> bytes | None:
        """The whole record at `phys`, or None if nothing readable starts there."""
        head = self.queue.read(phys, 4)
        if head is None:
            return None
        size = read_i32(head, 0)
        return self.queue.read(phys, size) if size > 0 else None

    def pickup_store_timestamp(self, phys: int, size: int) -> int:
        if phys < self.get_min_offset():
            return -1
        rec = self.queue.read(phys, size)
        if rec is None or len(rec) < 60:
            return -1
        sys_flag = read_i32(rec, 36)
        return read_i64(rec, store_timestamp_position(sys_flag))

    def record_phys_offset(self, rec: bytes) -> int:
        return read_i64(rec, PHYS_OFFSET_POS)

    def shutdown(self) -> None:
        if self._prefault is not None:
            self._prefault.close()
            self._prefault = None
        self.reset_writer()
        self.queue.shutdown()


def append_status_to_put(status: AppendMessageStatus) -> PutMessageStatus:
    if status is AppendMessageStatus.PUT_OK:
        return PutMessageStatus.PUT_OK
    if status in (AppendMessageStatus.MESSAGE_SIZE_EXCEEDED, AppendMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return PutMessageStatus.MESSAGE_ILLEGAL
    if status is AppendMessageStatus.UNKNOWN_ERROR:
        return PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    return PutMessageStatus.UNKNOWN_ERROR
