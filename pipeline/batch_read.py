"""`spark.read.format("mqstore")`: the CommitLog's files read in parallel, a partition per
segment.

The reader needs no running store: it reads the files under the store's root (`path`), in the
CommitLog directory the store's format file records (`store_path_commit_log`), so it also
reads a copy of a store, or one that is stopped. Each partition maps one segment read-only
and walks its records from the start as recovery does (core.codec.check_record): a blank
record or the end of what was written ends the segment. It gives the messages a consumer
can be given, as dispatch does: plain messages and committed transactions, not prepared or
rolled-back ones. Option `topic` (one name, or several with commas) keeps only those topics.

A record that is framed but wrong (lengths that do not add up; with `checkCrc` true, a body
whose CRC differs) fails the read with its offset, unless it is the last thing in the newest
segment: a store that is running may be writing it right then, and recovery would cut the log
there. `mqstore check --store DIR` says what is wrong with a damaged store.
"""
from __future__ import annotations

import dataclasses
import mmap
import os

from pyspark.sql.datasource import DataSourceReader, InputPartition

from core.codec import RecordCheck, check_record
from core.decode import decode_message
from core.mapped_file import offset_to_file_name
from core.message import SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED
from pipeline import options as opt
from pipeline.rows import message_row


@dataclasses.dataclass
class SegmentPartition(InputPartition):
    """One CommitLog segment: its file, the global offset of its first byte, whether it is the
    newest (whose end may be being written), and the topics wanted (None: all)."""
    path: str
    file_from_offset: int
    newest: bool
    topics: frozenset | None
    check_crc: bool


def segment_partitions(root: str, topics, check_crc: bool) -> list:
    """A partition per CommitLog segment of the store at `root`, oldest first."""
    from core.fsck import NotAStoreError, resolve_config
    cfg, _notes = resolve_config(root)
    directory = cfg.commitlog_dir
    if not os.path.isdir(directory):
        raise NotAStoreError(f"no store at {root}: {directory} does not exist")
    names = sorted(n for n in os.listdir(directory) if len(n) == 20 and n.isdigit())
    return [SegmentPartition(os.path.join(directory, n), int(n), i == len(names) - 1, topics, check_crc)
            for i, n in enumerate(names)]


def read_segment(part: SegmentPartition):
    """Yield the rows of the partition's segment in log order."""
    with open(part.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        buf = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        yield from _rows(buf, size, part)
    finally:
        buf.close()


def _rows(buf, size: int, part: SegmentPartition):
    topics, pos = part.topics, 0
    while pos < size:
        found, length = check_record(buf, pos, size, part.check_crc)
        if found is RecordCheck.BLANK or found is RecordCheck.END:
            return
        if found is RecordCheck.CORRUPT:
            if part.newest and _nothing_after(buf, pos + length, size):
                return
            at = part.file_from_offset + pos
            raise ValueError(f"corrupt record at CommitLog offset {at} (segment "
                             f"{offset_to_file_name(part.file_from_offset)}, byte {pos}); "
                             f"`mqstore check` reports the damage and `mqstore recover` repairs it")
        if (topics is None or found.topic in topics) and \
                found.sys_flag & SYSFLAG_TRANSACTION_MASK not in SYSFLAG_TRANSACTION_UNQUEUED:
            yield message_row(decode_message(buf, pos))
        pos += length


def _nothing_after(buf, pos: int, size: int) -> bool:
    """No record starts at `pos` (zeros, or the end): a torn last write, not damage inside the log."""
    if pos >= size:
        return True
    return check_record(buf, min(pos, size), size, False)[0] is RecordCheck.END


class CommitLogReader(DataSourceReader):
    """The batch reader: small (it is pickled with every task), the plan made in partitions()."""

    def __init__(self, options):
        self.root = opt.store_root(options)
        self.topics = opt.topics(options)
        self.check_crc = opt.flag(options, "checkCrc", False)

    def partitions(self) -> list:
        return segment_partitions(self.root, self.topics, self.check_crc)

    def read(self, partition: SegmentPartition):
        return read_segment(partition)
