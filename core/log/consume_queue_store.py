"""`ConsumeQueueStore`: every topic's consume queues under `consumequeue/<topic>/<queue_id>/`,
loaded together, recovered together, flushed together and truncated together.

Built for tens of thousands of queues (issue 27): the queues share one `MappingWindow`, so the
process maps at most `window_capacity` consume-queue segments whatever their number; files
are sparse and take blocks as entries are written with pwrite (`MappedFile.write`); a new
queue's file is created without an fsync, and its directories are made durable by the next
flush (`MappedFileQueue.new_dirs`); recovery reads each queue's tail only. A flush that finds
more than SYNCFS_AT queues to flush makes the whole file system durable with one syncfs(2)
(`FileOps.sync_filesystem`) instead of one fdatasync per file: 80,000 queues with one new
entry each were 80,000 journal commits.
"""
from __future__ import annotations

import os
import threading

from core.log.consume_queue import ConsumeQueue
from core.files.fileops import FileOps
from core.files.mapping_window import DEFAULT_CAPACITY, MappingWindow

SYNCFS_AT = 64                 # queues to flush at once from which one syncfs is cheaper


def _subdirs(path: str) -> list[str]:
    """The names of the directories in `path`, sorted (the file type from the listing: no
    stat per entry)."""
    with os.scandir(path) as it:
        return sorted(e.name for e in it if e.is_dir())


class ConsumeQueueStore:
    def __init__(self, root_dir: str, mapped_file_size: int, fileops: FileOps,
                 window_capacity: int = DEFAULT_CAPACITY):
        self.root_dir = root_dir
        self.mapped_file_size = mapped_file_size
        self.fileops = fileops
        self.window = MappingWindow(window_capacity)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._written: set[ConsumeQueue] = set()     # written since the last flush looked
        self.loaded = False                             # `load` or `recover` listed the queues
        self._lock = threading.Lock()

    def load(self) -> None:
        """Open every queue found under the root (each queue's file listing, nothing read)."""
        for key in self._queue_names():
            self._open(*key).load()
        self.loaded = True

    def _queue_names(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every queue directory, from the directory listings alone."""
        self.fileops.make_dirs(self.root_dir)
        return [(topic, int(qid)) for topic in _subdirs(self.root_dir)
                for qid in _subdirs(os.path.join(self.root_dir, topic)) if qid.isdigit()]

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues[topic, queue_id] = self._new(topic, queue_id)
        return cq

    def _new(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(topic, queue_id, self.root_dir, self.mapped_file_size, self.fileops,
                            window=self.window)

    def recover(self, progress=None, log_limit: int | None = None, commitlog=None) -> dict:
        """Recover every queue (its tail only); `progress(done, total)` counts queues.

        A store not loaded yet is loaded in the same walk, each queue listed and recovered in
        turn (a store's start: the three walks of load, damage check and recovery were most of
        a 10,000-queue restart). With `log_limit` (the CommitLog's end) each queue's entries
        are checked for damage on the bytes its recovery reads (`ConsumeQueue.recover`; against
        the records' headers too with `commitlog`); return
        {(topic, queue id): the physical offset to dispatch again from} for the damaged ones."""
        todo = list(self.queues.values()) if self.loaded else self._queue_names()
        opening, self.loaded = not self.loaded, True
        redo = {}
        for i, item in enumerate(todo):
            if opening:
                item = self._open(*item)
                item.load()
            restart = item.recover(log_limit, commitlog)
            if restart is not None:
                redo[item.topic, item.queue_id] = restart
            if progress is not None and (i % 1000 == 999 or i == len(todo) - 1):
                progress(i + 1, len(todo))
        return redo

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = self._new(topic, queue_id)
                    self.queues[topic, queue_id] = cq
        return cq

    def put(self, req) -> None:
        cq = self.find_or_create(req.topic, req.queue_id)
        self._written.add(cq)
        cq.put_message_position_info(req.commit_log_offset, req.msg_size, req.tags_code,
                                     req.consume_queue_offset)

    def put_entries(self, topic: str, queue_id: int, first: int, entries: bytes,
                    max_physic_offset: int) -> None:
        """Consecutive packed entries from queue offset `first` (see ConsumeQueue.put_entries)."""
        cq = self.find_or_create(topic, queue_id)
        self._written.add(cq)
        cq.put_entries(first, entries, max_physic_offset)

    def max_physic_offset(self) -> int:
        """The end of the newest record any queue points at (-1 when none)."""
        return max((cq.max_physic_offset for cq in self.queues.values()), default=-1)

    def flush(self, least_pages: int = 0) -> None:
        """Flush every queue with least_pages dirty pages (all of it with 0), then the
        directories of the files created since the last flush. With least_pages > 0 (the
        flush every `flush_interval_consume_queue` ms) only the queues written through this
        store since are looked at: going over 80,000 queues took 0.2 s of each second."""
        if least_pages:                          # the periodic flush: queues written since
            written, self._written = self._written, set()     # the last one, not all of them
        else:
            written, self._written = set(self.queues.values()), set()
        queues = [cq.queue for cq in written]
        try:
            self._flush(queues, least_pages)
        finally:
            self._written |= {cq for cq in written if cq.queue.unflushed() or cq.queue.new_dirs}

    def _flush(self, queues: list, least_pages: int) -> None:
        due = [q for q in queues if q.flush_due(least_pages)]
        dirs = set()
        for q in queues:
            if q.new_dirs:                       # taken before the flush: a file created during
                new, q.new_dirs = q.new_dirs, set()     # it waits for the next one
                dirs |= new
        if len(due) + len(dirs) >= SYNCFS_AT:
            marks = [(q, q.unflushed()) for q in due]
            self.fileops.sync_filesystem(self.root_dir)
            for q, m in marks:
                q.mark_flushed(m)
            return
        for q in due:
            while not q.flush(least_pages):
                if least_pages:
                    break
        for d in sorted(dirs, key=len, reverse=True):     # deeper first: a file's own directory
            self.fileops.fsync_dir(d)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Drop entries of every queue that point at records ending past `phys_offset`."""
        for cq in self.queues.values():
            if cq.max_physic_offset > phys_offset:
                cq.truncate_dirty_logic_files(phys_offset)

    def topic_queue_table(self, min_commitlog_offset: int | None = None) -> dict[tuple[str, int], int]:
        """{(topic, queue id): max offset} of every queue; with `min_commitlog_offset`, each
        queue's start is moved past records gone from the CommitLog first, in the same walk
        (`ConsumeQueue.correct_min_offset`)."""
        table = {}
        for key, cq in self.queues.items():
            if min_commitlog_offset is not None:
                cq.correct_min_offset(min_commitlog_offset)
            table[key] = cq.get_max_offset_in_queue()
        return table

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        for cq in self.queues.values():
            cq.correct_min_offset(min_commitlog_offset)

    def delete_expired(self, min_commitlog_offset: int) -> int:
        return sum(cq.delete_expired_file(min_commitlog_offset) for cq in list(self.queues.values()))

    def destroy(self) -> None:
        for cq in self.queues.values():
            cq.destroy()
        self.queues.clear()
        self._written = set()

    def shutdown(self) -> None:
        for cq in self.queues.values():
            cq.shutdown()
