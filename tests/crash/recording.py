"""The power-loss harness: a `FileOps` that records what is durable and builds the states a
power cut could leave (anchors B2, "an I/O seam plus a write-recording shim").

Owns `RecordingFileOps` (the seam's test double), `RecordingMapping`, `FileImage` (one file's
page cache and disk), `Snapshot` (a frozen crash point: the directory tree plus every image),
`PageChoice` (which dirty pages of a crash state are new, old or torn) and `SimulatedCrash`.

Model. Names and existence of files are real: the recorder works on a real directory, and
`create_file`, `write_file_atomic` and `unlink` change it at once and durably (the real ones
fsync before they return). File contents written through mappings are not: every mapped path
has one `FileImage` with `live` (what the page cache holds, shared by every mapping of the
path, as MAP_SHARED is) and `durable` (what the disk holds). `flush(lo, hi)` copies live to
durable for [lo, hi) widened to whole 4 KiB pages, and nothing more: a store that flushes the
wrong range fails here even though the real `fdatasync` would have saved it. A crash state
is `durable` with each dirty page (live != durable) independently new, old, or torn at
512-byte sector granularity; flushed bytes are never lost, and write-back order is free.

Decisions. `write_file_atomic` and `create_file` over a path that has an image replace it: the
rename gives the path a new inode, so mappings made before keep the old one (as real mmaps do).
`SimulatedCrash` is a BaseException so that a store's `except Exception` cannot swallow the cut;
after it every durable operation raises it again, and the `materialize_*` methods write the
crash point. A read-only mapping's `buf` is the shared bytearray too; a write through it shows
up as dirty pages. `before_flush(n, path, lo, hi)`, if set, runs under the (reentrant) lock
before the n-th flush does anything: a test can take `snapshot()` there, a crash point before
every flush of a workload.
"""
from __future__ import annotations

import errno
import os
import random
import stat
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from core.files.fileops import TMP_SUFFIX, FileOps, Mapping

PAGE = 4096
SECTOR = 512
SECTORS_PER_PAGE = PAGE // SECTOR
EXHAUSTIVE_MAX_PAGES = 10
NEW = "new"
OLD = "old"

Choose = Callable[[str, int], object]   # (absolute path, page index) -> NEW | OLD | 8 booleans


class SimulatedCrash(BaseException):
    """The power went out at a chosen flush; nothing after it reaches the disk."""


class FileImage:
    """One file's bytes: `live` as the page cache holds them, `durable` as the disk does."""
    __slots__ = ("path", "live", "durable")

    def __init__(self, path: str, data: bytes):
        self.path = path
        self.live = bytearray(data)
        self.durable = bytearray(data)


def dirty_pages_of(live, durable) -> list[int]:
    """Indexes of the 4 KiB pages where `live` and `durable` differ."""
    if live == durable:
        return []
    return [lo // PAGE for lo in range(0, len(live), PAGE)
            if live[lo:lo + PAGE] != durable[lo:lo + PAGE]]


def crash_image(durable, live, pages, pick: Callable[[int], object]) -> bytearray:
    """`durable` with each page of `pages` taken new, old or torn as `pick(page)` says."""
    image = bytearray(durable)
    for page in pages:
        how = pick(page)
        lo = page * PAGE
        hi = min(lo + PAGE, len(image))
        if how == NEW:
            image[lo:hi] = live[lo:hi]
        elif how == OLD:
            continue
        elif isinstance(how, tuple) and len(how) == SECTORS_PER_PAGE:
            for i, new in enumerate(how):
                s, e = lo + i * SECTOR, min(lo + (i + 1) * SECTOR, hi)
                if new and s < e:
                    image[s:e] = live[s:e]
        else:
            raise ValueError(f"page {page}: expected 'new', 'old' or 8 sector flags, got {how!r}")
    return image


class PageChoice:
    """A choose function given by a table {(path, page): NEW | OLD | sector flags}; pages not
    in the table stay old. Its repr names the new and torn pages, for failure messages."""

    def __init__(self, table: dict | None = None, label: str = ""):
        self.table = dict(table or {})
        self.label = label

    def __call__(self, path: str, page: int):
        return self.table.get((path, page), OLD)

    def __repr__(self) -> str:
        items = sorted(self.table.items())
        name = "{0[0]}/{0[1]}#{1}".format
        new = [name(p.split(os.sep)[-2:], page) for (p, page), v in items if v == NEW]
        torn = [name(p.split(os.sep)[-2:], page) + ":" + "".join("N" if s else "o" for s in v)
                for (p, page), v in items if isinstance(v, tuple)]
        return f"PageChoice({self.label!r}, new={new}, torn={torn})"


@dataclass(frozen=True)
class Snapshot:
    """A crash point: the real tree (directories, contents of files without an image) and, per
    image, its durable and live bytes and dirty pages. Materializing it needs no lock."""
    root: str
    dirs: tuple
    files: dict            # path relative to root -> bytes
    images: dict           # absolute path -> (durable bytes, live bytes)
    dirty: dict            # absolute path -> [page index]

    def dirty_pages(self) -> dict[str, list[int]]:
        return {path: list(pages) for path, pages in self.dirty.items() if pages}

    def pages(self) -> list[tuple[str, int]]:
        return [(path, page) for path in sorted(self.dirty) for page in self.dirty[path]]

    def materialize(self, target_dir: str, choose: Choose) -> str:
        """Write the crash state `choose` picks into `target_dir` (absent or empty); return it."""
        target = os.path.abspath(target_dir)
        if os.path.isdir(target) and os.listdir(target):
            raise FileExistsError(f"{target} is not empty")
        os.makedirs(target, exist_ok=True)
        for rel in self.dirs:
            os.makedirs(os.path.join(target, rel), exist_ok=True)
        for rel, data in self.files.items():
            _write(os.path.join(target, rel), data)
        for path, (durable, live) in self.images.items():
            data = crash_image(durable, live, self.dirty[path], lambda p, _path=path: choose(_path, p))
            _write(os.path.join(target, os.path.relpath(path, self.root)), data)
        return target

    def random_choice(self, rng: random.Random, torn_probability: float = 0.2,
                      label: str = "random") -> PageChoice:
        table = {}
        for key in self.pages():
            if rng.random() < torn_probability:
                table[key] = tuple(rng.random() < 0.5 for _ in range(SECTORS_PER_PAGE))
            else:
                table[key] = rng.choice((NEW, OLD))
        return PageChoice(table, label)

    def materialize_random(self, target_dir: str, rng: random.Random,
                           torn_probability: float = 0.2) -> PageChoice:
        return self._apply(target_dir, self.random_choice(rng, torn_probability))

    def materialize_all_old(self, target_dir: str) -> PageChoice:
        """Only flushed data survives: the power cut with nothing written back."""
        return self._apply(target_dir, PageChoice({}, "all old"))

    def materialize_all_new(self, target_dir: str) -> PageChoice:
        """Everything survives: a process kill, where the page cache outlives the process."""
        return self._apply(target_dir, PageChoice(dict.fromkeys(self.pages(), NEW), "all new"))

    def _apply(self, target_dir: str, choice: PageChoice) -> PageChoice:
        self.materialize(target_dir, choice)
        return choice

    def enumerate_states(self, limit: int, seed: int = 0) -> Iterator[PageChoice]:
        """Every subset of dirty pages taken new when there are at most 10 dirty pages in all
        (2**k states), otherwise `limit` random states (torn pages included) from `seed`."""
        keys = self.pages()
        if len(keys) <= EXHAUSTIVE_MAX_PAGES:
            for mask in range(1 << len(keys)):
                yield PageChoice({k: NEW for i, k in enumerate(keys) if mask >> i & 1},
                                 f"subset {mask:#x} of {len(keys)} pages")
            return
        rng = random.Random(seed)
        for i in range(limit):
            yield self.random_choice(rng, label=f"random #{i} (seed {seed}) of {len(keys)} pages")


def _write(path: str, data) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class RecordingMapping(Mapping):
    """A mapping whose `buf` is its file image's `live` bytearray (shared by every mapping of
    the path). A mapping shorter than the file gets a memoryview of the first `size` bytes."""

    def __init__(self, image: FileImage, size: int, writable: bool, flush_range):
        self.path = image.path
        self.size = size
        self.writable = writable
        self.image = image
        self._flush_range = flush_range
        self.buf = image.live if size == len(image.live) else memoryview(image.live)[:size]

    def flush(self, lo: int = 0, hi: int | None = None) -> None:
        if self.buf is None:
            raise ValueError(f"flush of a closed mapping of {self.path}")
        self._flush_range(self.image, lo, self.size if hi is None else hi, self.size)

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """An image has no holes: all of it may hold data."""
        return [(lo, hi)] if lo < hi else []

    def populate(self, length: int | None = None) -> None:
        """Nothing to prefault in memory."""

    def advise_willneed(self) -> None:
        """Nothing to prefetch in memory."""

    def lock_in_memory(self) -> bool:
        return False

    def allocate(self, lo: int, hi: int) -> None:
        """An image has no holes: every byte has its space."""

    def write(self, pos: int, data) -> None:
        """pwrite: into the page cache (`live`), as a store through the mapping is."""
        self.buf[pos:pos + len(data)] = data

    def close(self) -> None:
        if isinstance(self.buf, memoryview):
            self.buf.release()
        self.buf = None


class ImageReader:
    """`FileReader` over a file image: what the page cache holds (`live`)."""

    def __init__(self, image: FileImage):
        self.image = image

    def data_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        return [(lo, hi)] if lo < hi else []

    def read(self, pos: int, size: int) -> bytes:
        return bytes(self.image.live[pos:pos + size])

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> "ImageReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RecordingFileOps(FileOps):
    """`FileOps` over the real directory `root`, with in-memory images for mapped contents.

    Faults, plain attributes that may be set at any time: `fail_flush_at=N` makes the N-th
    flush call (1-based) raise OSError(EIO) and copy nothing; `crash_at_flush=N` makes it raise
    `SimulatedCrash` and freezes the crash point; `enospc_on_create` makes `create_file` raise
    OSError(ENOSPC) and leave nothing. Records: `flush_count`, `flushed` [(path, lo, hi) made
    durable, page-widened], `created`, `unlinked`, `dir_fsyncs`.
    """

    def __init__(self, root: str, *, fail_flush_at: int | None = None, crash_at_flush: int | None = None,
                 enospc_on_create: bool = False, before_flush=None):
        self.root = os.path.realpath(root)
        self.fail_flush_at = fail_flush_at
        self.crash_at_flush = crash_at_flush
        self.enospc_on_create = enospc_on_create
        self.before_flush = before_flush
        self.flush_count = 0
        self.flushed: list[tuple[str, int, int]] = []
        self.created: list[str] = []
        self.unlinked: list[str] = []
        self.dir_fsyncs = 0
        self.crash_snapshot: Snapshot | None = None
        self._images: dict[str, FileImage] = {}
        self._lock = threading.RLock()

    @property
    def crashed(self) -> bool:
        return self.crash_snapshot is not None

    def image(self, path: str) -> FileImage | None:
        return self._images.get(self._key(path))

    # -- the FileOps seam ----------------------------------------------------------------
    def map_file(self, path: str, size: int, writable: bool = True) -> RecordingMapping:
        key = self._key(path)
        with self._lock:
            image = self._images.get(key)
            if image is None:
                with open(key, "rb") as f:
                    image = self._images[key] = FileImage(key, f.read())
        length = len(image.live)
        if length == 0:
            raise ValueError(f"cannot mmap an empty file: {key}")
        size = size or length
        if size > length:
            raise ValueError(f"mmap length {size} is greater than file size {length}: {key}")
        return RecordingMapping(image, size, writable, self._flush_range)

    def create_file(self, path: str, size: int, allocate: int | None = None) -> None:
        key = self._key(path)
        with self._lock:
            self._check_alive()
            if self.enospc_on_create:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), key)
            tmp = key + TMP_SUFFIX
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, size)
                os.posix_fallocate(fd, 0, size if allocate is None else min(allocate, size))
            except BaseException:
                os.close(fd)
                os.unlink(tmp)
                raise
            os.close(fd)
            os.rename(tmp, key)
            self._images[key] = FileImage(key, bytes(size))
            self.created.append(key)

    def open_reader(self, path: str):
        key = self._key(path)
        with self._lock:
            image = self._images.get(key)
            if image is None:
                with open(key, "rb") as f:
                    image = self._images[key] = FileImage(key, f.read())
        return ImageReader(image)

    def create_sparse_file(self, path: str, size: int) -> list[str]:
        """As `create_file` (names are durable at once in this model), with no blocks."""
        key = self._key(path)
        with self._lock:
            self._check_alive()
            if self.enospc_on_create:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), key)
            dirs, parent = [], os.path.dirname(key)
            while not os.path.isdir(parent):
                dirs.append(os.path.dirname(parent))
                parent = os.path.dirname(parent)
            os.makedirs(os.path.dirname(key), exist_ok=True)
            if os.path.exists(key):
                return dirs
            with open(key, "wb") as f:
                f.truncate(size)
            self._images[key] = FileImage(key, bytes(size))
            self.created.append(key)
            return dirs + [os.path.dirname(key)]

    def sync_filesystem(self, path: str) -> None:
        """syncfs: every image under `path` is flushed whole (one flush call each)."""
        with self._lock:
            root = self._key(path)
            for key, image in list(self._images.items()):
                if key.startswith(root + os.sep):
                    self._flush_range(image, 0, len(image.live), len(image.live))

    def write_file_atomic(self, path: str, data: bytes) -> None:
        key = self._key(path)
        with self._lock:
            self._check_alive()
            tmp = key + TMP_SUFFIX
            with open(tmp, "wb") as f:
                f.write(data)
            os.rename(tmp, key)
            self._images.pop(key, None)

    def read_file(self, path: str) -> bytes:
        image = self._images.get(os.path.realpath(path))
        if image is not None:
            return bytes(image.live)
        return super().read_file(path)

    def unlink(self, path: str) -> None:
        key = self._key(path)
        with self._lock:
            self._check_alive()
            os.unlink(key)
            self._images.pop(key, None)
            self.unlinked.append(key)

    def unlink_soon(self, path: str) -> None:
        """Recorded as an unlink: the model has no background deletion."""
        self.unlink(path)

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._check_alive()
            os.close(os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY))
            self.dir_fsyncs += 1

    def make_dirs(self, path: str) -> None:
        with self._lock:
            self._check_alive()
            os.makedirs(path, exist_ok=True)

    def remove_leftovers(self, directory: str) -> list[str]:
        with self._lock:
            self._check_alive()
            removed = super().remove_leftovers(directory)
            for name in removed:
                self._images.pop(self._key(os.path.join(directory, name)), None)
            return removed

    # -- flushing and faults -------------------------------------------------------------
    def _flush_range(self, image: FileImage, lo: int, hi: int, size: int) -> None:
        if not 0 <= lo <= hi <= size:
            raise ValueError(f"flush range [{lo}, {hi}) outside mapping of {size} bytes: {image.path}")
        with self._lock:
            self._check_alive()
            self.flush_count += 1
            if self.before_flush is not None:
                self.before_flush(self.flush_count, image.path, lo, hi)
            if self.flush_count == self.crash_at_flush:
                self.crash_snapshot = self._snapshot_locked()
                raise SimulatedCrash(f"power cut at flush #{self.flush_count} of {image.path}")
            if self.flush_count == self.fail_flush_at:
                raise OSError(errno.EIO, os.strerror(errno.EIO), image.path)
            plo = lo - lo % PAGE
            phi = min(len(image.live), -(-hi // PAGE) * PAGE) if hi > lo else plo
            image.durable[plo:phi] = image.live[plo:phi]
            self.flushed.append((image.path, plo, phi))

    def _check_alive(self) -> None:
        if self.crash_snapshot is not None:
            raise SimulatedCrash("the power is out: no durable operation after the crash point")

    # -- crash states --------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The crash point after a `SimulatedCrash`, otherwise the state right now, taken
        under the lock so that a flush in another thread is either all in or all out."""
        if self.crash_snapshot is not None:
            return self.crash_snapshot
        with self._lock:
            return self._snapshot_locked()

    def _snapshot_locked(self) -> Snapshot:
        dirs, files, images, dirty = [], {}, {}, {}
        for cur, dnames, fnames in os.walk(self.root):
            dnames.sort()
            dirs.extend(os.path.relpath(os.path.join(cur, d), self.root) for d in dnames)
            for name in sorted(fnames):
                full = os.path.join(cur, name)
                if not stat.S_ISREG(os.lstat(full).st_mode):
                    continue
                image = self._images.get(full)
                if image is None:
                    with open(full, "rb") as f:
                        files[os.path.relpath(full, self.root)] = f.read()
                else:
                    images[full] = (bytes(image.durable), bytes(image.live))
                    dirty[full] = dirty_pages_of(image.live, image.durable)
        return Snapshot(self.root, tuple(dirs), files, images, dirty)

    def dirty_pages(self) -> dict[str, list[int]]:
        return self.snapshot().dirty_pages()

    def materialize(self, target_dir: str, choose: Choose) -> str:
        return self.snapshot().materialize(target_dir, choose)

    def materialize_random(self, target_dir: str, rng: random.Random,
                           torn_probability: float = 0.2) -> PageChoice:
        return self.snapshot().materialize_random(target_dir, rng, torn_probability)

    def materialize_all_old(self, target_dir: str) -> PageChoice:
        return self.snapshot().materialize_all_old(target_dir)

    def materialize_all_new(self, target_dir: str) -> PageChoice:
        return self.snapshot().materialize_all_new(target_dir)

    def enumerate_states(self, limit: int, seed: int = 0) -> Iterator[PageChoice]:
        """As `Snapshot.enumerate_states` over a snapshot taken now; while the store still
        runs, take one `snapshot()` and enumerate and materialize from it instead."""
        return self.snapshot().enumerate_states(limit, seed)

    def _key(self, path: str) -> str:
        key = os.path.realpath(path)
        if os.path.commonpath([key, self.root]) != self.root:
            raise ValueError(f"{path} is outside the recorded store root {self.root}")
        return key
