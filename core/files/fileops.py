"""The one narrow seam for durable I/O: every mmap, flush, fsync, fallocate, rename, unlink
and directory fsync of the store goes through a `FileOps` object.

`FileOps` is the real thing. Tests swap in a recording implementation with the same methods
(tests/crash/recording.py) that keeps, per file, the bytes as of the last flush and builds
the states a power cut could leave. Code elsewhere in `core` never imports `mmap` or calls
`os.fsync` itself; it writes through `Mapping.buf` and makes it durable with `Mapping.flush`.
"""
from __future__ import annotations

import errno
import mmap
import os
import threading
import weakref

PAGE_SIZE = mmap.PAGESIZE
MADV_POPULATE_WRITE = 23          # Linux 5.14+; prefaults and dirties a range in C
MADV_POPULATE_READ = 22           # Linux 5.14+; prefaults a range readable, leaves it clean
TMP_SUFFIX = ".tmp"
DELETED_SUFFIX = ".deleted" + TMP_SUFFIX   # a file being deleted in the background


def _data_ranges(fd: int, lo: int, hi: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pos = lo
    try:
        while pos < hi:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            if start >= hi:
                break
            pos = min(os.lseek(fd, start, os.SEEK_HOLE), hi)
            out.append((start, pos))
    except OSError as e:
        if e.errno != errno.ENXIO:             # ENXIO: no data at or after pos
            out.append((pos, hi))
    return out


class FileReader:
    """A file read with pread, not mapped: recovery reads a few entries at the tail of each of
    tens of thousands of consume-queue files, and an mmap and munmap cost more than those
    reads (and a descriptor while mapped). `data_ranges` and `read` as `Mapping`'s."""

    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        return _data_ranges(self._fd, lo, hi)

    def read(self, pos: int, size: int) -> bytes:
        return os.pread(self._fd, size, pos)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> "FileReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Mapping:
    """A file mapped MAP_SHARED. `buf` is written and read in place (slices, struct.pack_into).
    A mapping dropped without close() still closes its descriptor when it is collected (the
    mmap closes itself): a store abandoned by its user does not leak them."""

    def __init__(self, path: str, size: int, writable: bool = True):
        self.path = path
        self.size = size
        self._fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            self.buf = mmap.mmap(self._fd, size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        except Exception:
            os.close(self._fd)
            raise
        self._close_fd = weakref.finalize(self, os.close, self._fd)

    def write(self, pos: int, data) -> None:
        """pwrite `data` at `pos` (see MappedFile.write); raises OSError, ENOSPC included."""
        view = memoryview(data)
        while len(view):
            n = os.pwrite(self._fd, view, pos)
            view, pos = view[n:], pos + n

    def allocate(self, lo: int, hi: int) -> None:
        """Give bytes [lo, hi) of the file blocks (posix_fallocate), so that stores through
        the mapping there cannot meet a full disk (a SIGBUS); raises OSError(ENOSPC) instead."""
        os.posix_fallocate(self._fd, lo, hi - lo)

    def flush(self, lo: int = 0, hi: int | None = None) -> None:
        """Make bytes [lo, hi) durable. fdatasync releases the GIL, unlike mmap.flush (DESIGN.md 4)."""
        os.fdatasync(self._fd)

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of [lo, hi) that may hold bytes other than zero: all of it but the holes
        the file system reports (SEEK_DATA/SEEK_HOLE: blocks never written, fallocated ones
        included, with no page of them in the cache; a page written through any mapping is
        in the cache). Where the file system cannot tell, the whole range."""
        return _data_ranges(self._fd, lo, hi)

    def read(self, pos: int, size: int) -> bytes:
        return bytes(self.buf[pos:pos + size])

    def populate(self, length: int | None = None) -> None:
        """Prefault the first `length` bytes (all by default) for writing, so that first
        writes there do not take page faults."""
        length = self.size if length is None else min(self.size, -(-length // PAGE_SIZE) * PAGE_SIZE)
        try:
            self.buf.madvise(MADV_POPULATE_WRITE, 0, length)
        except (OSError, ValueError, AttributeError):
            for off in range(0, length, PAGE_SIZE):
                self.buf[off] = self.buf[off]

    def advise_willneed(self) -> None:
        try:
            self.buf.madvise(mmap.MADV_WILLNEED)
        except (OSError, AttributeError):
            pass

    def lock_in_memory(self) -> bool:
        """mlock the mapping; False (and nothing else) where the limit does not allow it."""
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
        return libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(self.size)) == 0

    def close(self) -> None:
        """Unmap and close. The descriptor is closed even when a live buffer export keeps the
        mapping itself open (BufferError), which then goes when the export is released."""
        if self.buf is not None:
            buf, self.buf = self.buf, None
            try:
                buf.close()
            except BufferError:
                pass
            finally:
                self._close_fd()

    @property
    def closed(self) -> bool:
        return self.buf is None


class FileOps:
    """Real file operations. Multi-step operations are restartable: tmp, data, fsync, rename."""

    def map_file(self, path: str, size: int, writable: bool = True) -> Mapping:
        return Mapping(path, size, writable)

    def open_reader(self, path: str) -> FileReader:
        return FileReader(path)

    def create_file(self, path: str, size: int, allocate: int | None = None) -> None:
        """Create `path` whole and atomically: `*.tmp`, fallocate, fsync, rename, fsync the directory.

        Raises OSError(ENOSPC) on a full disk here, at creation, rather than SIGBUS later.
        With `allocate`, the file has `size` bytes but blocks for its first `allocate` only (the
        rest reads as zeros; its owner allocates it ahead of its writes with `Mapping.allocate`).
        """
        tmp = path + TMP_SUFFIX
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            os.posix_fallocate(fd, 0, size if allocate is None else min(allocate, size))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._silent_unlink(tmp)
            raise
        os.close(fd)
        os.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path))

    def create_sparse_file(self, path: str, size: int) -> list[str]:
        """Create `path` as a sparse file of `size` bytes (O_EXCL, ftruncate), making missing
        parent directories, all without an fsync; return the directories whose entries
        must be fsynced before the file counts as durable (its own and the parents of the new
        ones). A file that exists already is left as it is.

        For files that grow as they are written (consume queues, RocketMQ's are sparse): the
        blocks are allocated as bytes are written with `Mapping.write` (pwrite), so that disk
        use follows the data and a full disk is an OSError(ENOSPC) there, never a SIGBUS (no
        byte of such a file is ever stored through a mapping into a hole). Leaving
        the fsyncs to the owner's next flush is what makes a new queue cheap: 4 to 6 fsyncs
        per file here cost 10 ms a queue on the dispatch path. No `*.tmp` and rename: a sparse
        file of full size is all zeros, an empty segment, and a crash can leave it missing, or
        with size 0 (the loader deletes a zero-length last file, and a queue creates its next
        segment only once this one is full); its entries are rebuilt from the CommitLog as
        every unflushed entry is."""
        dirs = []
        parent = os.path.dirname(os.path.abspath(path))
        missing = []
        while not os.path.isdir(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
            dirs.append(os.path.dirname(d))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return dirs
        try:
            os.ftruncate(fd, size)
        except BaseException:
            self._silent_unlink(path)
            raise
        finally:
            os.close(fd)
        dirs.append(os.path.dirname(os.path.abspath(path)))
        return dirs

    def warm_file(self, path: str, size: int) -> bool:
        """Prefault every page of a new segment (in the page cache, blocks allocated), advise
        WILLNEED and try mlock; return whether mlock was allowed."""
        mapping = self.map_file(path, size)
        try:
            mapping.populate()
            mapping.advise_willneed()
            return mapping.lock_in_memory()
        finally:
            mapping.close()

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Replace `path` with `data`: write tmp, fsync, rename, fsync the directory."""
        tmp = path + TMP_SUFFIX
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path))

    def append_file(self, path: str, data: bytes) -> bool:
        """Append `data` to `path` (created if missing, not made durable: `sync_files`); True
        when the file is new, so that its directory is fsynced too."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            new = os.fstat(fd).st_size == 0
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        return new

    def sync_files(self, paths, directory: str | None = None) -> None:
        """fsync each of `paths` (and `directory`, when files were created in it)."""
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if directory is not None:
            self.fsync_dir(directory)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def unlink(self, path: str) -> None:
        os.unlink(path)
        self.fsync_dir(os.path.dirname(path))

    def unlink_unwritten(self, path: str) -> bool:
        """Unlink a CommitLog segment only if nothing was ever written to it: records start at
        a segment's first byte, so a segment whose first 8 bytes are zero holds none. True if
        it was deleted; a missing file is False."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            head = os.pread(fd, 8, 0)
        finally:
            os.close(fd)
        if any(head):
            return False
        self.unlink(path)
        return True

    def discard_unwritten(self, paths, logger) -> None:
        """`unlink_unwritten` each of `paths` (segments made ahead and never asked for),
        logging what was deleted and what could not be."""
        for path in sorted(paths):
            try:
                if self.unlink_unwritten(path):
                    logger.info("deleted %s, made ahead and never used", os.path.basename(path))
            except OSError as e:
                logger.warning("could not delete %s made ahead: %s", path, e)

    def unlink_soon(self, path: str) -> None:
        """Remove `path` from its directory now, durably, and free its blocks in a background
        thread: unlinking a large cached file (a 420 MB index file) takes a good part of a
        second. The file is renamed to `*.deleted.tmp` first; a crash before the thread is done
        leaves that name behind, and `remove_leftovers` deletes it at the next load."""
        doomed = path + DELETED_SUFFIX
        os.rename(path, doomed)
        self.fsync_dir(os.path.dirname(path))
        threading.Thread(target=self._silent_unlink, args=(doomed,), name="unlink",
                         daemon=True).start()

    def sync_filesystem(self, path: str) -> None:
        """Make everything written to the file system holding `path` durable with one
        syncfs(2): data written through any mapping, new files, directory entries. Far cheaper
        than an fdatasync per file when thousands of files each have a page to write (one
        journal commit instead of one each). Raises OSError when the kernel reports a failed
        write-back (Linux 5.8+ reports it to syncfs)."""
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syncfs(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), path)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def make_dirs(self, path: str) -> None:
        """Create `path` and any missing parents, fsyncing each new entry in its parent so
        that a power cut cannot lose a directory whose files were made durable."""
        path = os.path.abspath(path)
        missing = []
        while not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for d in reversed(missing):
            os.makedirs(d, exist_ok=True)
            self.fsync_dir(os.path.dirname(d))

    def remove_leftovers(self, directory: str) -> list[str]:
        """Delete `*.tmp` files an interrupted creation left behind; return their names."""
        removed = []
        if os.path.isdir(directory):
            for name in os.listdir(directory):
                if name.endswith(TMP_SUFFIX):
                    self._silent_unlink(os.path.join(directory, name))
                    removed.append(name)
        return removed

    @staticmethod
    def _silent_unlink(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


REAL_FILE_OPS = FileOps()
