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
the "raw" format) with the checks of core.codec.check_record, in one pass that reads each
record once: one struct unpack of the header, the topic, one split of the properties.
"""
from __future__ import annotations

import gc
import struct

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType, TimestampType,
)

from core.codec import _HEADERS, MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, SYSFLAG_POS, host_lengths
from core.crc import crc32
from core.message import (
    PROPERTY_KEYS, PROPERTY_TAGS, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED, bytes_to_host,
    string_to_properties,
)
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

_BLANK = struct.Struct(">ii")
_SYSFLAG = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


def check_schema(schema) -> None:
    """A read's schema is the source's own: Spark hands over one a user gave with .schema()."""
    if schema is not None and schema != SCHEMA:
        raise ValueError("the mqstore source reads the columns of docs/SPARK.md: leave out "
                         ".schema(...) and select or cast columns after load()")


class Stop:
    """Why `take_records` returned."""
    FULL = "full"          # BATCH_ROWS rows gathered: call again at the position returned
    DONE = "done"          # the end given was reached
    BLANK = "blank"        # a blank record: the segment's end
    END = "end"            # no record starts here (zeros, a foreign magic, a torn tail)
    CORRUPT = "corrupt"    # a framed record whose lengths (or body CRC) are wrong
    LIMIT = "limit"        # a record at or past the queue offset asked to stop at


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
_topics: dict = {}


def _host(raw: bytes) -> str:
    text = _hosts.get(raw)
    if text is None:
        if len(_hosts) > 10_000:
            _hosts.clear()
        text = _hosts[raw] = host_text(bytes_to_host(raw))
    return text


def _topic(raw: bytes) -> str:
    name = _topics.get(raw)
    if name is None:
        if len(_topics) > 10_000:
            _topics.clear()
        name = _topics[raw] = raw.decode("utf-8")
    return name


def take_records(buf, pos: int, end: int, out: Columns, topics=None, check_crc: bool = False,
                 queue_end: int | None = None) -> tuple[str, int]:
    """Add the records of `buf` (bytes or an mmap: slices of it are bytes) from `pos` (below `end`) to `out`: those a consumer is given (not
    prepared or rolled-back transactions), of `topics` (None: all), below queue offset
    `queue_end` (None: no limit). Returns (Stop, the position reached: the record it stopped at)."""
    collecting = gc.isenabled()
    gc.disable()                     # rows make no cycles; the collector would walk them ~40% of the time
    try:
        return _take(buf, pos, end, out.rows, topics, check_crc, queue_end)
    finally:
        if collecting:
            gc.enable()


def _take(buf, pos: int, end: int, rows: list, topics, check_crc: bool, queue_end) -> tuple[str, int]:
    add = rows.append
    while pos < end:
        if len(rows) >= BATCH_ROWS:
            return Stop.FULL, pos
        if end - pos < 8:
            return Stop.END, pos
        total, magic = _BLANK.unpack_from(buf, pos)
        if magic == MAGIC_BLANK:
            return Stop.BLANK, pos
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or total < MIN_RECORD_SIZE or total > end - pos:
            return Stop.END, pos
        sys_flag = _SYSFLAG.unpack_from(buf, pos + SYSFLAG_POS)[0]
        header = _HEADERS[host_lengths(sys_flag)]
        h = header.unpack_from(buf, pos)
        if queue_end is not None and h[5] >= queue_end:
            return Stop.LIMIT, pos
        body_at = pos + header.size
        p = body_at + h[14]
        stop = pos + total
        if h[14] < 0 or p > stop - 3:
            return Stop.CORRUPT, pos
        if magic == MAGIC_V1:
            topic_len, p = buf[p], p + 1
        else:
            topic_len, p = _I16.unpack_from(buf, p)[0], p + 2
        topic_raw = buf[p:p + topic_len]
        p += topic_len
        if p + 2 > stop:
            return Stop.CORRUPT, pos
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != stop:
            return Stop.CORRUPT, pos
        body = buf[body_at:body_at + h[14]]
        if check_crc and crc32(body) & 0x7FFFFFFF != h[2]:
            return Stop.CORRUPT, pos
        try:
            topic = _topic(topic_raw)
            props = string_to_properties(buf[p:stop].decode("utf-8")) if props_len else {}
        except UnicodeDecodeError:
            return Stop.CORRUPT, pos
        pos = stop
        if (topics is not None and topic not in topics) or \
                sys_flag & SYSFLAG_TRANSACTION_MASK in SYSFLAG_TRANSACTION_UNQUEUED:
            continue
        tags = props.pop(PROPERTY_TAGS, None)
        keys = props.pop(PROPERTY_KEYS, None)
        add((topic, h[3], h[5], h[6], (h[11] + _I64.pack(h[6])).hex().upper(), tags, keys,
             list(props.items()), body, h[8], h[10], _host(h[9]), _host(h[11]), h[4], sys_flag, h[12]))
    return Stop.DONE, pos
