"""`spark.read.format("mqstore")`: the CommitLog's files read in parallel, a partition per
segment.

The reader needs no running store: it reads the files under the store's root (`path`), in the
CommitLog directory the store's format file records (`store_path_commit_log`), so it also
reads a copy of a store, or one that is stopped. Each partition maps one segment read-only
and walks its records from the start with recovery's checks (pipeline/rows.py): a blank
record or the end of what was written ends the segment. A segment deleted by retention after
the read was planned fails its task (FileNotFoundError): plan again. It gives the messages a consumer
can be given, as dispatch does: plain messages and committed transactions, not prepared or
rolled-back ones. Option `topic` (one name, or several with commas) keeps only those topics.

A record that is framed but wrong (lengths that do not add up; with `checkCrc` true, a body
whose CRC differs) fails the read with its offset, unless it is the last thing written (in the
last segment holding records): a store that is running may be writing it right then, and a
copy's bytes can become visible out of order, so any bad record there is looked at again a
moment later; one still torn is where recovery would cut the log. `mqstore check --store DIR` says what is wrong with a damaged store.
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import time

from pyspark.sql.datasource import DataSourceReader, InputPartition

from core.record.codec import RecordCheck, check_record
from core.files.mapped_file import offset_to_file_name
from pipeline import options as opt
from pipeline.rows import Columns, Stop, check_schema, full_batches

TORN_WAIT_S = 0.2        # how long a record at the log's end that is not whole yet is given


@dataclasses.dataclass
class SegmentPartition(InputPartition):
    """One CommitLog segment: its file, the global offset of its first byte, whether it is at
    the log's end (the last segment holding records, or one a running store's allocator made
    ahead of it: a record there may be being written), and the topics wanted (None: all)."""
    path: str
    file_from_offset: int
    at_end: bool
    topics: frozenset | None
    check_crc: bool


def segment_partitions(root: str, topics, check_crc: bool) -> list:
    """A partition per CommitLog segment of the store at `root`, oldest first."""
    from core.fsck import NotAStoreError, resolve_config
    cfg, _notes = resolve_config(root)
    directory = cfg.commitlog_dir
    if not os.path.isdir(directory):
        raise NotAStoreError(f"no store at {root}: {directory} does not exist")
    paths = [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if len(n) == 20 and n.isdigit()]
    last = len(paths) - 1
    while last > 0 and not _holds_records(paths[last]):
        last -= 1
    return [SegmentPartition(p, int(os.path.basename(p)), i >= last, topics, check_crc)
            for i, p in enumerate(paths)]


def _holds_records(path: str) -> bool:
    with open(path, "rb") as f:
        return any(f.read(8))


def read_segment(part: SegmentPartition):
    """Yield the partition's segment as Arrow record batches of rows, in log order."""
    with open(part.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        buf = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        out, pos, looked_again_at = Columns(), 0, -1
        while True:
            why, pos = yield from full_batches(buf, pos, size, out, part.topics, part.check_crc)
            if why is Stop.CORRUPT and part.at_end:
                if looked_again_at != pos:           # maybe being written: look once more
                    looked_again_at = pos            # (a copy's bytes may show up in any order,
                    time.sleep(TORN_WAIT_S)          # so a whole record after it proves nothing)
                    continue
                if _torn_tail(buf, pos, size):
                    break                            # still torn: the log ends here, as recovery says
            if why is Stop.CORRUPT:
                at = part.file_from_offset + pos
                raise ValueError(f"corrupt record at CommitLog offset {at} (segment "
                                 f"{offset_to_file_name(part.file_from_offset)}, byte {pos}); "
                                 f"`mqstore check` reports the damage and `mqstore recover` repairs it")
            break
        if len(out):
            yield out.batch()
    finally:
        buf.close()


def _torn_tail(buf, pos: int, size: int) -> bool:
    """The bad record at `pos` is the last thing written (no record starts after it): a write
    still going on, or torn by a crash, rather than damage inside the log."""
    after = pos + int.from_bytes(buf[pos:pos + 4], "big")
    return after >= size or check_record(buf, after, size, False)[0] is RecordCheck.END


class CommitLogReader(DataSourceReader):
    """The batch reader: small (it is pickled with every task), the plan made in partitions()."""

    def __init__(self, options, schema=None):
        check_schema(schema)
        self.root = opt.store_root(options)
        self.topics = opt.topics(options)
        self.check_crc = opt.flag(options, "checkCrc", False)

    def partitions(self) -> list:
        return segment_partitions(self.root, self.topics, self.check_crc)

    def read(self, partition: SegmentPartition):
        return read_segment(partition)
