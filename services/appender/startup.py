"""What a (re)starting appender does before it takes puts (docs/SERVICES.md, appender):

- `open_segments`: the CommitLog segments as the control block says they are. Unlike
  `MappedFileQueue.load` it deletes nothing (the allocator may be creating a `*.tmp` next to
  them right now; the supervisor's recovery removed the leftovers of a crash) and it positions
  the segment holding WROTE instead of treating every file as full. Segments past it are ones
  the allocator made ahead; they are left out of the queue until the appender rolls into them.
- `zero_past_wrote`: zero, durably, every byte past WROTE (the tail of the current segment and
  the segments made ahead): a record an earlier appender was writing when it died was never
  acknowledged, and stale bytes must never look like records to a later recovery.
- `revalidate`: walk [DISPATCHED, WROTE) record by record with the CRC check and collect the
  next queue offset of every queue seen there. With the transient pool the bytes of a segment
  whose buffer is still lent are read from the buffer (the file may lag behind it).
- `consume_queue_max_offsets`: the max offset of every consume queue, read-only (`os.pread` of
  the last segment, never a write, never a recovery): the index of the last entry with a size
  above 0 in the queue's last file, plus one.

The topic-queue table is the consume queues' max offsets raised by what `revalidate` saw.
"""
from __future__ import annotations

import logging
import os

from core.record.codec import DispatchRequest, RecordCheck, check_record
from core.log.consume_queue import UNIT_SIZE, written_end
from core.files.fileops import FileReader
from core.files.mapped_file import MappedFile
from core.record.message import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED as _NO_QUEUE_OFFSET

log = logging.getLogger(__name__)


class LogDamaged(RuntimeError):
    """The CommitLog below WROTE does not hold valid records: it needs the abnormal recovery."""


def _segment_names(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory)
                  if n.isdigit() and os.path.isfile(os.path.join(directory, n)))


def open_segments(queue, wrote: int) -> list[MappedFile]:
    """Fill `queue.files` up to the segment holding `wrote`; return the segments past it."""
    size = queue.mapped_file_size
    queue.fileops.make_dirs(queue.store_path)
    kept, ahead = [], []
    for name in _segment_names(queue.store_path):
        path = os.path.join(queue.store_path, name)
        if os.path.getsize(path) != size:
            raise LogDamaged(f"{path} is {os.path.getsize(path)} bytes, segments are {size}")
        mf = MappedFile(path, size, queue.fileops)
        mf.on_map = queue._trim_window
        start = mf.file_from_offset
        if start + size <= wrote:
            mf.set_positions(size)
            kept.append(mf)
        elif start <= wrote:
            mf.set_positions(wrote - start)
            kept.append(mf)
        else:
            ahead.append(mf)
    if wrote > 0 and (not kept or kept[-1].file_from_offset + size < wrote):
        raise LogDamaged(f"no CommitLog segment holds WROTE = {wrote}")
    queue.files = kept
    queue.flushed_where = queue.committed_where = wrote
    return ahead


def zero_past_wrote(queue, ahead: list[MappedFile], wrote: int) -> None:
    last = queue.files[-1] if queue.files else None
    if last is not None and last.wrote_position < last.file_size:
        last.zero(last.wrote_position, last.file_size)
        last.unmap_if_idle()
    for mf in ahead:
        mf.zero(0, mf.file_size)
        mf.unmap_if_idle()


def revalidate(queue, pool, start: int, end: int, progress=None) -> dict[tuple[str, int], int]:
    """Check every record in [start, end); return {(topic, queue_id): next queue offset}."""
    table: dict[tuple[str, int], int] = {}
    size = queue.mapped_file_size
    offset = start
    while offset < end:
        mf = queue.find_mapped_file_by_offset(offset)
        if mf is None:
            raise LogDamaged(f"no segment holds offset {offset} below WROTE = {end}")
        base = mf.file_from_offset
        buf = pool.buffer_for(base) if pool is not None else None
        held = buf is None
        if held:
            buf = queue.hold(mf)
        try:
            offset = base + _walk(buf, offset - base, min(size, end - base), base, table)
        finally:
            if held:
                mf.release()
                mf.unmap_if_idle()
        if progress is not None:
            progress(offset - start, end - start)
    return table


def _walk(buf, pos: int, limit: int, base: int, table: dict) -> int:
    while pos < limit:
        req, n = check_record(buf, pos, limit, True)
        if req is RecordCheck.BLANK:
            return pos + n
        if not isinstance(req, DispatchRequest) or req.commit_log_offset != base + pos:
            raise LogDamaged(f"no valid record at CommitLog offset {base + pos} "
                             f"({req if isinstance(req, str) else 'wrong offset'}) below WROTE")
        if (req.sys_flag & SYSFLAG_TRANSACTION_MASK) not in _NO_QUEUE_OFFSET:
            key = (req.topic, req.queue_id)
            if req.consume_queue_offset + 1 > table.get(key, 0):
                table[key] = req.consume_queue_offset + 1
        pos += n
    return pos


def consume_queue_max_offsets(root: str, file_size: int) -> dict[tuple[str, int], int]:
    """{(topic, queue_id): max offset} of the queues under `root`, read-only."""
    out = {}
    if not os.path.isdir(root):
        return out
    for topic in os.listdir(root):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for qid in os.listdir(tdir):
            qdir = os.path.join(tdir, qid)
            if qid.isdigit() and os.path.isdir(qdir):
                names = _segment_names(qdir)
                if names:
                    out[topic, int(qid)] = _queue_max_offset(os.path.join(qdir, names[-1]), file_size)
    return out


def _queue_max_offset(path: str, file_size: int) -> int:
    """Entries are written in order, so the used ones are a prefix: its end, found below the
    end of the file's data (`core.log.consume_queue.written_end`: holes are not read)."""
    first = int(os.path.basename(path)) // UNIT_SIZE
    with FileReader(path) as reader:
        return first + written_end(reader, 0, file_size) // UNIT_SIZE


def topic_queue_table(cq_max: dict, seen: dict) -> dict[tuple[str, int], int]:
    table = dict(cq_max)
    for key, nxt in seen.items():
        if nxt > table.get(key, 0):
            table[key] = nxt
    return table
