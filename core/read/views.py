"""Read-only views of store files that another process writes (docs/SERVICES.md: the reput
process reads the CommitLog, the reader reads everything).

- `READ_ONLY_FILE_OPS` maps files PROT_READ and refuses every change (create, write, unlink,
  leftover cleanup), so a view can never alter the store, even by mistake.
- `ReadOnlyMappedFileQueue`: the segments of one directory. It re-lists the directory when an
  offset lies beyond the known segments (or a segment vanished under retention), and makes
  every segment readable up to `end`, the bound its owner sets.
- `CommitLogView`: the CommitLog's read side (what `core.log.dispatch.Dispatcher` and
  `core.read.store_reader.StoreReader` call) over such a queue, bounded by the end the caller sets
  (the control block's CONFIRM).
- `ConsumeQueueView` / `ConsumeQueueStoreView`: consume queues written by the reput process.
  Files are preallocated and zero-filled, so a queue's max offset is learnt from arrivals
  (`learn_max`) or found by scanning for the last entry with size > 0 whose record lies below
  the dispatched offset (`refresh_max`): the writer raises DISPATCHED only after the entries
  are written, so an entry past it may still be torn and is not trusted yet.
- `IndexView`: the index files of the reput process opened with `IndexFile(create=False)` and
  re-listed on every query. `IndexService.load` is never called: it deletes the writer's
  `*.tmp` leftovers.
"""
from __future__ import annotations

import logging
import os
import re

from core.log.commitlog import CommitLog
from core.log.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE, ConsumeQueue, written_end
from core.log.consume_queue_store import ConsumeQueueStore
from core.files.fileops import FileOps, Mapping
from core.log.index_file import IndexFile
from core.log.index_service import IndexService
from core.files.mapped_file import MappedFile
from core.files.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)
_SEGMENT_NAME = re.compile(r"\d{20}")
_INDEX_NAME = re.compile(r"\d{17}")


def _refuse(*_args, **_kwargs):
    raise PermissionError("read-only view: this process does not write these files")


class ReadOnlyFileOps(FileOps):
    """Maps PROT_READ; every operation that would change a file raises PermissionError."""

    def map_file(self, path: str, size: int, writable: bool = False) -> Mapping:
        return Mapping(path, size, writable=False)

    create_file = write_file_atomic = unlink = unlink_soon = fsync_dir = make_dirs = _refuse
    remove_leftovers = append_file = sync_files = _refuse


READ_ONLY_FILE_OPS = ReadOnlyFileOps()


class ReadOnlyMappedFileQueue(MappedFileQueue):
    """Segments written by another process, readable up to `end` (a global offset)."""

    def __init__(self, store_path: str, mapped_file_size: int, max_mapped: int = 16,
                 window=None):
        super().__init__(store_path, mapped_file_size, READ_ONLY_FILE_OPS, None, max_mapped, window)
        self.end = 0

    def load(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Re-list the directory: open new segments, forget vanished ones."""
        try:
            names = sorted(n for n in os.listdir(self.store_path) if _SEGMENT_NAME.fullmatch(n))
        except FileNotFoundError:
            names = []
        known = {mf.file_name: mf for mf in self.files}
        files = []
        for name in names:
            mf = known.pop(name, None)
            if mf is None:
                path = os.path.join(self.store_path, name)
                try:
                    size = os.path.getsize(path)
                except FileNotFoundError:
                    continue
                if size != self.mapped_file_size:
                    log.warning("skipping %s: %d bytes, segments here are %d", path, size,
                                self.mapped_file_size)
                    continue
                mf = MappedFile(path, size, self.fileops, writable=False)
                self.watch(mf)
            files.append(mf)
        for mf in known.values():
            mf.shutdown()
        with self._lock:
            self.files = files
        self._place(self.end, full=True)

    def set_end(self, end: int) -> None:
        """Make bytes below `end` readable, re-listing when `end` lies past the known segments."""
        if end == self.end:
            return
        files = self.files
        if not files or end > files[-1].file_from_offset + self.mapped_file_size:
            self.end = end
            self.refresh()
        else:
            self.end = end
            self._place(end, full=False)

    def _place(self, end: int, full: bool) -> None:
        size = self.mapped_file_size
        for mf in reversed(self.files):
            pos = min(max(end - mf.file_from_offset, 0), size)
            if not full and pos == size and mf.wrote_position == size:
                break                                   # this one and older ones are done
            mf.set_positions(pos)

    def hold(self, mf: MappedFile):
        try:
            return super().hold(mf)
        except FileNotFoundError:
            self.refresh()                              # deleted by retention meanwhile
            return None

    def get_max_offset(self) -> int:
        return self.end

    flush = commit = truncate_dirty_files = delete_last_mapped_file = _refuse
    delete_expired_file_by_time = delete_expired_file_by_offset = destroy = _create = _refuse


class CommitLogView:
    """CommitLog reads over segments another process writes, bounded by `set_end`."""

    look_record = CommitLog.look_record                      # the same read logic, reused
    pickup_store_timestamp = CommitLog.pickup_store_timestamp

    def __init__(self, commitlog_dir: str, file_size: int, max_mapped: int = 16):
        self.file_size = file_size
        self.queue = ReadOnlyMappedFileQueue(commitlog_dir, file_size, max_mapped)
        self.queue.load()
        self.min_phy = 0

    def set_end(self, end: int) -> None:
        self.queue.set_end(end)

    def set_min(self, min_phy: int) -> None:
        """The first byte still in the log (retention moved it): re-list when it passes a segment."""
        if min_phy != self.min_phy:
            self.min_phy = min_phy
            first = self.queue.get_first_mapped_file()
            if first is not None and min_phy >= first.file_from_offset + self.file_size:
                self.queue.refresh()

    def get_min_offset(self) -> int:
        first = self.queue.get_first_mapped_file()
        if first is None:
            return -1
        return max(first.file_from_offset, self.min_phy)

    def get_max_offset(self) -> int:
        return self.queue.end

    get_confirm_offset = get_max_offset

    def read(self, phys: int, size: int) -> bytes | None:
        if phys < self.min_phy:
            return None
        return self.queue.read(phys, size)

    def shutdown(self) -> None:
        self.queue.shutdown()


class ConsumeQueueView(ConsumeQueue):
    """One consume queue written by the reput process; its max offset is learnt, not kept."""

    def __init__(self, topic: str, queue_id: int, root_dir: str, mapped_file_size: int,
                 max_mapped: int = 4, window=None):
        super().__init__(topic, queue_id, root_dir, mapped_file_size, READ_ONLY_FILE_OPS, max_mapped)
        self.queue = ReadOnlyMappedFileQueue(self.queue.store_path, mapped_file_size, max_mapped,
                                             window)
        self.max_entries = 0
        self.checked_dispatched = -1          # DISPATCHED as of the last scan
        self.min_phy_seen = -1

    def load(self) -> None:
        self.queue.load()
        first = self.queue.get_first_mapped_file()
        base = first.file_from_offset if first is not None else 0
        self.min_logic_offset = base
        self.max_entries = base // UNIT_SIZE
        self.queue.set_end(base)

    def get_max_offset_in_queue(self) -> int:
        return self.max_entries

    def repair_entry(self, index: int, phys: int, size: int, tags_code: int) -> bool:
        """Never here: the reput process writes the queue (a damaged entry a pull re-derived
        is served from the CommitLog at each pull; `mqstore check --fix` writes it again)."""
        return False

    def learn_max(self, max_offset: int) -> None:
        """An arrival: entries below `max_offset` are written."""
        if max_offset > self.max_entries:
            self.max_entries = max_offset
            self.queue.set_end(max_offset * UNIT_SIZE)

    def sync_min(self, min_phy: int) -> None:
        """Move the queue's start past records that retention removed from the CommitLog."""
        if min_phy == self.min_phy_seen:
            return
        self.min_phy_seen = min_phy
        self.queue.refresh()
        first = self.queue.get_first_mapped_file()
        if first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
            self.learn_max(self.min_logic_offset // UNIT_SIZE)
        if min_phy > 0:
            self.correct_min_offset(min_phy)

    def refresh_max(self, dispatched: int) -> int:
        """Scan forward from the known max for entries of records below `dispatched`."""
        self.checked_dispatched = dispatched
        n = self._skip_full_segments(self.max_entries, dispatched)
        while True:
            offset = n * UNIT_SIZE
            mf = self.queue.find_mapped_file_by_offset(offset)
            if mf is None:
                self.queue.refresh()
                mf = self.queue.find_mapped_file_by_offset(offset)
                if mf is None:
                    break
            buf = self.queue.hold(mf)
            if buf is None:
                break
            try:
                start = offset - mf.file_from_offset
                end = _written_end(mf.mapping, start, mf.file_size, dispatched)
            finally:
                mf.release()
            n += (end - start) // UNIT_SIZE
            if end < mf.file_size:
                break
        self.learn_max(n)
        return self.max_entries

    def _skip_full_segments(self, n: int, dispatched: int) -> int:
        """Start at the newest segment when its first entry is valid: a queue opens a new
        segment only when the previous one is full."""
        files = self.queue.files
        if not files or n * UNIT_SIZE >= files[-1].file_from_offset:
            return n
        last = files[-1]
        buf = self.queue.hold(last)
        if buf is None:
            return n
        try:
            ok = _entry_valid(buf, 0, dispatched)
        finally:
            last.release()
        return last.file_from_offset // UNIT_SIZE if ok else n

    put_message_position_info = recover = truncate_dirty_logic_files = _refuse
    delete_expired_file = destroy = flush = _refuse


def _entry_valid(buf, pos: int, dispatched: int) -> bool:
    phys, size, _ = ENTRY.unpack_from(buf, pos)
    return size > 0 and (size == BLANK_SIZE or (phys >= 0 and phys + size <= dispatched))


def _written_end(mapping, start: int, file_size: int, dispatched: int) -> int:
    """The byte position after the last trusted entry in [start, file_size) of one segment.

    Entries are written densely from the segment's start, so the written ones (size > 0)
    form a prefix: binary search for its end, then step back over entries whose record
    ends past `dispatched` (they may be being written right now)."""
    end = written_end(mapping, start, file_size)
    buf = mapping.buf
    while end > start and not _entry_valid(buf, end - UNIT_SIZE, dispatched):
        end -= UNIT_SIZE
    return end


class ConsumeQueueStoreView(ConsumeQueueStore):
    """Every consume queue of the store, opened on first use from what is on disk.

    `dispatched()` and `min_phy()` read the control block's DISPATCHED and MIN_PHY."""

    def __init__(self, root_dir: str, mapped_file_size: int, dispatched=lambda: 1 << 62,
                 min_phy=lambda: 0):
        super().__init__(root_dir, mapped_file_size, READ_ONLY_FILE_OPS)
        self.dispatched = dispatched
        self.min_phy = min_phy

    def load(self) -> None:
        """Nothing to do: queues are opened lazily by `find`."""

    def _new(self, topic: str, queue_id: int) -> ConsumeQueueView:
        return ConsumeQueueView(topic, queue_id, self.root_dir, self.mapped_file_size,
                                window=self.window)

    def find(self, topic: str, queue_id: int) -> ConsumeQueueView | None:
        """The queue's view, opened (and scanned) the first time its directory exists."""
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            if not os.path.isdir(os.path.join(self.root_dir, topic, str(queue_id))):
                return None
            cq = self.find_or_create(topic, queue_id)
            cq.load()
            cq.refresh_max(self.dispatched())
        cq.sync_min(self.min_phy())
        return cq

    def topic_queue_ids(self, topic: str) -> list[int]:
        """Queue ids that have a directory on disk."""
        try:
            names = os.listdir(os.path.join(self.root_dir, topic))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def topic_names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root_dir)
                          if os.path.isdir(os.path.join(self.root_dir, n)))
        except FileNotFoundError:
            return []

    put = flush = truncate_dirty = delete_expired = destroy = recover = _refuse


class IndexView(IndexService):
    """The index files of the reput process, read-only, re-listed before every query."""

    def __init__(self, index_dir: str, hash_slot_num: int, index_num: int,
                 max_msgs_num_batch: int = 64):
        super().__init__(index_dir, hash_slot_num, index_num, READ_ONLY_FILE_OPS, max_msgs_num_batch)

    def refresh(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.index_dir) if _INDEX_NAME.fullmatch(n))
        except FileNotFoundError:
            names = []
        with self._lock:
            known = {f.name: f for f in self._files}
            files = []
            for name in names:
                f = known.pop(name, None)
                if f is None:
                    try:
                        f = IndexFile(os.path.join(self.index_dir, name), self.hash_slot_num,
                                      self.index_num, self._fileops)
                    except (OSError, ValueError) as e:      # vanished, or not ours
                        log.warning("index file %s not opened: %s", name, e)
                        continue
                files.append(f)
            for f in known.values():
                f.close()
            self._files = files

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int):
        self.refresh()
        return super().query_offset(topic, key, max_num, begin, end)

    load = build_index = truncate = delete_expired_file = flush = _refuse

    def shutdown(self) -> None:
        self.close()
