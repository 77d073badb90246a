"""`MappedFileQueue`: the ordered list of fixed-size segments of one log (the CommitLog or one
consume queue): load, lookup by offset, create the next segment, flush and commit with
least-pages rules, durable truncation, expiry by time or offset, and the bounded window of
segments this process keeps mapped.
"""
from __future__ import annotations

import os
import threading
import time

from core.files.fileops import TMP_SUFFIX, FileOps
from core.files.mapped_file import MappedFile, offset_to_file_name


class StoreLoadError(RuntimeError):
    """A segment directory this store cannot open safely; the message says why."""


class MappedFileQueue:
    def __init__(self, store_path: str, mapped_file_size: int, fileops: FileOps,
                 allocator=None, max_mapped: int = 16, window=None, grows: bool = False):
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.fileops = fileops
        self.allocator = allocator          # callable(path, next_path) -> None, creates `path`
        self.max_mapped = max_mapped
        self.window = window                # a MappingWindow shared with other queues, or None
        self.grows = grows                  # files created sparse, written with pwrite
        self.new_dirs: set[str] = set()     # directories to fsync before new files count as durable
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        self._lock = threading.RLock()
        self._clock = 0

    # -- load ----------------------------------------------------------------------------
    def load(self) -> None:
        """Open every segment in name order. Leftover `*.tmp` files and a zero-length last file
        (an interrupted creation) are removed; any other size mismatch refuses the load."""
        try:
            with os.scandir(self.store_path) as it:     # one listing: 80,000 queues load
                entries = list(it)
        except FileNotFoundError:
            entries = []
        if not entries:
            self.fileops.make_dirs(self.store_path)
        if any(e.name.endswith(TMP_SUFFIX) for e in entries):
            self.fileops.remove_leftovers(self.store_path)
        found = sorted((e.name, e) for e in entries if e.name.isdigit() and e.is_file())
        files = []
        for i, (name, entry) in enumerate(found):
            path = entry.path
            size = entry.stat().st_size
            if size == 0 and i == len(found) - 1:
                self.fileops.unlink(path)
                continue
            if size != self.mapped_file_size:
                raise StoreLoadError(
                    f"{path} is {size} bytes but segments here are {self.mapped_file_size} bytes: "
                    f"the store was written with another segment size, or the file is damaged")
            mf = MappedFile(path, self.mapped_file_size, self.fileops)
            self.watch(mf)
            mf.set_positions(self.mapped_file_size)
            files.append(mf)
        with self._lock:
            self.files = files

    # -- lookup --------------------------------------------------------------------------
    def get_first_mapped_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, create: bool = False) -> MappedFile | None:
        files = self.files
        last = files[-1] if files else None
        if not create or (last is not None and not last.is_full):
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        return self._create(create_offset)

    def _create(self, offset: int) -> MappedFile:
        path = os.path.join(self.store_path, offset_to_file_name(offset))
        next_path = os.path.join(self.store_path, offset_to_file_name(offset + self.mapped_file_size))
        if self.grows:
            # Sparse, not fsynced here: `new_dirs` are made durable by the next flush, before
            # any entry of this file counts as durable (a new queue costs no fsync on dispatch).
            self.new_dirs.update(self.fileops.create_sparse_file(path, self.mapped_file_size))
        else:
            if not self.files:
                self.fileops.make_dirs(self.store_path)
            if self.allocator is not None:
                self.allocator(path, next_path)
            elif not os.path.exists(path):
                self.fileops.create_file(path, self.mapped_file_size)
        mf = MappedFile(path, self.mapped_file_size, self.fileops)
        self.watch(mf)
        with self._lock:
            mf.first_create_in_queue = not self.files
            self.files.append(mf)
        return mf

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False):
        files = self.files
        if not files:
            return None
        first, last = files[0], files[-1]
        if offset < first.file_from_offset or offset >= last.file_from_offset + self.mapped_file_size:
            return first if return_first_on_not_found else None
        idx = offset // self.mapped_file_size - first.file_from_offset // self.mapped_file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def watch(self, mf: MappedFile) -> None:
        """Bound the mappings of `mf` by this queue's window (or the shared one)."""
        if self.window is not None:
            mf.on_map = lambda: self.window.admit(mf)
        else:
            mf.on_map = self._trim_window

    def hold(self, mf: MappedFile):
        """Take a reference on `mf` (mapping it), then trim the window of mapped segments."""
        buf = mf.hold()                  # a new mapping trims the window (MappedFile.on_map)
        if self.window is not None:
            self.window.touch(mf)
        else:
            self._clock += 1
            mf.last_used = self._clock
        return buf

    def write(self, mf: MappedFile, pos: int, data) -> None:
        """`MappedFile.write` on a segment of this queue, counted as a use in its window."""
        if self.hold(mf) is None:
            raise OSError(f"{mf.path}: segment destroyed")
        try:
            mf.write(pos, data)
        finally:
            mf.release()

    def _trim_window(self) -> None:
        mapped = [f for f in self.files if f.is_mapped]
        if len(mapped) <= self.max_mapped:
            return
        last = self.files[-1] if self.files else None
        for mf in sorted(mapped, key=lambda f: f.last_used):
            if len(mapped) <= self.max_mapped:
                break
            if mf is not last and mf.unmap_if_idle():
                mapped.remove(mf)

    def read(self, offset: int, size: int) -> bytes | None:
        """Copy `size` readable bytes at global `offset` (never across a segment)."""
        mf = self.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset - mf.file_from_offset
        if pos + size > mf.read_position or self.hold(mf) is None:
            return None
        try:
            return bytes(mf.buf[pos:pos + size])
        finally:
            mf.release()

    # -- positions -----------------------------------------------------------------------
    def get_min_offset(self) -> int:
        first = self.get_first_mapped_file()
        return first.file_from_offset if first else -1

    def get_max_offset(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.read_position if last else 0

    def get_max_wrote_position(self) -> int:
        last = self.get_last_mapped_file()
        return last.file_from_offset + last.wrote_position if last else 0

    def mapped_memory_size(self) -> int:
        return len(self.files) * self.mapped_file_size

    # -- flush and commit ----------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush the segment holding `flushed_where`. True when nothing moved (RocketMQ's sense)."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        where = mf.file_from_offset + mf.flush(least_pages)
        moved = where != self.flushed_where
        self.flushed_where = where
        if least_pages == 0 and ts:
            self.store_timestamp = ts
        return not moved

    def flush_due(self, least_pages: int) -> bool:
        """Whether `flush(least_pages)` would write anything."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        return mf is not None and mf.flush_due(least_pages)

    def unflushed(self) -> list[tuple[MappedFile, int]]:
        """(segment, its read position now) for each segment with bytes not flushed yet."""
        return [(mf, mf.read_position) for mf in self.files if mf.flushed_position < mf.read_position]

    def mark_flushed(self, marks: list[tuple[MappedFile, int]]) -> None:
        """The positions of `unflushed()` are durable (the whole file system was synced)."""
        for mf, pos in marks:
            mf.flushed_position = max(mf.flushed_position, pos)
            self.flushed_where = max(self.flushed_where, mf.file_from_offset + pos)

    def commit(self, least_pages: int) -> bool:
        mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.commit(least_pages)
        moved = where != self.committed_where
        self.committed_where = where
        return not moved

    # -- truncation ----------------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Cut the log at `offset`: segments past it are deleted, the one holding it is zeroed
        from there to its end and flushed before this returns."""
        with self._lock:
            keep = []
            for mf in self.files:
                end = mf.file_from_offset + self.mapped_file_size
                if end <= offset:
                    keep.append(mf)
                elif offset >= mf.file_from_offset:
                    pos = offset - mf.file_from_offset
                    mf.zero(pos, self.mapped_file_size)
                    mf.set_positions(pos)
                    keep.append(mf)
                else:
                    mf.destroy()
            self.files = keep
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def delete_last_mapped_file(self) -> None:
        with self._lock:
            if self.files:
                self.files.pop().destroy()

    # -- expiry --------------------------------------------------------------------------
    def delete_expired_file_by_time(self, expired_ms: int, interval_ms: int = 0,
                                    clean_immediately: bool = False, batch_max: int = 10) -> int:
        """Delete leading segments older than `expired_ms` (never the last); stop at the first young one."""
        deleted = 0
        now = time.time()
        for mf in list(self.files[:-1]):
            if deleted >= batch_max:
                break
            if not (clean_immediately or now >= mf.last_modified() + expired_ms / 1000):
                break
            if not mf.destroy():
                break
            with self._lock:
                self.files.remove(mf)
            deleted += 1
            if interval_ms > 0:
                time.sleep(interval_ms / 1000)
        return deleted

    def delete_expired_file_by_offset(self, min_offset: int, unit_size: int) -> int:
        """Consume queues: delete leading segments whose last entry points below `min_offset`."""
        from core.record.codec import read_i64
        deleted = 0
        for mf in list(self.files[:-1]):
            buf = self.hold(mf)
            if buf is None:
                last_phys = -1
            else:
                try:
                    last_phys = read_i64(buf, self.mapped_file_size - unit_size)
                finally:
                    mf.release()
            if last_phys >= min_offset or not mf.destroy():
                break
            with self._lock:
                self.files.remove(mf)
            deleted += 1
        return deleted

    # -- end of life ---------------------------------------------------------------------
    def shutdown(self) -> None:
        for mf in self.files:
            mf.shutdown()

    def destroy(self) -> None:
        with self._lock:
            for mf in self.files:
                mf.destroy()
            self.files = []
        self.flushed_where = self.committed_where = 0
