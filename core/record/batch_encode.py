"""A batch's records encoded: `encode_batch`, the one entry for a batch, and the strategies it
chooses among; the fast one is the batch as columns: one set of numpy operations for the whole
batch.

A producer's batch (the `put_batch` bodies frame, or `MessageStore.put_messages` of messages
alike but for body and UNIQ_KEY) is records that share every header field and every
property but BODY, BODYCRC, TOTALSIZE, BODYLEN, UNIQ_KEY and the three fields set at
append (QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP). `prepare_columns` validates such a
batch and builds its fixed-width parts as arrays: the headers (a numpy structured array,
one row per record) and the tails (TOPIC ... PROPERTIES, one byte row per record, each
with its own key). `PreparedBatch.write` fills the position fields of every row at once and
copies the batch into the segment: when every record has the same size the segment range
is viewed as a 2-D array and headers, bodies and tails go in with three assignments;
otherwise the pieces are joined in order and copied with one assignment.

The headers and tails of a batch depend only on its shape (every shared field, the number of
records, the body size, the key length): `_SHAPES` keeps them, so the next batch of that shape
is checked only for what is its own (bodies, keys, born timestamp) and costs one CRC per body
and a few numpy calls for the whole batch.

It applies when the UNIQ_KEYs (if any) all have the same UTF-8 length, which the keys a
producer makes always do; `prepare_columns` returns None otherwise, and the caller takes
`core.record.codec.prepare_batch`, which gives the same bytes record by record. The tests hold
the two to byte equality.

With `prop_crc` every record's tail ends in the CRC reserve (`core.record.crc_property`); `write` seals
each record once the position fields are set (one CRC per record; the digits of a uniform
batch go in with one numpy assignment).
"""
from __future__ import annotations

import copy
import dataclasses
from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from core.record.layout import DTYPES
from core.record.codec import (
    TOTAL_SIZE_SLACK, PreparedRecord, is_body, prepare_batch, prepare_record, uniq_key_at, write_header,
)
from core.record.body_crc import crc32_many
from core.record.key_block import KeyBlock, block_problem, key_list
from core.record.crc_property import CRC32_RESERVED_LEN, RESERVE, seal_grid, seal_run
from core.record.message import PROPERTY_UNIQ_KEY, SYSFLAG_TRANSACTION_MASK, Message, has_delay_level
from core.record import refusal as why
from core.status import PutMessageStatus, refuse, take_reason

_U8 = np.uint8


_SHAPES: dict = {}          # _shape_key -> _Shape, oldest first
SHAPES_KEPT = 128           # at most this many shapes (headers and tails: a few KiB each for 32)
SHAPE_MAX_RECORDS = 1024    # larger batches are not kept


class _Shape:
    """What every batch of one shape shares (`_SHAPES`): the record standing for the batch (the
    first, as `prepare_record` makes it), the n headers but for the fields each batch sets, the
    n tails but for their UNIQ_KEY columns, and each record's (index, start) in the batch."""

    __slots__ = ("first", "record_sizes", "total", "heads", "tails", "key_at", "places", "fields",
                 "sealed")

    def __init__(self, first: PreparedRecord, record_sizes: tuple, rows: np.ndarray, tails: np.ndarray,
                 key_at: int):
        self.first = dataclasses.replace(first, body=b"")  # never the producer's frame, kept alive
        self.record_sizes = record_sizes
        self.total = sum(record_sizes)
        self.heads = rows.view(_U8).reshape(len(rows), -1)
        self.tails = tails
        self.key_at = key_at
        places = np.zeros((len(record_sizes), 2), np.int64)
        places[:, 0] = np.arange(len(record_sizes))
        places[1:, 1] = np.cumsum(record_sizes[:-1])
        self.places = places
        for shared in (self.heads, tails, places):
            shared.flags.writeable = False            # batches of every thread read them
        self.sealed = first.tail[-CRC32_RESERVED_LEN:] == RESERVE     # records with the CRC
        self.fields = _set_fields(rows.dtype, record_sizes[0] if len(set(record_sizes)) == 1 else None)


def _set_fields(header: np.dtype, record_size: int | None) -> np.dtype:
    """The fields a batch sets (CRC, QUEUEOFFSET and PHYSICALOFFSET together, BORNTIMESTAMP,
    STORETIMESTAMP) over rows of `record_size` bytes (whole records one after the other), or
    over bare headers."""
    return np.dtype({"names": ["crc", "positions", "born_ts", "store_ts"],
                     "formats": [">i4", (">i8", 2), ">i8", ">i8"],
                     "offsets": [header.fields[f][1] for f in ("crc", "queue_offset", "born_ts", "store_ts")],
                     "itemsize": record_size or header.itemsize})


class PreparedBatch:
    """A validated batch ready to write: its shape and what is its own (CRCs, born timestamp,
    UNIQ_KEYs, bodies). `first` stands for the batch (topic, queue and flags)."""

    __slots__ = ("_shape", "first", "record_sizes", "total", "_crcs", "_born", "_keys", "_bodies",
                 "_block")

    def __init__(self, shape: _Shape, crcs: np.ndarray, born: int, keys: bytes | None, bodies: list,
                 block):
        self._shape = shape
        self.first = shape.first
        self.record_sizes = shape.record_sizes
        self.total = shape.total
        self._crcs = crcs          # the BODYCRC of each record
        self._born = born
        self._keys = keys          # the UNIQ_KEYs back to back (ASCII, one width), or None
        self._bodies = bodies
        self._block = block        # the bodies back to back, when they are all one size

    def __len__(self) -> int:
        return len(self.record_sizes)

    def write(self, buf, pos: int, queue_offset: int | None, phys_offset: int,
              store_timestamp: int) -> int:
        """Write the records at `pos` of `buf`, the first at `phys_offset` with `queue_offset`
        (None: 0 for all, a transaction's prepared or rollback record); return the end."""
        shape = self._shape
        n, total, keys = len(shape.record_sizes), shape.total, self._keys
        heads, tails, h = shape.heads, shape.tails, shape.heads.shape[1]
        out = grid = None
        try:
            out = np.frombuffer(buf, _U8, total, pos)   # an export of buf: dropped below
            if self._block is not None:                 # one size: the batch as an (n, size) grid
                grid = out.reshape(n, shape.record_sizes[0])
                body_end = grid.shape[1] - tails.shape[1]
                grid[:, :h] = heads
                grid[:, h:body_end] = np.frombuffer(self._block, _U8).reshape(n, body_end - h)
                grid[:, body_end:] = tails
                if keys:
                    at = body_end + shape.key_at
                    grid[:, at:at + len(keys) // n] = np.frombuffer(keys, _U8).reshape(n, -1)
                self._set(np.frombuffer(buf, shape.fields, n, pos), queue_offset, phys_offset,
                          store_timestamp)
                if shape.sealed:
                    seal_grid(buf, pos, grid)
            else:
                rows = np.frombuffer(bytearray(heads.tobytes()), shape.fields)
                self._set(rows, queue_offset, phys_offset, store_timestamp)
                if keys:
                    tails = tails.copy()
                    tails[:, shape.key_at:shape.key_at + len(keys) // n] = \
                        np.frombuffer(keys, _U8).reshape(n, -1)
                head_b, tail_b = rows.tobytes(), tails.tobytes()
                t = tails.shape[1]
                out[:] = np.frombuffer(b"".join(chain.from_iterable(zip(
                    [head_b[i:i + h] for i in range(0, n * h, h)], self._bodies,
                    [tail_b[i:i + t] for i in range(0, n * t, t)]))), _U8)
                if shape.sealed:
                    seal_run(buf, pos, shape.record_sizes)
        finally:
            del out, grid                                 # so that buf can be closed
        return pos + total

    def _set(self, rows: np.ndarray, queue_offset: int | None, phys_offset: int, store_timestamp: int):
        rows["crc"] = self._crcs
        rows["born_ts"] = self._born
        rows["store_ts"] = store_timestamp
        positions = self._shape.places + (queue_offset or 0, phys_offset)
        if queue_offset is None:
            positions[:, 0] = 0
        rows["positions"] = positions


# The fields a batch's messages must share to be encoded once (`prepare_batch`).
_SHARED_FIELDS = attrgetter("topic", "queue_id", "tags", "keys", "flag", "born_timestamp",
                            "born_host", "store_host", "sys_flag", "reconsume_times",
                            "prepared_transaction_offset")
_PROPERTIES = attrgetter("properties")
_BODY = attrgetter("body")
_UNIQ = itemgetter(PROPERTY_UNIQ_KEY)
_MESSAGE_FIELDS = attrgetter(*(f.name for f in dataclasses.fields(Message)))


def batch_template(msgs):
    """(template, UNIQ_KEYs or None) when the messages differ only in body and UNIQ_KEY, so
    that the batch is encoded once (`prepare_batch_records`); None otherwise. Each test runs over the
    whole batch at once (map, list.count)."""
    n = len(msgs)
    shared_fields = list(map(_SHARED_FIELDS, msgs))
    if shared_fields.count(shared_fields[0]) != n:
        return None
    first = msgs[0]
    all_props = list(map(_PROPERTIES, msgs))
    props = all_props[0] or {}
    if len(props) > 1:
        # The template writes the first message's properties in their order, the UNIQ_KEY
        # last: only for messages that give them so (dict equality ignores order).
        try:
            orders = list(map(tuple, all_props))
        except TypeError:                              # a message without properties
            return None
        if orders.count(orders[0]) != n or (PROPERTY_UNIQ_KEY in props
                                             and orders[0][-1] != PROPERTY_UNIQ_KEY):
            return None
    if PROPERTY_UNIQ_KEY not in props:
        if all_props.count(all_props[0]) != n:
            return None
        return _copy_message(first), None
    try:
        lengths = list(map(len, all_props))
        keys = list(map(_UNIQ, all_props))
    except (TypeError, LookupError):                   # no properties, or no UNIQ_KEY
        return None
    if lengths.count(len(props)) != n or list(map(type, keys)).count(str) != n:
        return None
    shared = {k: v for k, v in props.items() if k != PROPERTY_UNIQ_KEY} if len(props) > 1 else {}
    if shared and not all(shared.items() <= p.items() for p in all_props):   # None values too
        return None
    template = _copy_message(first)
    template.properties = shared
    return template, keys


def _copy_message(msg):
    """copy.copy of a message, without the reduce protocol for a plain Message."""
    return Message(*_MESSAGE_FIELDS(msg)) if msg.__class__ is Message else copy.copy(msg)


def encode_batch(msgs: list, max_message_size: int, store_host_bytes: bytes | None = None,
                 prop_crc: bool = False, bodies: list | None = None, uniq_keys=None, block=None,
                 sizes: list | None = None):
    """The one entry for encoding a batch (one topic and queue, appended as one unit): a
    PreparedBatch or a list of PreparedRecords, or the PutMessageStatus refusing it. The way is
    chosen here: as columns when the records are alike but for body and UNIQ_KEY, else record
    by record (`prepare_batch_records`), else each message on its own (`prepare_each`).

    `msgs` are the messages; or, with `bodies` (the put_batch frame, docs/PROTOCOL.md), one
    message standing for all of them, with `uniq_keys` (a list or a KeyBlock), `block` (the
    bodies back to back) and `sizes` (their lengths) as `prepare_batch_records` takes them."""
    if bodies is not None:
        return prepare_batch_records(msgs[0], bodies, max_message_size, store_host_bytes, uniq_keys,
                                     block, sizes, prop_crc)
    shared = batch_template(msgs)
    if shared is not None:
        return prepare_batch_records(shared[0], list(map(_BODY, msgs)), max_message_size,
                                     store_host_bytes, shared[1], prop_crc=prop_crc)
    first = msgs[0]
    if any(m.topic != first.topic or m.queue_id != first.queue_id for m in msgs):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, "a batch's messages share one topic and queue")
    return prepare_each(msgs, max_message_size, store_host_bytes, prop_crc)


def prepare_batch_records(msg, bodies: list, max_message_size: int,
                          store_host_bytes: bytes | None = None, uniq_keys=None, block=None,
                          sizes: list | None = None, prop_crc: bool = False):
    """A batch alike but for body and UNIQ_KEY, prepared as columns where it fits them and
    record by record (`core.record.codec.prepare_batch`) otherwise; or the PutMessageStatus. As
    RocketMQ, a batch takes no delay level and no transaction (MESSAGE_ILLEGAL). `uniq_keys`
    is a list of strings or a `core.record.key_block.KeyBlock`."""
    if has_delay_level(msg.properties):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(0, why.BATCH_DELAY))
    recs = prepare_columns(msg, bodies, max_message_size, store_host_bytes, uniq_keys, block, sizes,
                           prop_crc)
    if recs is None:
        recs = prepare_batch(msg, bodies, max_message_size, store_host_bytes, key_list(uniq_keys),
                             prop_crc)
    if recs.__class__ is not PutMessageStatus and \
            (recs.first if recs.__class__ is PreparedBatch else recs[0]).sys_flag & SYSFLAG_TRANSACTION_MASK:
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(0, why.BATCH_TRANSACTION))
    return recs


def prepare_each(msgs, max_message_size: int, store_host_bytes: bytes | None = None,
                 prop_crc: bool = False):
    """A batch whose messages differ in more than body and UNIQ_KEY, each prepared on its own
    (`core.record.codec.prepare_record`); or the PutMessageStatus refusing it, under the batch rules
    of `prepare_batch_records` (no delay level, no transaction)."""
    recs = []
    for i, m in enumerate(msgs):
        rec = prepare_record(m, max_message_size, store_host_bytes, prop_crc)
        if rec.__class__ is PutMessageStatus:
            return refuse(rec, why.in_batch(i, take_reason()))
        if rec.sys_flag & SYSFLAG_TRANSACTION_MASK or has_delay_level(m.properties):
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(i, why.BATCH_DELAY
                          if has_delay_level(m.properties) else why.BATCH_TRANSACTION))
        rec.prepared_offset = 0          # as RocketMQ writes every record of a batch
        recs.append(rec)
    return recs


def prepare_columns(msg, bodies: list, max_message_size: int, store_host_bytes: bytes | None = None,
                    uniq_keys=None, block=None, sizes: list | None = None, prop_crc: bool = False):
    """`core.record.codec.prepare_batch` as a PreparedBatch (or the PutMessageStatus that refuses the
    batch); None when the batch does not fit the columns (fewer than two records, or keys of
    different lengths), and prepare_batch must do it. `block`, when given, is `bodies` back to
    back in one buffer (the put_batch frame), and the bodies are slices of it: their types
    need no check, and `sizes` (given with it) are their lengths. `uniq_keys` is a list of
    strings or a `core.record.key_block.KeyBlock`.

    A batch whose shape (`_shape_key`) was seen before is only checked for what is its own:
    the bodies' types and sizes, the keys, the born timestamp."""
    n = len(bodies)
    if n < 2:
        return None
    keyed = uniq_keys is not None
    if keyed and (len(uniq_keys) != n if uniq_keys.__class__ is not KeyBlock
                  else uniq_keys.count != n or block_problem(*uniq_keys) or uniq_keys.has_separators()) \
            or keyed and PROPERTY_UNIQ_KEY in (msg.properties or {}):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.keys_problem(msg, uniq_keys, n))
    if block is not None:                               # slices of one frame: bytes-like
        if sizes is None:
            sizes = list(map(len, bodies))
    else:
        sizes = (list(map(len, bodies)) if list(map(type, bodies)).count(bytes) == n
                 or all(map(is_body, bodies)) else None)
    joined = None
    if uniq_keys.__class__ is KeyBlock:                 # checked above: ASCII, one width
        joined = uniq_keys.data
    elif keyed:
        if list(map(type, uniq_keys)).count(str) != n:
            return _columns(msg, bodies, max_message_size, store_host_bytes, uniq_keys, block, prop_crc)
        joined = "".join(uniq_keys)
        if not joined.isascii() or list(map(len, uniq_keys)).count(len(uniq_keys[0])) != n:
            return _columns(msg, bodies, max_message_size, store_host_bytes, uniq_keys, block, prop_crc)
        if "\x01" in joined or "\x02" in joined:       # refused; _columns says with which status
            return _columns(msg, bodies, max_message_size, store_host_bytes, uniq_keys, block, prop_crc)
        joined = joined.encode("ascii")
    born = msg.born_timestamp
    if sizes is None or sizes.count(sizes[0]) != n or born.__class__ is not int \
            or not -(1 << 63) <= born < 1 << 63:
        return _columns(msg, bodies, max_message_size, store_host_bytes, key_list(uniq_keys), block, prop_crc)
    try:
        key = _shape_key(msg, n, sizes[0], len(joined) // n if keyed else None, max_message_size,
                         store_host_bytes, prop_crc)
        shape = _SHAPES.get(key)
    except TypeError:                                   # an unhashable field: no cache
        return _columns(msg, bodies, max_message_size, store_host_bytes, key_list(uniq_keys), block, prop_crc)
    if shape is None:
        batch = _columns(msg, bodies, max_message_size, store_host_bytes, key_list(uniq_keys), block, prop_crc)
        if batch.__class__ is PreparedBatch and batch._block is not None and n <= SHAPE_MAX_RECORDS:
            if len(_SHAPES) >= SHAPES_KEPT:
                try:
                    del _SHAPES[next(iter(_SHAPES))]       # the oldest shape goes
                except (KeyError, RuntimeError):           # another putting thread took one
                    pass
            _SHAPES[key] = batch._shape
        return batch
    crcs = crc32_many(bodies) & 0x7FFFFFFF
    return PreparedBatch(shape, crcs, born, joined, bodies, b"".join(bodies) if block is None else block)


def _shape_key(msg, n: int, body_size: int, key_len: int | None, max_message_size: int,
               store_host_bytes, prop_crc: bool) -> tuple:
    """Every input of `_columns` that two batches alike but for bodies (of one size), keys (of
    one length) and born timestamp share; TypeError when one is unhashable. The types are part
    of it: 1, 1.0 and True are equal keys, but not all of them are legal field values."""
    props = msg.properties
    ints = (msg.queue_id, msg.flag, msg.sys_flag, msg.reconsume_times, msg.prepared_transaction_offset)
    return (msg.topic, ints, tuple(map(type, ints)), msg.tags, msg.keys, msg.born_host,
            None if store_host_bytes else msg.store_host,
            (tuple(props.items()), tuple(map(type, props.values()))) if props else None, n, body_size,
            key_len, max_message_size, store_host_bytes, prop_crc)


def _columns(msg, bodies: list, max_message_size: int, store_host_bytes: bytes | None,
             uniq_keys: list | None, block, prop_crc: bool):
    """`prepare_columns` without the shape cache."""
    n = len(bodies)
    keyed = uniq_keys is not None
    first = prepare_batch(copy.copy(msg), bodies[:1], max_message_size, store_host_bytes,
                          uniq_keys[:1] if keyed else None, prop_crc)   # a copy: it sets body, UNIQ_KEY
    if first.__class__ is PutMessageStatus:
        return first
    first = first[0]
    if keyed:
        if set(map(type, uniq_keys)) != {str}:
            return None                              # prepare_batch says which is wrong
        joined = "".join(uniq_keys)
        key_len = len(uniq_keys[0])
        if not joined.isascii() or len(set(map(len, uniq_keys))) != 1:
            return None                              # tails of different widths
        if "\x01" in joined or "\x02" in joined:
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.key_separator(uniq_keys))
    if not all(map(is_body, bodies)):
        return None                                  # prepare_batch refuses it
    sizes = list(map(len, bodies))
    fixed = first.size - sizes[0]
    if max(sizes) > min(max_message_size, max_message_size + TOTAL_SIZE_SLACK - fixed):
        i = sizes.index(max(sizes))
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(i, why.body_problem(
            bodies[i], max_message_size, fixed)))
    tails = np.empty((n, len(first.tail)), _U8)
    tails[:] = np.frombuffer(first.tail, _U8)
    key_at = _key_position(first.tail, uniq_keys[0].encode("ascii")) if keyed else 0
    uniform = len(set(sizes)) == 1
    if uniform and block is None:
        block = b"".join(bodies)
    shape = _Shape(first, tuple(s + fixed for s in sizes), _header_rows(first, n, sizes), tails, key_at)
    return PreparedBatch(shape, crc32_many(bodies) & 0x7FFFFFFF,
                         first.born_timestamp, joined.encode("ascii") if keyed and key_len else None,
                         bodies, block if uniform else None)


def _header_rows(first: PreparedRecord, n: int, sizes: list) -> np.ndarray:
    """The n headers with every field but the ones each batch sets (CRC, positions, store
    timestamp): the first record's header repeated, then the size of each."""
    template = bytearray(first.header.size)
    write_header(template, 0, first, 0, 0, 0)           # its CRC is set per batch (`_set`)
    rows = np.frombuffer(bytearray(template * n), DTYPES[len(first.born_host), len(first.store_host)])
    sizes_a = np.array(sizes, np.int32)
    rows["total"] = sizes_a + (first.size - sizes[0])
    rows["body_len"] = sizes_a
    return rows


def _key_position(tail: bytes, key: bytes) -> int:
    """Where the UNIQ_KEY value starts in a v1 tail (TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES)."""
    props_at = 1 + tail[0] + 2
    return uniq_key_at(tail[props_at:], key) + props_at
