"""`MappingWindow`: the bounded, least-recently-used set of segments one process keeps mapped
across many `MappedFileQueue`s (every consume queue of a store shares one).

On Python 3.11 each `mmap` holds a duplicated file descriptor, and every page a mapping has
touched counts in the process's resident memory until it is unmapped (DESIGN.md section 4).
A per-queue limit bounds neither once there are tens of thousands of queues: 8,000 queues
with their last segment each mapped held 16,000 descriptors and 18 GB resident. With a shared
window, a process maps at most `capacity` segments whatever the number of queues (a segment
somebody holds is never unmapped: it is kept and the window runs over by it until released),
a cold queue costs nothing until it is read or written, and a queue used again after its
segment went out of the window maps it again (an open and an mmap, tens of microseconds).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

DEFAULT_CAPACITY = 128        # segments mapped per process (x2 descriptors when writable)


class MappingWindow:
    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"a mapping window holds at least one segment, not {capacity}")
        self.capacity = capacity
        self._mapped: OrderedDict[int, object] = OrderedDict()   # id(MappedFile) -> it, oldest first
        self._lock = threading.Lock()

    def admit(self, mf) -> None:
        """`mf` was just mapped: remember it as the newest, unmap the oldest idle ones beyond
        the capacity."""
        with self._lock:
            self._mapped[id(mf)] = mf
            self._mapped.move_to_end(id(mf))
            kept = []
            while self._mapped and len(self._mapped) + len(kept) > self.capacity:
                key, old = self._mapped.popitem(last=False)
                if old is mf or (old.is_mapped and not old.unmap_if_idle()):
                    kept.append((key, old))                # in use: stays mapped, stays listed
            for key, old in reversed(kept):
                self._mapped[key] = old
                self._mapped.move_to_end(key, last=False)

    def touch(self, mf) -> None:
        """`mf` was used: it is now the newest."""
        with self._lock:
            if id(mf) in self._mapped:
                self._mapped.move_to_end(id(mf))

    def __len__(self) -> int:
        return len(self._mapped)

    def mapped_count(self) -> int:
        """How many listed segments are mapped right now."""
        with self._lock:
            return sum(1 for mf in self._mapped.values() if mf.is_mapped)
