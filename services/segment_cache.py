"""`SegmentCache`: the CommitLog segments a service process works on (the committer copying
into them, the flusher syncing them), opened by start offset on first use and dropped once the
service is done with them, so that the process maps only what it is working on."""
from __future__ import annotations

import os

from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import MappedFile, offset_to_file_name


class SegmentCache:
    def __init__(self, commitlog_dir: str, file_size: int, writable: bool):
        self.commitlog_dir = commitlog_dir
        self.file_size = file_size
        self.writable = writable
        self._open: dict[int, MappedFile] = {}

    def get(self, start: int) -> MappedFile:
        mf = self._open.get(start)
        if mf is None:
            path = os.path.join(self.commitlog_dir, offset_to_file_name(start))
            mf = self._open[start] = MappedFile(path, self.file_size, REAL_FILE_OPS, self.writable)
        return mf

    @property
    def files(self) -> list[MappedFile]:
        """The open segments (core.files.cache_window.UnmapBehind walks them)."""
        return list(self._open.values())

    def hold(self, mf: MappedFile):
        return mf.hold()

    def drop(self, start: int) -> None:
        """Forget a finished segment (its transient buffer too) and unmap it."""
        mf = self._open.pop(start, None)
        if mf is not None:
            mf.write_buffer = None
            mf.unmap_if_idle()

    def close(self) -> None:
        for start in list(self._open):
            self.drop(start)
