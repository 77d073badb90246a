"""`ConsumeQueue`: the 20-byte entries (CommitLog offset 8, record size 4, tag code 8) of one
topic and queue; entry i lives at byte i*20 of the queue's segments.

Files are RocketMQ's: 20-byte entries from byte 0 of each segment, zero past the last one.
They are created sparse and written with pwrite (`MappedFile.write`), so a queue takes disk
space as its entries are written (one 4 KiB block for a queue of up to 204 entries), and a
full disk is an OSError(ENOSPC) at the write, never a SIGBUS.

Entries are checked at load against the CommitLog (integrity, DESIGN.md section 7):
`core.log.queue_check.damage_restart` finds the first entry of a queue's last three files that
cannot be right. Recovery cuts a queue there as at its end; the records of the entries after it
are intact in the CommitLog, so recovery dispatches the log again from the end of the last right
entry before the damaged one (`core.log.recovery`), which writes the queue anew instead of
losing the rest of it. A pull that finds an entry wrong later re-derives it from the CommitLog
(`core.read.rederive`) and has it written again (`repair_entry`).

Writes are idempotent: an entry that is already there with the same content is skipped; a
different one at the same slot truncates the queue there (the dispatcher then rebuilds the
rest from the CommitLog, in order). Recovery keeps the valid prefix and cuts the rest durably.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from core.files.fileops import FileOps
from core.files.mapped_file_queue import MappedFileQueue
from core.log.cq_entry import BLANK_SIZE, ENTRY, ENTRY_DTYPE, UNIT_SIZE  # noqa: F401 - the format's names
from core.log.queue_check import TAIL_ENTRIES, damage_restart

_RECOVER_CHUNK = 1 << 14             # entries `recover` reads at a time
log = logging.getLogger(__name__)


def written_end(reader, start: int, file_size: int) -> int:
    """The byte position after the last written entry in [start, file_size) of one segment;
    `reader` is a `Mapping` or a `FileReader` (`data_ranges`, `read`).

    Entries are written densely from the segment's start (fillers have size 0x7FFFFFFF) and
    the bytes past them are zero, so the written ones (size != 0) form a prefix: a binary
    search finds its end, reading one entry per step. It searches below the end of the file's
    data only (`data_ranges`: a sparse file's holes are never read), since a read of a hole
    through a mapping is a page fault that took ~180 us here: 19 of them for each of 4,000
    queues made a 17 s start."""
    ranges = reader.data_ranges(start, file_size)
    limit = ranges[-1][1] if ranges else start

    def size_at(index: int) -> int:
        return ENTRY.unpack(reader.read(index * UNIT_SIZE, UNIT_SIZE))[1]

    if start >= limit or size_at(start // UNIT_SIZE) == 0:
        return start
    # The first unwritten entry is in [lo, hi]: an entry that starts before the data's end
    # may be written even if it ends past it (its last bytes zeros never written).
    lo, hi = start // UNIT_SIZE + 1, -(-limit // UNIT_SIZE)
    while lo < hi:
        mid = (lo + hi) // 2
        if size_at(mid) == 0:
            hi = mid
        else:
            lo = mid + 1
    return lo * UNIT_SIZE


def _check_entries(reader, lo: int, hi: int) -> tuple[int, int | None]:
    """(the index of the first invalid entry in [lo, hi), or hi; the end of the newest real
    entry before it, or None)."""
    data = reader.read(lo * UNIT_SIZE, (hi - lo) * UNIT_SIZE)
    valid, real_end = lo, None
    for phys, size, _ in ENTRY.iter_unpack(data):
        if phys < 0 or size <= 0:
            break
        if size != BLANK_SIZE:
            real_end = phys + size
        valid += 1
    return valid, real_end


class _DataInMemory:
    """A segment's data read with one pread (`data_ranges` and `read` as a FileReader's):
    a queue's last segment holds a block or a few, and the searches of `recover` then cost no
    further system calls (they were 18 a queue, most of a 80,000-queue start)."""

    def __init__(self, data: bytes):
        self.data = data

    def close(self) -> None:
        """Nothing to close (as a FileReader's)."""

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        hi = min(hi, len(self.data))
        return [(lo, hi)] if lo < hi else []

    def read(self, pos: int, size: int) -> bytes:
        chunk = self.data[pos:pos + size]
        return chunk + bytes(size - len(chunk)) if len(chunk) < size else chunk


def _small_in_memory(reader, file_size: int, most: int = 1 << 16):
    """`reader`, or its data in memory when it ends within `most` bytes (holes read as zero)."""
    ranges = reader.data_ranges(0, file_size)
    end = ranges[-1][1] if ranges else 0
    return _DataInMemory(reader.read(0, end) if end else b"") if end <= most else reader


def _zero_after(reader, pos: int, file_size: int, most: int = 1 << 16) -> bool:
    """Whether the file's data past `pos` is all zero, read when there are at most `most`
    bytes of it (a queue's last block, after a clean stop); False when there are more."""
    ranges = reader.data_ranges(pos, file_size)
    if not ranges:
        return True
    if ranges[-1][1] - pos > most:
        return False
    return reader.read(pos, ranges[-1][1] - pos) == bytes(ranges[-1][1] - pos)   # memcmp: a
    # bytes.rstrip(b"\0") of a 4 KiB block took 17 us, 0.2 s of a 10,000-queue start


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root_dir: str, mapped_file_size: int,
                 fileops: FileOps, max_mapped: int = 4, window=None):
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.units_per_file = mapped_file_size // UNIT_SIZE
        self.queue = MappedFileQueue(os.path.join(root_dir, topic, str(queue_id)),
                                     mapped_file_size, fileops, max_mapped=max_mapped,
                                     window=window, grows=True)
        self.min_entry_phys = None         # (queue offset, CommitLog offset) of the first entry
        self.max_physic_offset = -1        # end (offset + size) of the newest entry's record
        self.min_logic_offset = 0          # in bytes

    # -- load and recovery ---------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    def recover(self, log_limit: int | None = None, commitlog=None) -> int | None:
        """Keep the valid entries of the last three segments (offset >= 0 and size > 0), cut
        the rest. Each segment is read once, with pread over its data only (`_read_data`), so
        recovering a queue costs a few reads whatever its length, maps nothing, and a queue
        whose entries are all valid and nothing but zeros behind (every queue after a clean
        stop) is not written to: the cut of the others zeroes what follows durably.

        With `log_limit` (the CommitLog's end), the same bytes are checked for a damaged entry
        first (`damage_restart`, each entry held to its record's header when `commitlog` is
        given): return the physical offset to dispatch the log again from when there is one,
        else None. Without it, a segment with more
        than 64 KiB of data is read at its tail only (`_valid_prefix`'s binary search)."""
        files = self.queue.files
        if not files:
            return None
        start = max(0, len(files) - 3)
        tail = files[start:]
        readers = [self._read_data(mf, whole=log_limit is not None) for mf in tail]
        end = files[start].file_from_offset
        clean, restart = False, None
        try:
            for mf, reader in zip(tail, readers):
                valid, written, real_end = self._valid_prefix(reader, mf.file_size)
                clean = (mf is files[-1] and valid == written
                         and _zero_after(reader, valid * UNIT_SIZE, mf.file_size))
                if mf is files[0] and valid:
                    phys, size, _ = ENTRY.unpack(reader.read(0, UNIT_SIZE))
                    if size != BLANK_SIZE:     # correct_min_offset need not read it again
                        self.min_entry_phys = (mf.file_from_offset // UNIT_SIZE, phys)
                if real_end is not None:
                    self.max_physic_offset = real_end
                end = mf.file_from_offset + valid * UNIT_SIZE
                if valid < mf.file_size // UNIT_SIZE:
                    break
            if log_limit is not None:
                restart = self._damage(tail, readers, written if clean else 0, log_limit, commitlog)
        finally:
            for reader in readers:
                reader.close()
        if clean:
            files[-1].set_positions(end - files[-1].file_from_offset)
        else:
            self.queue.truncate_dirty_files(end)
        self.queue.flushed_where = self.queue.committed_where = end
        first = self.queue.get_first_mapped_file()
        if first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
        return restart

    def _damage(self, tail, readers, clean_written: int, log_limit: int, commitlog) -> int | None:
        """`damage_restart` of the entries of the segments `tail` (their data in `readers`);
        `clean_written`: the last segment's written entries when nothing but zeros follows
        them (the bytes then end there, found without a scan for the last non-zero byte)."""
        parts = [r.data.ljust(mf.file_size, b"\0") for mf, r in zip(tail[:-1], readers[:-1])]
        last = readers[-1].data
        parts.append(last[:clean_written * UNIT_SIZE] if clean_written else last)
        return damage_restart(self.topic, self.queue_id, b"".join(parts), log_limit,
                              clean_written > 0, commitlog, tail[0].file_from_offset // UNIT_SIZE)

    def _read_data(self, mf, whole: bool):
        """A reader of segment `mf`: its data in memory (one pread; holes read as zero) when
        `whole` or when it ends within 64 KiB (a queue's last segment: a block or a few), else
        the open file (`FileReader`, closed by the caller)."""
        file_reader = self.queue.fileops.open_reader(mf.path)
        try:
            reader = _small_in_memory(file_reader, mf.file_size, mf.file_size if whole else 1 << 16)
        except BaseException:
            file_reader.close()
            raise
        if reader is not file_reader:
            file_reader.close()
        return reader

    def _valid_prefix(self, reader, file_size: int) -> tuple[int, int, int | None]:
        """(how many leading entries of a segment are valid, how many are written, the end of
        the newest real entry among the valid ones or None).

        Entries are written densely from a segment's start and nothing is written past them,
        so the written ones are found by a binary search for the first entry of size 0
        (`written_end`: at most 19 entries read in a 300,000-entry segment), and the last
        TAIL_ENTRIES of them are checked, as RocketMQ's scan would, for an invalid entry (a
        torn write); entries before the tail were flushed before them (after a crash, the
        abnormal recovery's re-dispatch compares every entry it rewrites). A tail of fillers
        only (a queue that starts late) is scanned back from there for the newest real entry."""
        written = written_end(reader, 0, file_size) // UNIT_SIZE
        lo = max(0, written - TAIL_ENTRIES)
        valid, real_end = _check_entries(reader, lo, written)
        while real_end is None and lo > 0:
            hi, lo = lo, max(0, lo - _RECOVER_CHUNK)
            _, real_end = _check_entries(reader, lo, hi)
        return valid, written, real_end

    def _file_entries(self, mf, upto: int) -> np.ndarray:
        buf = self.queue.hold(mf)
        if buf is None:
            return np.zeros(0, ENTRY_DTYPE)
        try:
            return np.frombuffer(bytes(buf[:upto - upto % UNIT_SIZE]), ENTRY_DTYPE)
        finally:
            mf.release()

    # -- writing -------------------------------------------------------------------------
    def put_message_position_info(self, phys: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Write entry `cq_offset`; skip it when identical, truncate here when it differs."""
        expect = cq_offset * UNIT_SIZE
        max_bytes = self.queue.get_max_offset()
        entry = ENTRY.pack(phys, size, tags_code)
        if expect < max_bytes:
            if expect < self.min_logic_offset:
                return True                                  # below the queue's start: gone already
            if self.queue.read(expect, UNIT_SIZE) == entry:
                return True                                  # repeated dispatch
            log.warning("consume queue %s-%d: entry %d differs from the CommitLog; truncating there",
                        self.topic, self.queue_id, cq_offset)
            self.min_entry_phys = None
            self.queue.truncate_dirty_files(expect)
            max_bytes = expect
        if max_bytes == 0:
            self.min_logic_offset = expect                 # an empty queue starts at its first entry
        mf = self.queue.get_last_mapped_file(expect, create=True)
        if mf.file_from_offset + mf.wrote_position < expect:
            self._fill_blanks(mf, expect, first=max_bytes == 0)
        mf = self.queue.get_last_mapped_file(expect, create=True)
        pos = mf.wrote_position
        self.queue.write(mf, pos, entry)
        mf.wrote_position = mf.committed_position = pos + UNIT_SIZE
        self.max_physic_offset = phys + size
        return True

    def put_entries(self, first: int, entries: bytes, max_physic_offset: int) -> None:
        """Write the packed entries `entries` as entries first, first + 1, ... Entries already
        there and identical are skipped with one comparison; entries that simply extend the
        queue are one copy per segment; an entry that cannot (the queue's first, the first of
        a new segment, a conflict, a gap) goes through `put_message_position_info`, then the
        copies resume."""
        expect = first * UNIT_SIZE
        max_bytes = self.queue.get_max_offset()
        if self.min_logic_offset <= expect < max_bytes:
            # A repeated dispatch (recovery from an older point): skip the leading entries
            # that are there already, identical, in one comparison.
            same = min(len(entries), max_bytes - expect)
            if self.queue.read(expect, same) == entries[:same]:
                if same == len(entries):
                    return
                entries, expect = entries[same:], expect + same
        at = 0
        while at < len(entries):
            mf = self.queue.get_last_mapped_file()
            if mf is not None and expect > 0 and mf.file_from_offset + mf.wrote_position == expect \
                    and mf.wrote_position < mf.file_size and expect >= self.min_logic_offset:
                pos = mf.wrote_position
                n = min(len(entries) - at, mf.file_size - pos)
                self.queue.write(mf, pos, entries[at:at + n] if at or n < len(entries) else entries)
                mf.wrote_position = mf.committed_position = pos + n
                at, expect = at + n, expect + n
                if at == len(entries):
                    self.max_physic_offset = max_physic_offset
                else:
                    phys, size, _ = ENTRY.unpack_from(entries, at - UNIT_SIZE)
                    self.max_physic_offset = phys + size
                continue
            phys, size, tags_code = ENTRY.unpack_from(entries, at)
            self.put_message_position_info(phys, size, tags_code, expect // UNIT_SIZE)
            at, expect = at + UNIT_SIZE, expect + UNIT_SIZE

    def repair_entry(self, index: int, phys: int, size: int, tags_code: int) -> bool:
        """Write entry `index` again in place, durably, as its record in the CommitLog says
        (`core.read.rederive`: a pull found it damaged); the entries after it stay. False when
        the entry is not in the queue."""
        offset = index * UNIT_SIZE
        if not self.min_logic_offset <= offset < self.queue.get_max_offset():
            return False
        mf = self.queue.find_mapped_file_by_offset(offset)
        if mf is None or self.queue.hold(mf) is None:
            return False
        try:
            mf.write(offset - mf.file_from_offset, ENTRY.pack(phys, size, tags_code))
            mf.mapping.flush()
        finally:
            mf.release()
        log.warning("consume queue %s-%d: entry %d written again from the CommitLog (offset %d, "
                    "size %d)", self.topic, self.queue_id, index, phys, size)
        return True

    def _fill_blanks(self, mf, expect: int, first: bool) -> None:
        """Fill up to `expect` with filler entries: the queue starts late (its head expired) or has a gap."""
        if not first:
            log.warning("consume queue %s-%d: gap before entry %d; filling",
                        self.topic, self.queue_id, expect // UNIT_SIZE)
        while mf.file_from_offset + mf.wrote_position < expect:
            lo = mf.wrote_position
            hi = min(mf.file_size, expect - mf.file_from_offset)
            self.queue.write(mf, lo, ENTRY.pack(0, BLANK_SIZE, 0) * ((hi - lo) // UNIT_SIZE))
            mf.wrote_position = mf.committed_position = hi
            if first:
                self.min_logic_offset = expect
            mf = self.queue.get_last_mapped_file(expect, create=True)

    def flush(self, least_pages: int = 0) -> bool:
        return self.queue.flush(least_pages)

    # -- reading -------------------------------------------------------------------------
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.queue.get_max_offset() // UNIT_SIZE

    def get_entries(self, index: int, max_count: int) -> bytes | None:
        """Raw entries from `index` up to the end of its segment (at most max_count); None if gone."""
        offset = index * UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        n = min(max_count * UNIT_SIZE, mf.read_position - pos)
        if n <= 0:
            return None
        if not mf.is_mapped:
            # A cold segment is read with pread, not mapped: mapping it into the window (an
            # open and an mmap, and the munmap of the oldest segment there) was 40 us of the
            # 80 us of a pull from one of 10,000 one-message queues.
            try:
                with self.queue.fileops.open_reader(mf.path) as reader:
                    return reader.read(pos, n - n % UNIT_SIZE)
            except FileNotFoundError:
                pass                       # deleted meanwhile: the mapped read says what is left
        return self.queue.read(offset, n - n % UNIT_SIZE)

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        raw = self.get_entries(index, 1)
        return ENTRY.unpack(raw) if raw else None

    def roll_next_file(self, index: int) -> int:
        return index + self.units_per_file - index % self.units_per_file

    def last_entry(self) -> tuple[int, int, int] | None:
        n = self.get_max_offset_in_queue()
        return self.get_entry(n - 1) if n > self.get_min_offset_in_queue() else None

    def get_offset_in_queue_by_time(self, timestamp: int, store_time_of) -> int:
        """The first entry stored at or after `timestamp` (RocketMQ's LOWER boundary): the min
        offset when every entry is later, the max offset when every entry is earlier.
        `store_time_of(phys, size)` reads a record's store timestamp (-1 when unreadable)."""
        low, high = self.get_min_offset_in_queue(), self.get_max_offset_in_queue()
        while low < high:
            mid = (low + high) // 2
            entry = self.get_entry(mid)
            ts = store_time_of(entry[0], entry[1]) if entry and entry[1] != BLANK_SIZE else -1
            if ts < timestamp:
                low = mid + 1
            else:
                high = mid
        return low

    # -- truncation and expiry -----------------------------------------------------------
    def truncate_dirty_logic_files(self, phys_offset: int) -> None:
        """Drop every entry whose record starts at or past `phys_offset`."""
        cut = None
        for mf in reversed(self.queue.files):
            entries = self._file_entries(mf, mf.wrote_position)
            real = entries["size"] != BLANK_SIZE
            if not real.any():
                continue                                   # empty or blanks only: look further back
            beyond = np.flatnonzero(real & (entries["phys"] >= phys_offset))
            if len(beyond) == 0:
                break
            cut = mf.file_from_offset + int(beyond[0]) * UNIT_SIZE
            if beyond[0] != np.flatnonzero(real)[0]:
                break                                      # this segment keeps some entries
        if cut is not None:
            self.min_entry_phys = None
            self.queue.truncate_dirty_files(cut)
        last = self.last_entry()
        self.max_physic_offset = last[0] + last[1] if last and last[1] != BLANK_SIZE else -1

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move the queue's start to the first entry whose record still exists in the CommitLog."""
        low, high = self.get_min_offset_in_queue(), self.get_max_offset_in_queue()
        known = self.min_entry_phys
        if known is not None and known[0] == low and known[1] >= min_commitlog_offset:
            return                             # the queue's first entry is still there
        while low < high:
            mid = (low + high) // 2
            entry = self.get_entry(mid)
            if entry is None or entry[1] == BLANK_SIZE or entry[0] < min_commitlog_offset:
                low = mid + 1
            else:
                high = mid
        self.min_logic_offset = max(self.min_logic_offset, low * UNIT_SIZE)
        first = self.get_entry(self.get_min_offset_in_queue())
        # Remembered with its position, so that a queue truncated and written again is
        # searched again: the store calls this for every queue at every start and clean-up.
        self.min_entry_phys = ((self.get_min_offset_in_queue(), first[0])
                               if first is not None and first[1] != BLANK_SIZE else None)

    def delete_expired_file(self, min_commitlog_offset: int) -> int:
        deleted = self.queue.delete_expired_file_by_offset(min_commitlog_offset, UNIT_SIZE)
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def destroy(self) -> None:
        self.queue.destroy()
        self.min_entry_phys = None
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    def shutdown(self) -> None:
        self.queue.shutdown()
