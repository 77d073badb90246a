"""`MappedFile`: one fixed-size segment named by its 20-digit start offset, with RocketMQ's
three positions (wrote >= committed >= flushed) and a reference count, so that a segment a
reader holds is never unmapped under it.

The mapping is made lazily on `hold()` and dropped by the owning queue's window policy when
nobody holds it. With a transient write buffer (the store pool), appends go to the buffer
and `commit()` copies them into the file; readers then see only committed bytes.
"""
from __future__ import annotations

import os
import threading

from core.files.fileops import PAGE_SIZE, FileOps


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    def __init__(self, path: str, file_size: int, fileops: FileOps, writable: bool = True):
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_from_offset = int(self.file_name)
        self.file_size = file_size
        self.writable = writable
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0           # store time of the newest record appended here
        self.write_buffer = None           # transient pool buffer, when the pool is enabled
        self.first_create_in_queue = False
        self._fileops = fileops
        self._mapping = None
        self._refs = 0
        self._lock = threading.Lock()
        self.available = True
        self.last_used = 0
        self.on_map = None                 # callable run after this segment gets mapped

    # -- mapping and references ------------------------------------------------------------
    def hold(self):
        """Map if needed, take a reference and return the buffer; None once destroyed."""
        created = False
        with self._lock:
            if not self.available:
                return None
            if self._mapping is None or self._mapping.closed:
                self._mapping = self._fileops.map_file(self.path, self.file_size, self.writable)
                created = True
            self._refs += 1
            buf = self._mapping.buf
        if created and self.on_map is not None:
            self.on_map()                              # the owner may unmap idle segments now
        return buf

    def release(self) -> None:
        with self._lock:
            self._refs -= 1

    @property
    def buf(self):
        """The mapped buffer of a segment the caller already holds."""
        return self._mapping.buf

    @property
    def mapping(self):
        return self._mapping

    @property
    def is_mapped(self) -> bool:
        return self._mapping is not None and not self._mapping.closed

    @property
    def refs(self) -> int:
        return self._refs

    def unmap_if_idle(self) -> bool:
        with self._lock:
            if self._refs == 0 and self.is_mapped:
                self._mapping.close()
                self._mapping = None
                return True
            return False

    # -- positions -----------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        return self.wrote_position if self.write_buffer is None else self.committed_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position == self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = pos

    def append_bytes(self, data) -> bool:
        """Append raw bytes (replication, tests); False when they do not fit."""
        pos = self.wrote_position
        if pos + len(data) > self.file_size:
            return False
        if self.write_buffer is not None:
            self.write_buffer[pos:pos + len(data)] = data
        else:
            buf = self.hold()                      # map it if nobody has yet
            if buf is None:
                return False
            try:
                buf[pos:pos + len(data)] = data
            finally:
                self.release()
        self.wrote_position = pos + len(data)
        return True

    def write(self, pos: int, data) -> None:
        """Write `data` at `pos` with pwrite(2), not through the mapping (consume queues).

        Measured here on ext4: the first store into a page of a fresh file through a mapping
        took 1.6-2.3 ms (the page fault allocates the block), pwrite 3-11 us; with a new queue's
        first entry on the dispatch path that was 10 s for 8,000 new queues. In a sparse file
        a pwrite that finds no space fails with OSError(ENOSPC), where a store through the
        mapping would raise SIGBUS, so sparse files stay safe on a full disk. Mappings (ours and
        other processes') see the bytes at once: they are the same page cache."""
        if self.hold() is None:
            raise OSError(f"{self.path}: segment destroyed")
        try:
            self._mapping.write(pos, data)
        finally:
            self.release()

    # -- commit and flush ----------------------------------------------------------------
    def _able(self, upto: int, done: int, least_pages: int) -> bool:
        if self.is_full and upto > done:
            return True
        if least_pages > 0:
            return upto // PAGE_SIZE - done // PAGE_SIZE >= least_pages
        return upto > done

    def flush_due(self, least_pages: int) -> bool:
        """Whether `flush(least_pages)` would write anything."""
        return self._able(self.read_position, self.flushed_position, least_pages)

    def commit(self, least_pages: int) -> int:
        """Copy [committed, wrote) of the write buffer into the file; return the committed position."""
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
            return self.committed_position
        wrote = self.wrote_position
        if self._able(wrote, self.committed_position, least_pages):
            buf = self.hold()
            try:
                lo = self.committed_position
                buf[lo:wrote] = self.write_buffer[lo:wrote]
                self.committed_position = wrote
            finally:
                self.release()
        return self.committed_position

    def flush(self, least_pages: int) -> int:
        """Make [flushed, read position) durable; return the flushed position.

        A failed flush raises: the position stays where it was, and the caller must stop
        accepting writes (a flush is never retried, DESIGN.md section 4).
        """
        upto = self.read_position
        if self._able(upto, self.flushed_position, least_pages):
            if self.hold() is None:
                return self.flushed_position
            try:
                self._mapping.flush(self.flushed_position - self.flushed_position % PAGE_SIZE, upto)
                self.flushed_position = upto
            finally:
                self.release()
        return self.flushed_position

    # -- reads ---------------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes | None:
        """Copy `size` bytes at `pos` if they are readable, else None."""
        if pos < 0 or size < 0 or pos + size > self.read_position:
            return None
        buf = self.hold()
        if buf is None:
            return None
        try:
            return bytes(buf[pos:pos + size])
        finally:
            self.release()

    def zero(self, lo: int, hi: int) -> None:
        """Zero [lo, hi) and flush it, so that truncated bytes can never come back. Holes the
        file system reports are zero already and are not read (reading them through the
        mapping would fault in a page cache page for each 4 KiB: seconds for a 1 GiB tail);
        the others are read with pread, so that a tail of zeros (every normal start's) does
        not become 1 GiB of the process's resident memory."""
        buf = self.hold()
        try:
            step = 1 << 20
            dirty = False
            with self._fileops.open_reader(self.path) as reader:
                for a, b in reader.data_ranges(lo, hi):
                    for p in range(a, b, step):
                        n = min(step, b - p)
                        zeros = bytes(n)
                        if reader.read(p, n) != zeros:      # skip ranges that are zero already
                            buf[p:p + n] = zeros
                            dirty = True
            if dirty:
                self._mapping.flush(lo - lo % PAGE_SIZE, hi)
        finally:
            self.release()
        if self.write_buffer is not None:
            self.write_buffer[lo:hi] = bytes(hi - lo)

    # -- end of life ---------------------------------------------------------------------
    def last_modified(self) -> float:
        try:
            return os.path.getmtime(self.path)
        except FileNotFoundError:
            return 0.0

    def shutdown(self) -> None:
        """Mark unavailable; unmapped as soon as the last reader lets go."""
        with self._lock:
            self.available = False
        self.unmap_if_idle()

    def destroy(self) -> bool:
        """Close and delete the file; False while a reader still holds it."""
        self.shutdown()
        with self._lock:
            if self._refs > 0:
                return False
        try:
            self._fileops.unlink(self.path)
        except FileNotFoundError:
            pass
        return True

    def __repr__(self) -> str:
        return (f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
                f"committed={self.committed_position}, flushed={self.flushed_position})")
