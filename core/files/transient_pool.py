"""`TransientStorePool`: write buffers, one segment in size each, that appends go to when
`transient_store_pool_enable` is set; the committer copies them into the files.

In the embedded store they are plain bytearrays made on first use and reused; the services
get theirs as shared memory owned by the supervisor (ipc/), so they outlive an appender crash.
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int):
        self.pool_size = pool_size
        self.file_size = file_size
        self._free: list = []
        self._made = 0
        self._lock = threading.Lock()

    def borrow(self):
        """A zeroed buffer, or None when all `pool_size` buffers are in use."""
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._made < self.pool_size:
                self._made += 1
                return bytearray(self.file_size)
        log.warning("transient store pool exhausted (%d buffers in use)", self.pool_size)
        return None

    def give_back(self, buf) -> None:
        buf[:] = bytes(len(buf))
        with self._lock:
            self._free.append(buf)

    def available(self) -> int:
        with self._lock:
            return len(self._free) + self.pool_size - self._made
