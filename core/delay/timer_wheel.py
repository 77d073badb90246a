"""The timer wheel's files (docs/FORMAT.md, timerqueue): one file per time window of
`WINDOW_MS`, `<store>/timerqueue/<window start ms, 20 digits>`, holding the pending timer
messages due in that window as 28-byte entries appended in arrival order:

    arrival  8  the message's offset in the timer topic's consume queue (rmq_sys_wheel_timer, 0)
    phys     8  its CommitLog offset
    size     4  its record size
    deliver  8  its delivery time, ms (TIMER_OUT_MS)

big-endian as every store file. The wheel is derived data, as consume queues are: the timer
job (core.delay.timer_job) writes it from the timer topic's consume queue, which dispatch builds
from the CommitLog, and can build it again from there. Only the windows that hold messages
exist (at most timer_max_delay_sec / 60 s of them, 4,320 for three days), and only the
current window is ever read into memory, so millions of pending messages cost disk, not RAM.

Durability: appends are made durable by `sync` (fsync of every file appended to since, and of
the directory when one was created) before the job's checkpoint records how far the consume
queue was taken in; a window is deleted only after a checkpoint has moved past it. At load,
`repair(enqueued)` keeps of each file the longest prefix whose arrivals increase and lie below
the checkpoint's offset (what the last sync made durable) and cuts the rest, which the job
then appends again: a power cut can tear only what came after the last sync.
"""
from __future__ import annotations

import bisect
import logging
import os
import re

import numpy as np

from core.files.fileops import REAL_FILE_OPS, FileOps

log = logging.getLogger(__name__)
DIR_NAME = "timerqueue"
WINDOW_MS = 60_000
ENTRY_DTYPE = np.dtype([("arrival", ">i8"), ("phys", ">i8"), ("size", ">i4"), ("deliver", ">i8")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize
_NAME = re.compile(r"\d{20}")


def window_of(deliver_ms: int) -> int:
    return deliver_ms // WINDOW_MS * WINDOW_MS


class TimerWindows:
    def __init__(self, store_root: str, fileops: FileOps = REAL_FILE_OPS):
        self.dir = os.path.join(store_root, DIR_NAME)
        self.fileops = fileops
        self.windows: list[int] = []          # starts of the windows that have a file, sorted
        self._dirty: set[str] = set()
        self._created = False

    def path(self, window: int) -> str:
        return os.path.join(self.dir, f"{window:020d}")

    def load(self, enqueued: int) -> None:
        """List the windows, delete leftovers, and `repair` each file to what is durable. The
        directory is made with the first window."""
        self.windows = []
        if not os.path.isdir(self.dir):
            return
        self.fileops.remove_leftovers(self.dir)
        self.windows = sorted(int(n) for n in os.listdir(self.dir) if _NAME.fullmatch(n))
        for window in list(self.windows):
            self._repair(window, enqueued)

    def _repair(self, window: int, enqueued: int) -> None:
        path = self.path(window)
        data = self.fileops.read_file(path)
        entries = np.frombuffer(data, ENTRY_DTYPE, len(data) // ENTRY_SIZE)
        arrivals = entries["arrival"]
        bad = np.flatnonzero((arrivals >= enqueued) | (arrivals < 0)
                             | np.concatenate(([False], arrivals[1:] <= arrivals[:-1])))
        keep = int(bad[0]) if len(bad) else len(entries)
        if keep * ENTRY_SIZE == len(data):
            return
        log.warning("timer window %s: %d bytes past what was durable cut (taken in again from "
                    "the consume queue)", os.path.basename(path), len(data) - keep * ENTRY_SIZE)
        if keep:
            self.fileops.write_file_atomic(path, data[:keep * ENTRY_SIZE])
        else:
            self.remove(window)

    def append(self, window: int, entries: np.ndarray) -> None:
        path = self.path(window)
        if not self.windows:
            self.fileops.make_dirs(self.dir)
        if self.fileops.append_file(path, entries.astype(ENTRY_DTYPE, copy=False).tobytes()):
            self._created = True
            i = bisect.bisect_left(self.windows, window)
            if i == len(self.windows) or self.windows[i] != window:
                self.windows.insert(i, window)
        self._dirty.add(path)

    def sync(self) -> None:
        """Make every append so far durable."""
        if self._dirty or self._created:
            self.fileops.sync_files(sorted(self._dirty), self.dir if self._created else None)
            self._dirty.clear()
            self._created = False

    def read(self, window: int) -> np.ndarray:
        """The window's entries, each arrival once (an arrival appended again after a crash
        keeps its first place)."""
        try:
            data = self.fileops.read_file(self.path(window))
        except FileNotFoundError:
            return np.empty(0, ENTRY_DTYPE)
        entries = np.frombuffer(data, ENTRY_DTYPE, len(data) // ENTRY_SIZE)
        _, first = np.unique(entries["arrival"], return_index=True)
        return entries if len(first) == len(entries) else entries[np.sort(first)]

    def remove(self, window: int) -> None:
        path = self.path(window)
        self._dirty.discard(path)
        try:
            self.fileops.unlink(path)
        except FileNotFoundError:
            pass
        i = bisect.bisect_left(self.windows, window)
        if i < len(self.windows) and self.windows[i] == window:
            del self.windows[i]

    def next_after(self, window: int | None) -> int | None:
        """The first window with a file after `window` (None: the first of all)."""
        i = 0 if window is None else bisect.bisect_right(self.windows, window)
        return self.windows[i] if i < len(self.windows) else None

    def entry_count(self) -> int:
        """Entries in every window file (an arrival appended again after a crash counts twice)."""
        total = 0
        for window in self.windows:
            try:
                total += os.path.getsize(self.path(window)) // ENTRY_SIZE
            except FileNotFoundError:
                pass
        return total
