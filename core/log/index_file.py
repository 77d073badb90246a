"""One index file: a hash table on disk from message keys to CommitLog offsets (DESIGN.md 3).

Owns the byte layout of RocketMQ's IndexFile, big-endian:

    header, 40 bytes:  begin ts 8 | end ts 8 | begin phys 8 | end phys 8 |
                       hash slot count 4 (slots that became non-empty) | index count 4 (starts at 1)
    slots:             hash_slot_num x int32, the newest entry number of the slot, 0 = empty
    entries:           index_num x 20 bytes: key hash 4 | phys offset 8 | seconds since begin ts 4 |
                       previous entry number in the same slot 4 (0 = end of chain); entry 0 unused

The mapped buffer is the only copy of the header: every put rewrites it in place, so a reader
in another process mapping the same file sees the header as of the last put (a batch of
keys, `put_hashed`, writes it once at its end; entries and slots go first, and a slot that
points past the header's count is followed back through its entries' links). `flush` makes
the whole file durable.

The file has its full size from creation (RocketMQ reads it as it is: zeros where nothing was
written) but takes disk as it fills: header and slot table get their blocks at creation, the
entry area `ALLOCATE_STEP` bytes at a time ahead of the writer (`posix_fallocate`, through
`Mapping.allocate`), so a store with few keys does not pay 420 MB of disk for its index, and a
full disk is an OSError(ENOSPC) before an entry is written, never a SIGBUS at a store into a
hole. Allocated whole, an index file cost 420 MB of disk for any number of keys; now 20 MB
(the slot table) plus what is written, rounded up to the step. Only key hashes are stored: a lookup can return the offset of a
different key with the same Java hash, and callers re-check the key on the record they read.

`truncate` is ours, not RocketMQ's: it undoes appends from the newest backwards so that after
recovery the index never points past the recovered CommitLog. An end timestamp restored by a
truncate is the last remaining entry's time as stored (whole seconds after the begin time).
"""
from __future__ import annotations

import os
import struct

import numpy as np

from core.record.hashing import index_key_hash

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
INT32_MAX = (1 << 31) - 1
ALLOCATE_STEP = 1 << 20              # entry-area bytes allocated ahead of the writer (52,428 entries)

_HEADER = struct.Struct(">qqqqii")   # begin ts, end ts, begin phys, end phys, slot count, count
_ENTRY = struct.Struct(">iqii")      # key hash, phys offset, time diff (s), prev index
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BEGIN_TS_POS, _END_TS_POS, _BEGIN_PHY_POS, _END_PHY_POS = 0, 8, 16, 24
_SLOT_COUNT_POS, _INDEX_COUNT_POS = 32, 36
_ZERO_ENTRY = bytes(ENTRY_SIZE)
_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phys", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_SLOT_DTYPE = np.dtype(">i4")
NUMPY_MIN_KEYS = 16                  # fewer keys are put one at a time (numpy's call overhead)
_FRESH_HEADER = (0, 0, 0, 0, 0, 1)


def _ints(column, start: int, stop: int) -> list:
    """column[start:stop] as a list of Python ints (the column a list or a numpy array)."""
    part = column[start:stop]
    return part.tolist() if isinstance(part, np.ndarray) else part


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Bytes of an index file: header, slots, entries (entry 0 included, never used)."""
    return HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE


class IndexFile:
    """A mapped index file of `hash_slot_num` slots and room for `index_num - 1` entries.

    `create=True` creates the file (zero-filled, blocks for header, slots and a first step of
    entries) through `fileops` and writes a fresh header; its begin/end phys offset and timestamps start from `prev_end_phy_offset` and
    `prev_end_timestamp` when those are > 0 (the previous file's end values). Otherwise the
    existing file is mapped; a file of the wrong size is refused with ValueError.
    """

    def __init__(self, path: str, hash_slot_num: int, index_num: int, fileops, create: bool = False,
                 prev_end_phy_offset: int = 0, prev_end_timestamp: int = 0):
        if hash_slot_num <= 0 or index_num <= 1:
            raise ValueError(f"index file needs hash_slot_num >= 1 and index_num >= 2, "
                             f"got {hash_slot_num} and {index_num}")
        self.path = path
        self.name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.size = index_file_size(hash_slot_num, index_num)
        self._fileops = fileops
        self._entries_pos = HEADER_SIZE + hash_slot_num * SLOT_SIZE
        if create:
            self._allocated = min(self.size, self._entries_pos + ALLOCATE_STEP)
            fileops.create_file(path, self.size, allocate=self._allocated)
        else:
            actual = os.path.getsize(path)
            if actual != self.size:
                raise ValueError(
                    f"index file {path} has {actual} bytes, expected {self.size} for "
                    f"{hash_slot_num} hash slots and {index_num} entries (wrong file or settings)")
        self._mapping = fileops.map_file(path, self.size)
        if not create:
            # Entries below the count were written, so have blocks; the first put allocates
            # from there (a range allocated already costs nothing).
            self._allocated = self._entry_pos(self.index_count)
        if create:
            # Keys land in random slots: fault the whole slot table in now, in one call,
            # rather than a page at a time on the first puts.
            self._mapping.populate(self._entries_pos)
            self._write_fresh_header(prev_end_phy_offset, prev_end_timestamp)

    # ---- header ------------------------------------------------------------------------

    def _header(self) -> tuple[int, int, int, int, int, int]:
        *fields, count = _HEADER.unpack_from(self._mapping.buf, 0)
        return (*fields, self._valid_count(count))

    def _valid_count(self, stored: int) -> int:
        # A stored count <= 0 reads as 1 (RocketMQ); one past the capacity (corrupt) as full.
        return min(max(stored, 1), self.index_num)

    def _write_fresh_header(self, end_phy_offset: int, end_timestamp: int) -> None:
        phy = end_phy_offset if end_phy_offset > 0 else 0
        ts = end_timestamp if end_timestamp > 0 else 0
        _HEADER.pack_into(self._mapping.buf, 0, ts, ts, phy, phy, 0, 1)

    @property
    def begin_timestamp(self) -> int:
        return _I64.unpack_from(self._mapping.buf, _BEGIN_TS_POS)[0]

    @property
    def end_timestamp(self) -> int:
        return _I64.unpack_from(self._mapping.buf, _END_TS_POS)[0]

    @property
    def begin_phy_offset(self) -> int:
        return _I64.unpack_from(self._mapping.buf, _BEGIN_PHY_POS)[0]

    @property
    def end_phy_offset(self) -> int:
        return _I64.unpack_from(self._mapping.buf, _END_PHY_POS)[0]

    @property
    def hash_slot_count(self) -> int:
        return _I32.unpack_from(self._mapping.buf, _SLOT_COUNT_POS)[0]

    @property
    def index_count(self) -> int:
        """The next entry number: 1 + the number of entries (a stored value <= 0 reads as 1)."""
        return self._valid_count(_I32.unpack_from(self._mapping.buf, _INDEX_COUNT_POS)[0])

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def closed(self) -> bool:
        return self._mapping is None or self._mapping.closed

    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] (ms) overlaps [begin timestamp, end timestamp] of this file."""
        f_begin, f_end = self.begin_timestamp, self.end_timestamp
        return ((begin < f_begin and end > f_end) or f_begin <= begin <= f_end
                or f_begin <= end <= f_end)

    # ---- writing -----------------------------------------------------------------------

    def _slot_pos(self, key_hash: int) -> int:
        return HEADER_SIZE + (key_hash % self.hash_slot_num) * SLOT_SIZE

    def _entry_pos(self, index: int) -> int:
        return self._entries_pos + index * ENTRY_SIZE

    def put_key(self, key: str, phys_offset: int, store_timestamp: int) -> bool:
        """Append an entry for `key`; False (and nothing written) when the file is full."""
        return self.put_hashed([index_key_hash(key)], [phys_offset], [store_timestamp], 0) == 1

    def put_hashed(self, hashes, offsets, timestamps, start: int) -> int:
        """Append entries for hashes[start:] (key hashes, with their records' phys offsets and
        store times; lists or int64 arrays) until the file is full; return the position of the
        first one not put.

        Entries are written before the slots that point at them, and the header once at the
        end: a writer killed in between leaves slots pointing past the header's count, at whole
        entries whose chains lead back below it (`_live_head` follows them). `NUMPY_MIN_KEYS`
        keys or more are put together with numpy (one copy for the entries, one scatter for
        the slots), fewer one at a time; both write the same bytes. Raises OSError(ENOSPC),
        with nothing written, when the disk has no room for the entries (`_allocate_upto`).
        """
        header = self._header()
        stop = min(len(hashes), start + self.index_num - header[5])
        if stop <= start:
            return start
        self._allocate_upto(self._entry_pos(header[5] + stop - start))
        put = self._put_numpy if stop - start >= NUMPY_MIN_KEYS else self._put_each
        begin_ts, begin_phy, slot_count, count = put(hashes, offsets, timestamps, start, stop,
                                                     header)
        _HEADER.pack_into(self._mapping.buf, 0, begin_ts, int(timestamps[stop - 1]), begin_phy,
                          int(offsets[stop - 1]), slot_count, count)
        return stop

    def _allocate_upto(self, end: int) -> None:
        """Make sure bytes below `end` have blocks, allocating at least `ALLOCATE_STEP` more
        (page-aligned, within the file); OSError(ENOSPC) on a full disk, nothing written."""
        if end <= self._allocated:
            return
        new_end = min(self.size, -(-max(end, self._allocated + ALLOCATE_STEP) // 4096) * 4096)
        self._mapping.allocate(self._allocated, new_end)
        self._allocated = new_end

    def _put_each(self, hashes, offsets, timestamps, start: int, stop: int, header) -> tuple:
        """Entries and slots of keys [start, stop), one at a time; (begin ts, begin phys, slot
        count, count) for the header."""
        buf = self._mapping.buf
        begin_ts, _, begin_phy, _, slot_count, count = header
        slots, entries = self.hash_slot_num, self._entries_pos
        read_i32, write_i32, write_entry = _I32.unpack_from, _I32.pack_into, _ENTRY.pack_into
        for key_hash, phys, ts in zip(*(_ints(column, start, stop)
                                        for column in (hashes, offsets, timestamps))):
            slot_pos = HEADER_SIZE + (key_hash % slots) * SLOT_SIZE
            head = read_i32(buf, slot_pos)[0]
            if not 0 <= head < count:
                head = self._live_head(head, count)
            if count <= 1:
                # The first entry sets the file's begin values before its own time diff is
                # taken, so that its stored time is exact (RocketMQ takes it against the seed).
                begin_ts, begin_phy = ts, phys
            diff = 0 if begin_ts <= 0 else min(max((ts - begin_ts) // 1000, 0), INT32_MAX)
            write_entry(buf, entries + count * ENTRY_SIZE, key_hash, phys, diff, head)
            write_i32(buf, slot_pos, count)
            if head == 0:
                slot_count += 1
            count += 1
        return begin_ts, begin_phy, slot_count, count

    def _put_numpy(self, hashes, offsets, timestamps, start: int, stop: int, header) -> tuple:
        """`_put_each` for many keys: sorted stably by slot, each entry links to the one before
        it in its slot, the first of a slot to the slot's live head; the entries are written
        into the mapping a column at a time, then each slot gets its last entry."""
        buf = self._mapping.buf
        begin_ts, _, begin_phy, _, slot_count, count = header
        m = stop - start
        key_hash = np.asarray(hashes[start:stop], np.int64)
        phys = np.asarray(offsets[start:stop], np.int64)
        ts = np.asarray(timestamps[start:stop], np.int64)
        if count <= 1:
            begin_ts, begin_phy = int(ts[0]), int(phys[0])     # as in `_put_each`
        slot = key_hash % self.hash_slot_num
        order = np.argsort(slot, kind="stable")
        slot_sorted = slot[order]
        edges = np.empty(m, bool)
        edges[0] = True
        np.not_equal(slot_sorted[1:], slot_sorted[:-1], out=edges[1:])
        firsts = np.flatnonzero(edges)
        lasts = np.empty_like(firsts)
        lasts[:-1] = firsts[1:] - 1
        lasts[-1] = m - 1
        table = np.frombuffer(buf, _SLOT_DTYPE, self.hash_slot_num, HEADER_SIZE)
        rows = None
        try:
            slots = slot_sorted[firsts]
            heads = table[slots].astype(np.int64)
            stale = np.flatnonzero(heads.view(np.uint64) >= count)     # or negative
            for i in stale.tolist():
                heads[i] = self._live_head(int(heads[i]), count)
            prev_sorted = np.empty(m, np.int64)
            prev_sorted[1:] = order[:-1] + count          # entry k is number count + k
            prev_sorted[firsts] = heads
            prev = np.empty(m, np.int64)
            prev[order] = prev_sorted
            rows = np.frombuffer(buf, _ENTRY_DTYPE, m, self._entries_pos + count * ENTRY_SIZE)
            rows["hash"], rows["phys"], rows["prev"] = key_hash, phys, prev
            if begin_ts <= 0:
                rows["diff"] = 0
            else:
                diff = (ts - begin_ts) // 1000
                rows["diff"] = np.minimum(np.maximum(diff, 0, out=diff), INT32_MAX, out=diff)
            table[slots] = order[lasts] + count
        finally:
            del table, rows
        return begin_ts, begin_phy, slot_count + int(np.count_nonzero(heads == 0)), count + m

    def _live_head(self, head: int, count: int) -> int:
        """The newest entry below `count` in the chain a slot value `head` starts (0: none).
        A value at or past `count` was left by a writer killed before it wrote the header: the
        entry it points at is whole, and its previous-entry links lead back to the live chain.
        Cutting there instead would lose every older entry of the slot."""
        buf = self._mapping.buf
        while head >= count:
            if head >= self.index_num:
                return 0
            prev = _I32.unpack_from(buf, self._entry_pos(head) + 16)[0]
            if not 0 <= prev < head:
                return 0
            head = prev
        return max(head, 0)

    def flush(self) -> None:
        """Make header, slots and entries durable (the header is kept in the buffer itself)."""
        self._mapping.flush(0, self.size)

    # ---- reading -----------------------------------------------------------------------

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets stored for `key`'s hash with a store time in [begin, end] ms, newest first.

        The key hash is re-checked against each entry, but different keys can share a hash:
        the caller must compare the key of the record it reads at each offset.
        """
        out: list[int] = []
        for phys, time_read in self._chain(key, begin):
            if len(out) >= max_num:
                break
            if time_read <= end:
                out.append(phys)
        return out

    def _chain(self, key: str, begin: int):
        """Yield (phys offset, time) of `key`'s hash, newest first, while time >= begin.

        Entries whose time is below `begin` end the walk; entries with another hash in the
        same slot are skipped. A chain pointer that does not go strictly backwards ends it.
        """
        buf = self._mapping.buf
        begin_ts, count = self.begin_timestamp, self.index_count
        key_hash = index_key_hash(key)
        index = _I32.unpack_from(buf, self._slot_pos(key_hash))[0]
        if index >= count:
            index = self._live_head(index, count)       # a put in progress (or killed)
        if count <= 1 or index <= 0:
            return
        while True:
            entry_hash, phys, diff, prev = _ENTRY.unpack_from(buf, self._entry_pos(index))
            if diff < 0:
                return
            time_read = begin_ts + diff * 1000
            if time_read < begin:
                return
            if entry_hash == key_hash:
                yield phys, time_read
            if prev <= 0 or prev >= index:
                return
            index = prev

    def tail_count(self, phys_offset: int) -> int:
        """How many of the newest entries, counting back from the last, are at `phys_offset`."""
        buf = self._mapping.buf
        index, found = self.index_count - 1, 0
        while index >= 1 and _I64.unpack_from(buf, self._entry_pos(index) + 4)[0] == phys_offset:
            found += 1
            index -= 1
        return found

    # ---- truncation --------------------------------------------------------------------

    def truncate(self, phys_offset: int) -> int:
        """Remove every entry whose phys offset is >= `phys_offset`; return how many.

        Walks from the newest entry backwards and undoes each append: the entry's slot gets
        back the entry's previous index, the slot count drops when that empties the slot,
        and the entry is zeroed. The header's end values come from the new last entry. A
        file left with no entry gets a fresh header if its (possibly seeded) end phys offset
        was at or past the cut. The result is flushed before this returns.
        """
        buf = self._mapping.buf
        header = self._header()
        begin_ts, _, begin_phy, end_phy, slot_count, count = header
        index = count - 1
        while index >= 1:
            entry_pos = self._entry_pos(index)
            key_hash, phys, _, prev = _ENTRY.unpack_from(buf, entry_pos)
            if phys < phys_offset:
                break
            slot_pos = self._slot_pos(key_hash)
            _I32.pack_into(buf, slot_pos, prev)
            if prev == 0:
                slot_count -= 1
            buf[entry_pos:entry_pos + ENTRY_SIZE] = _ZERO_ENTRY
            index -= 1
        removed = count - 1 - index
        if index >= 1:
            if removed == 0:
                return 0
            _, end_phy, diff, _ = _ENTRY.unpack_from(buf, self._entry_pos(index))
            end_ts = begin_ts + diff * 1000 if begin_ts > 0 else begin_ts
            _HEADER.pack_into(buf, 0, begin_ts, end_ts, begin_phy, end_phy, slot_count, index + 1)
        elif removed or (end_phy >= phys_offset and header != _FRESH_HEADER):
            _HEADER.pack_into(buf, 0, *_FRESH_HEADER)
        else:
            return 0
        self.flush()
        return removed

    def seed(self, prev_end_phy_offset: int, prev_end_timestamp: int) -> None:
        """Set an empty file's begin/end values from the previous file's end values, durably."""
        if self.index_count > 1:
            raise ValueError(f"index file {self.path} holds entries; only an empty file is seeded")
        self._write_fresh_header(prev_end_phy_offset, prev_end_timestamp)
        self.flush()

    # ---- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        if self._mapping is not None:
            self._mapping.close()
            self._mapping = None

    def destroy(self) -> None:
        """Unmap and delete the file (its blocks are freed in the background)."""
        self.close()
        self._fileops.unlink_soon(self.path)

    def __repr__(self) -> str:
        return f"IndexFile({self.name!r}, count={self.index_count if not self.closed else '-'})"
