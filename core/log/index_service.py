"""The index directory: the list of `IndexFile`s, which keys a record gets, and queries by key.

Owns `<store_root>/index/`: files named by their creation local time `yyyyMMddHHmmssSSS`
(bumped by 1 ms when a name is taken, so names stay unique and sort in creation order),
loading and abnormal-exit cleanup, rolling to a new file when the last one is full, queries
newest file first, truncation back to a recovered CommitLog end, and expiry.

A record is indexed under `topic#uniq_key` (when it has one) and `topic#k` for every non-empty
token of its space-separated KEYS; rolled-back transaction records are not (prepared ones are,
as in RocketMQ, though they enter no consume queue).
Building is idempotent: a record at or before the newest indexed offset is skipped, except
that keys of the newest record that are missing (an interrupted build) are added.

`last_flushed_index_timestamp` is the value the store writes into the checkpoint's index
field: the end timestamp of the newest file that is full and flushed. After an abnormal exit
`load` destroys the first file ending later than it and every file after it, and recovery
re-dispatches from where that file began (`rebuild_from`).
"""
from __future__ import annotations

import os
import re
import threading
import time
from bisect import bisect_left, bisect_right
from datetime import datetime, timedelta

from core.files.fileops import TMP_SUFFIX
from core.record.hashing import index_key_hashes
from core.log.index_file import IndexFile
from core.record.message import (
    KEY_SEPARATOR, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_ROLLBACK,
)

MAX_MSGS_NUM_BATCH = 64
_NAME_RE = re.compile(r"\d{17}")


def build_key(topic: str, key: str) -> str:
    """The indexed form of a key: `topic#key`."""
    return f"{topic}#{key}"


def index_keys(req) -> list[str]:
    """The keys a dispatched record is indexed under, in the order they are put."""
    keys = [build_key(req.topic, req.uniq_key)] if req.uniq_key else []
    keys.extend(build_key(req.topic, k) for k in (req.keys or "").split(KEY_SEPARATOR) if k)
    return keys


def time_file_name(ms: int) -> str:
    """`yyyyMMddHHmmssSSS` of a millisecond epoch time, in local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def next_file_name(name: str) -> str:
    """The name 1 ms after `name` (calendar arithmetic on the name itself)."""
    dt = datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(microsecond=int(name[14:17]) * 1000)
    dt += timedelta(milliseconds=1)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class IndexService:
    """The index files of one store, oldest first. Call `load` once before anything else."""

    def __init__(self, index_dir: str, hash_slot_num: int, index_num: int, fileops,
                 max_msgs_num_batch: int = MAX_MSGS_NUM_BATCH, clock_ms=_now_ms):
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.max_msgs_num_batch = max_msgs_num_batch
        self.last_flushed_index_timestamp = 0
        self.rebuild_from: int | None = None    # where recovery must index the log again from
        self._fileops = fileops
        self._clock_ms = clock_ms
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()       # guards the list against roll/truncate/expiry

    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the loaded files, oldest first."""
        return list(self._files)

    # ---- load --------------------------------------------------------------------------

    def load(self, last_exit_ok: bool, checkpoint_index_ts: int) -> None:
        """Map every index file, sorted by name; drop newer files after an abnormal exit.

        `*.tmp` leftovers of an interrupted creation are deleted. A name that is not 17 digits
        or a file of the wrong size stops the load with ValueError naming the file. After an
        abnormal exit a file whose end timestamp is later than `checkpoint_index_ts` may be
        incomplete: it is destroyed with the files after it, and recovery re-dispatches their
        records from `rebuild_from`.
        """
        with self._lock:
            if self._files:
                raise RuntimeError(f"index service for {self.index_dir} is already loaded")
            self.last_flushed_index_timestamp = checkpoint_index_ts
            if not os.path.isdir(self.index_dir):
                return
            self._fileops.remove_leftovers(self.index_dir)
            names = sorted(n for n in os.listdir(self.index_dir)     # a read-only load (a check)
                           if os.path.isfile(os.path.join(self.index_dir, n))  # keeps leftovers:
                           and not n.endswith(TMP_SUFFIX))                        # skip them
            for name in names:
                if not _NAME_RE.fullmatch(name):
                    raise ValueError(f"unexpected file {os.path.join(self.index_dir, name)} in the "
                                     f"index directory (index files are named yyyyMMddHHmmssSSS)")
            loaded: list[IndexFile] = []
            try:
                for name in names:
                    loaded.append(IndexFile(os.path.join(self.index_dir, name), self.hash_slot_num,
                                            self.index_num, self._fileops))
            except BaseException:
                for f in loaded:
                    f.close()
                raise
            self._files = loaded
            if not last_exit_ok:
                self._drop_unflushed(checkpoint_index_ts)

    def _drop_unflushed(self, checkpoint_index_ts: int) -> None:
        """After an abnormal exit: destroy the first file ending later than the checkpoint's
        index timestamp and every file after it, and set `rebuild_from` to where the first of
        them began, so that recovery re-dispatches the log from there. A file whose header a
        flip made look newer than the checkpoint is then rebuilt from the CommitLog with the
        files after it; destroying it alone lost its keys (399 in issue 33's campaign), as
        recovery re-dispatched only from the checkpoint."""
        for i, f in enumerate(self._files):
            if f.end_timestamp > checkpoint_index_ts:
                break
        else:
            return
        self.rebuild_from = max(0, self._files[i].begin_phy_offset)
        for f in self._files[i:]:
            f.destroy()
        del self._files[i:]
        full = [f for f in self._files if f.is_full]
        self.last_flushed_index_timestamp = min(checkpoint_index_ts, full[-1].end_timestamp if full else 0)

    # ---- build -------------------------------------------------------------------------

    def build_index(self, req) -> None:
        """Index one dispatched record (a `DispatchRequest`)."""
        if req.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK:
            return                       # RocketMQ indexes prepared records, not rolled-back ones
        keys = index_keys(req)
        self.build_batch(keys, [req.commit_log_offset] * len(keys),
                         [req.store_timestamp] * len(keys))

    def build_batch(self, keys, offsets, timestamps, prefix: str = "") -> None:
        """Index `prefix + keys[i]` (built by `build_key`) for the record at `offsets[i]` stored
        at `timestamps[i]` (lists or int64 arrays); the records in log order, each record's keys
        in `index_keys` order. `keys` is a list of strings or, for ASCII keys, a matrix of their
        bytes (numpy uint8, one key a row; see `core.record.hashing.index_key_hashes`).

        Keys of records already indexed are skipped (see the module docstring). Raises OSError
        when a new file cannot be created or the last one cannot grow (a full disk); the keys put before that stay, and
        re-dispatching the records adds the missing ones.
        """
        start = self._first_not_indexed(offsets)
        if start >= len(keys):
            return
        hashes = index_key_hashes(keys[start:] if start else keys, prefix)
        if start:
            offsets, timestamps = offsets[start:], timestamps[start:]
        f = self._files[-1] if self._files and not self._files[-1].is_full else self._roll()
        done = f.put_hashed(hashes, offsets, timestamps, 0)
        while done < len(hashes):
            done = self._roll().put_hashed(hashes, offsets, timestamps, done)

    def _first_not_indexed(self, offsets) -> int:
        """How many of the leading keys (at `offsets`, in log order) are indexed already."""
        if not self._files or not len(offsets):
            return 0
        last = self._files[-1]
        end = last.end_phy_offset
        if offsets[0] > end:
            return 0
        at = bisect_left(offsets, end)
        if at == len(offsets) or offsets[at] != end:
            return at
        if last.index_count <= 1 and end <= 0:
            return at                       # a fresh file: the record at offset 0 is new
        # The newest indexed record again: its keys are put in order, so the entries at its
        # offset at the end of the index are a prefix of them; put the rest (an interrupted
        # build). Counting entries, not looking keys up, is immune to hash collisions.
        return at + min(self._tail_count(end), bisect_right(offsets, end) - at)

    def _tail_count(self, offset: int) -> int:
        # The newest record's entries may span the last two files (or more, with tiny files).
        found = 0
        for f in reversed(self._files):
            n = f.tail_count(offset)
            found += n
            if n < f.index_count - 1:
                break
        return found

    def _roll(self) -> IndexFile:
        """Create the next file (seeded from the last one's end values) and flush the full one."""
        with self._lock:
            prev = self._files[-1] if self._files else None
            self._fileops.make_dirs(self.index_dir)
            name = self._new_file_name()
            f = IndexFile(os.path.join(self.index_dir, name), self.hash_slot_num, self.index_num,
                          self._fileops, create=True,
                          prev_end_phy_offset=prev.end_phy_offset if prev else 0,
                          prev_end_timestamp=prev.end_timestamp if prev else 0)
            self._files.append(f)
        if prev is not None:
            prev.flush()
            self.last_flushed_index_timestamp = prev.end_timestamp
        return f

    def _new_file_name(self) -> str:
        name = time_file_name(self._clock_ms())
        if self._files and name <= self._files[-1].name:
            name = next_file_name(self._files[-1].name)
        while os.path.exists(os.path.join(self.index_dir, name)):
            name = next_file_name(name)
        return name

    # ---- query -------------------------------------------------------------------------

    def query_offset(self, topic: str, key: str, max_num: int, begin: int,
                     end: int) -> tuple[list[int], int, int]:
        """CommitLog offsets of records indexed under `topic#key` stored in [begin, end] ms.

        Returns (offsets newest first, newest file's end timestamp, newest file's end phys
        offset). At most min(max_num, max_msgs_num_batch) offsets; only key hashes are
        stored, so the caller re-checks the key of each record it reads.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        found: list[int] = []
        with self._lock:
            if not self._files:
                return found, 0, 0
            newest = self._files[-1]
            last_ts, last_phy = newest.end_timestamp, newest.end_phy_offset
            full_key = build_key(topic, key)
            for f in reversed(self._files):
                if len(found) >= max_num:
                    break
                if f.index_count <= 1:
                    continue
                if f.is_time_matched(begin, end):
                    found.extend(f.select_phy_offsets(full_key, max_num - len(found), begin, end))
                if f.begin_timestamp < begin:
                    break
        return found, last_ts, last_phy

    def max_indexed_phy_offset(self) -> int:
        """The newest file's end phys offset, 0 with no files."""
        files = self._files
        return files[-1].end_phy_offset if files else 0

    # ---- maintenance -------------------------------------------------------------------

    def flush(self) -> None:
        """Make the last file durable (does not move `last_flushed_index_timestamp`)."""
        with self._lock:
            if self._files:
                self._files[-1].flush()

    def truncate(self, phys_offset: int) -> None:
        """Remove every entry at `phys_offset` or beyond, newest file first.

        A file that begins at or past the cut and holds entries is destroyed; the others are
        truncated (and flushed). An emptied newest file is re-seeded from its predecessor.
        `last_flushed_index_timestamp` drops to the end of the newest file still full, so the
        store must write it into the checkpoint afterwards.
        """
        with self._lock:
            changed = False
            for f in reversed(list(self._files)):
                if f.index_count > 1 and f.end_phy_offset < phys_offset:
                    break
                if f.index_count > 1 and f.begin_phy_offset >= phys_offset:
                    f.destroy()
                    self._files.remove(f)
                    changed = True
                else:
                    end_before = f.end_phy_offset
                    changed |= f.truncate(phys_offset) > 0 or f.end_phy_offset != end_before
            if not changed:
                return
            if len(self._files) >= 2 and self._files[-1].index_count <= 1:
                prev = self._files[-2]
                self._files[-1].seed(prev.end_phy_offset, prev.end_timestamp)
            full = [f for f in self._files if f.is_full]
            self.last_flushed_index_timestamp = min(self.last_flushed_index_timestamp,
                                                    full[-1].end_timestamp if full else 0)

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Destroy the leading files (never the last) that end before `min_phy_offset`."""
        with self._lock:
            if not self._files or self._files[0].end_phy_offset >= min_phy_offset:
                return 0
            victims = []
            for f in self._files[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                victims.append(f)
            for f in victims:
                f.destroy()
            del self._files[:len(victims)]
            return len(victims)

    def shutdown(self) -> None:
        """Flush the last file and unmap every file."""
        self.flush()
        self.close()

    def close(self) -> None:
        """Unmap every file without flushing."""
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []
