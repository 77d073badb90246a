"""The store's lock file (`<root>/lock`) and abort file (`<root>/abort`), reference 7.2.

`StoreLock` keeps a second store, in another process or in this one, from opening the same
directory: it holds an exclusive `flock` on the lock file for as long as the store runs.
`flock` locks belong to an open file description, so a second `StoreLock` on the same path
is refused even inside one process (RocketMQ: OverlappingFileLockException), and the kernel
drops the lock when the holder dies, however it dies. The lock file is never deleted:
unlinking it would let a newcomer lock a fresh inode while the old holder still runs.

`AbortFile` marks a running store. It is created (holding the pid, as RocketMQ 5 does) once
recovery is done and services start, and removed only after a clean stop; its presence at
start means the last run ended abnormally.
"""
from __future__ import annotations

import fcntl
import os

LOCK_CONTENT = b"lock"
ABORT_FILE_NAME = "abort"


class StoreLockedError(RuntimeError):
    """Another process, or another StoreLock in this one, holds the store's lock."""

    def __init__(self, message: str, path: str, holder_pid: int | None = None):
        super().__init__(message)
        self.path = path
        self.holder_pid = holder_pid


def read_pid(path: str) -> int | None:
    """The pid written in an abort file, or None when it is missing, empty or not a number."""
    try:
        with open(path, "rb") as f:
            text = f.read(64).strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


class StoreLock:
    """An exclusive, non-blocking `flock` on `<root>/lock`; a context manager."""

    def __init__(self, lock_path: str):
        self.path = os.fspath(lock_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise StoreLockedError; a no-op when this object holds it already."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._locked_error() from None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.pread(fd, len(LOCK_CONTENT) + 1, 0) != LOCK_CONTENT:
                os.ftruncate(fd, 0)
                os.pwrite(fd, LOCK_CONTENT, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _locked_error(self) -> StoreLockedError:
        abort_path = os.path.join(os.path.dirname(self.path), ABORT_FILE_NAME)
        pid = read_pid(abort_path)
        holder = f" (pid {pid}, from {abort_path})" if pid is not None else ""
        return StoreLockedError(
            f"store lock {self.path} is held by another process or store{holder}; "
            "only one store may run on a directory at a time", self.path, pid)

    def release(self) -> None:
        """Drop the lock; the file stays. Releasing a lock not held does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> "StoreLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"StoreLock({self.path!r}, held={self.held})"


class AbortFile:
    """`<root>/abort`: exists while a store runs; present at start means an abnormal exit."""

    def __init__(self, path: str, fileops):
        self.path = os.fspath(path)
        self._fileops = fileops

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def create(self, pid: int | None = None) -> None:
        """Write the pid (this process's by default), durably."""
        self._fileops.make_dirs(os.path.dirname(os.path.abspath(self.path)))
        text = str(os.getpid() if pid is None else pid)
        self._fileops.write_file_atomic(self.path, text.encode())

    def read_pid(self) -> int | None:
        return read_pid(self.path)

    def remove(self) -> None:
        """Delete the file durably; a missing file is fine."""
        try:
            self._fileops.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"AbortFile({self.path!r}, exists={self.exists()})"
