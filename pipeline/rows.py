"""The rows the `mqstore` Spark data source reads: their schema, and stored records turned into
them as Arrow record batches (Spark takes those without converting row by row).

Every read (the CommitLog files in batch, the consume queues of a running store in streaming)
gives the same columns, named as `core.MessageExt` names its fields, with RocketMQ's
millisecond timestamps as Spark timestamps (UTC) and hosts as "ip:port" text:

    topic, queue_id, queue_offset, phys_offset, msg_id, tags, keys, properties, body,
    born_timestamp, store_timestamp, born_host, store_host, flag, sys_flag, reconsume_times

`keys` is the KEYS property as stored (keys separated by a space); `properties` holds the
other properties (UNIQ_KEY among them), TAGS and KEYS having columns of their own.

`take_records` walks records laid end to end (a CommitLog segment, or a pull reply's frame in
the "raw" format), each read once by core.record.codec.parse_record, the parser recovery's checks
(check_record) use.
"""
from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
)

from core.record.codec import parse_record
from core.record.message import (
    PROPERTY_KEYS, PROPERTY_TAGS, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED, bytes_to_host,
    create_message_id,
)
from core.record.stop import Stop
from ipc.received import host_text

_TYPES = {"string": StringType(), "int": IntegerType(), "long": LongType(), "binary": BinaryType(),
          "timestamp": TimestampType(), "map": MapType(StringType(), StringType())}
_COLUMN_TYPES = (("topic", "string"), ("queue_id", "int"), ("queue_offset", "long"), ("phys_offset", "long"),
                 ("msg_id", "string"), ("tags", "string"), ("keys", "string"), ("properties", "map"),
                 ("body", "binary"), ("born_timestamp", "timestamp"), ("store_timestamp", "timestamp"),
                 ("born_host", "string"), ("store_host", "string"), ("flag", "int"), ("sys_flag", "int"),
                 ("reconsume_times", "int"))
SCHEMA = StructType([StructField(name, _TYPES[kind]) for name, kind in _COLUMN_TYPES])
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")     # what Spark checks a batch against
BATCH_ROWS = 8192
MAX_MS = (1 << 63) // 1000 - 1  # timestamps (ms) whose microseconds an int64 holds



def check_schema(schema) -> None:
    """A read's schema is the source's own: Spark hands over one a user gave with .schema()."""
    if schema is not None and schema != SCHEMA:
        raise ValueError("the mqstore source reads the columns of docs/SPARK.md: leave out "
                         ".schema(...) and select or cast columns after load()")


# Why `take_records` returned: Stop.BLANK (the segment's end), END (no record starts here),
# CORRUPT (a framed record that fails its checks), FULL (BATCH_ROWS rows gathered: call again
# at the position returned), DONE (the end given was reached) or LIMIT (a record at or past
# the queue offset asked to stop at).


class Columns:
    """Rows gathered (a tuple each, in the schema's order) until `batch()` makes them a
    RecordBatch."""

    def __init__(self):
        self.rows: list = []

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self) -> pa.RecordBatch:
        cols, self.rows = list(zip(*self.rows)), []
        arrays = []
        for i, field in enumerate(ARROW_SCHEMA):
            values = cols[i]
            if pa.types.is_timestamp(field.type):               # RocketMQ's ms -> us
                ms = np.array(values, np.int64)
                beyond = (ms > MAX_MS) | (ms < -MAX_MS)         # a producer's nonsense: null
                arrays.append(pa.array(ms * 1000, field.type, mask=beyond if beyond.any() else None))
            else:
                arrays.append(pa.array(values, field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


_hosts: dict = {}


def _host(raw: bytes) -> str:
    text = _hosts.get(raw)
    if text is None:
        if len(_hosts) > 10_000:
            _hosts.clear()
        text = _hosts[raw] = host_text(bytes_to_host(raw))
    return text


def take_records(buf, pos: int, end: int, out: Columns, topics=None, check_crc: bool = False,
                 queue_end: int | None = None) -> tuple[str, int]:
    """Add to `out` the records of `buf` (bytes or an mmap: slices of it are bytes) from `pos`
    (below `end`) that a consumer is given (not prepared or rolled-back transactions), of
    `topics` (None: all), below queue offset `queue_end` (None: no limit). Returns (Stop, the
    position reached: the record it stopped at)."""
    collecting = gc.isenabled()
    gc.disable()                     # rows make no cycles; the collector would walk them ~40% of the time
    try:
        return _take(buf, pos, end, out.rows, topics, check_crc, queue_end)
    finally:
        if collecting:
            gc.enable()


def full_batches(buf, pos: int, end: int, out: Columns, topics=None, check_crc: bool = False,
                 queue_end: int | None = None):
    """`take_records` until it stops for another reason than a full batch, yielding each full
    batch on the way; returns (Stop, position) to a `yield from`."""
    while True:
        why, pos = take_records(buf, pos, end, out, topics, check_crc, queue_end)
        if why is not Stop.FULL:
            return why, pos
        yield out.batch()


def _take(buf, pos: int, end: int, rows: list, topics, check_crc: bool, queue_end) -> tuple[str, int]:
    add = rows.append
    while pos < end:
        if len(rows) >= BATCH_ROWS:
            return Stop.FULL, pos
        outcome, total, h, body_at, topic, props = parse_record(buf, pos, end, check_crc)
        if outcome is not None:
            return outcome, pos
        if queue_end is not None and h[5] >= queue_end:
            return Stop.LIMIT, pos
        pos += total
        sys_flag = h[7]
        if (topics is not None and topic not in topics) or \
                sys_flag & SYSFLAG_TRANSACTION_MASK in SYSFLAG_TRANSACTION_UNQUEUED:
            continue
        tags = props.pop(PROPERTY_TAGS, None)
        keys = props.pop(PROPERTY_KEYS, None)
        add((topic, h[3], h[5], h[6], create_message_id(h[11], h[6]), tags, keys,
             list(props.items()), buf[body_at:body_at + h[14]], h[8], h[10], _host(h[9]), _host(h[11]),
             h[4], sys_flag, h[12]))
    return Stop.DONE, pos
