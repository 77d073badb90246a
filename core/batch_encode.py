"""A batch's records encoded as columns: one set of numpy operations for the whole batch.

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

It applies when the UNIQ_KEYs (if any) all have the same UTF-8 length, which the keys a
producer makes always do; `prepare_columns` returns None otherwise, and the caller takes
`core.codec.prepare_batch`, which gives the same bytes record by record. The tests hold
the two to byte equality.
"""
from __future__ import annotations

import copy
import zlib
from itertools import accumulate, chain

import numpy as np

from core.codec import (
    MAGIC_V1, TOTAL_SIZE_SLACK, PreparedRecord, prepare_batch,
)
from core.message import PROPERTY_UNIQ_KEY
from core.status import PutMessageStatus

_U8 = np.uint8
_BODY_TYPES = {bytes, bytearray, memoryview}
_UNIQ_LABEL = b"\x02" + PROPERTY_UNIQ_KEY.encode() + b"\x01"


def _header_dtype(born_len: int, store_len: int) -> np.dtype:
    """The record header (codec._header_struct) as a packed big-endian numpy record."""
    return np.dtype([
        ("size", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"), ("flag", ">i4"),
        ("queue_offset", ">i8"), ("phys_offset", ">i8"), ("sys_flag", ">i4"), ("born_ts", ">i8"),
        ("born_host", f"V{born_len}"), ("store_ts", ">i8"), ("store_host", f"V{store_len}"),
        ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4")])


_DTYPES = {(b, s): _header_dtype(b, s) for b in (8, 20) for s in (8, 20)}


class PreparedBatch:
    """A validated batch ready to write; `first` is the first record as prepare_record makes it
    (its topic, queue and flags stand for the batch)."""

    __slots__ = ("first", "record_sizes", "total", "_rows", "_bodies", "_block", "_tails")

    def __init__(self, first: PreparedRecord, record_sizes: tuple, rows: np.ndarray, bodies: list,
                 block, tails: np.ndarray):
        self.first = first
        self.record_sizes = record_sizes
        self.total = sum(record_sizes)
        self._rows = rows          # the headers, position fields still to fill
        self._bodies = bodies
        self._block = block        # the bodies back to back, when they are all one size
        self._tails = tails        # (n, tail length) bytes

    def __len__(self) -> int:
        return len(self.record_sizes)

    def write(self, buf, pos: int, queue_offset: int | None, phys_offset: int,
              store_timestamp: int) -> int:
        """Write the records at `pos` of `buf`, the first at `phys_offset` with `queue_offset`
        (None: 0 for all, a transaction's prepared or rollback record); return the end."""
        rows, n, total = self._rows, len(self.record_sizes), self.total
        rows["queue_offset"] = 0 if queue_offset is None else \
            np.arange(queue_offset, queue_offset + n, dtype=np.int64)
        starts = np.fromiter(accumulate(self.record_sizes[:-1], initial=phys_offset), np.int64, n)
        rows["phys_offset"] = starts
        rows["store_ts"] = store_timestamp
        heads = rows.view(_U8).reshape(n, -1)
        out = grid = None
        try:
            out = np.frombuffer(buf, _U8, total, pos)   # an export of buf: dropped below
            if self._block is not None:
                size, h = self.record_sizes[0], heads.shape[1]
                grid = out.reshape(n, size)
                grid[:, :h] = heads
                body_end = size - self._tails.shape[1]
                grid[:, h:body_end] = np.frombuffer(self._block, _U8).reshape(n, body_end - h)
                grid[:, body_end:] = self._tails
            else:
                head_b, tail_b = heads.tobytes(), self._tails.tobytes()
                h, t = heads.shape[1], self._tails.shape[1]
                out[:] = np.frombuffer(b"".join(chain.from_iterable(zip(
                    [head_b[i:i + h] for i in range(0, n * h, h)], self._bodies,
                    [tail_b[i:i + t] for i in range(0, n * t, t)]))), _U8)
        finally:
            del out, grid                                 # so that buf can be closed
        return pos + total


def prepare_batch_records(msg, bodies: list, max_message_size: int,
                          store_host_bytes: bytes | None = None, uniq_keys: list | None = None,
                          block=None):
    """A batch alike but for body and UNIQ_KEY, prepared as columns where it fits them and
    record by record (`core.codec.prepare_batch`) otherwise; or the PutMessageStatus."""
    recs = prepare_columns(msg, bodies, max_message_size, store_host_bytes, uniq_keys, block)
    if recs is None:
        recs = prepare_batch(msg, bodies, max_message_size, store_host_bytes, uniq_keys)
    return recs


def prepare_columns(msg, bodies: list, max_message_size: int, store_host_bytes: bytes | None = None,
                    uniq_keys: list | None = None, block=None):
    """`core.codec.prepare_batch` as a PreparedBatch (or the PutMessageStatus that refuses the
    batch); None when the batch does not fit the columns (fewer than two records, or keys of
    different lengths), and prepare_batch must do it. `block`, when given, is `bodies` back to
    back in one buffer (the put_batch frame)."""
    n = len(bodies)
    if n < 2:
        return None
    keyed = uniq_keys is not None
    if keyed and (len(uniq_keys) != n or PROPERTY_UNIQ_KEY in (msg.properties or {})):
        return PutMessageStatus.MESSAGE_ILLEGAL
    first = prepare_batch(copy.copy(msg), bodies[:1], max_message_size, store_host_bytes,
                          uniq_keys[:1] if keyed else None)     # a copy: it sets body and UNIQ_KEY
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
            return PutMessageStatus.MESSAGE_ILLEGAL
    if set(map(type, bodies)) - _BODY_TYPES:
        return None
    sizes = list(map(len, bodies))
    fixed = first.size - sizes[0]
    if max(sizes) > min(max_message_size, max_message_size + TOTAL_SIZE_SLACK - fixed):
        return PutMessageStatus.MESSAGE_ILLEGAL
    rows = _header_rows(first, n, sizes, bodies)
    tails = np.empty((n, len(first.tail)), _U8)
    tails[:] = np.frombuffer(first.tail, _U8)
    if keyed and key_len:
        at = _key_position(first.tail, uniq_keys[0].encode("ascii"))
        tails[:, at:at + key_len] = np.frombuffer(joined.encode("ascii"), _U8).reshape(n, key_len)
    uniform = len(set(sizes)) == 1
    if uniform and block is None:
        block = b"".join(bodies)
    return PreparedBatch(first, tuple(s + fixed for s in sizes), rows, bodies,
                         block if uniform else None, tails)


def _header_rows(first: PreparedRecord, n: int, sizes: list, bodies: list) -> np.ndarray:
    """The n headers with every field but the three set at append: the first record's header
    repeated, then the sizes and CRCs of each."""
    template = first.header.pack(first.size, MAGIC_V1, first.crc, first.queue_id, first.flag, 0, 0,
                                 first.sys_flag, first.born_timestamp, first.born_host, 0,
                                 first.store_host, first.reconsume_times, first.prepared_offset,
                                 sizes[0])
    rows = np.frombuffer(bytearray(template * n), _DTYPES[len(first.born_host), len(first.store_host)])
    sizes_a = np.array(sizes, np.int32)
    rows["size"] = sizes_a + (first.size - sizes[0])
    rows["crc"] = np.fromiter(map(zlib.crc32, bodies), np.int64, n) & 0x7FFFFFFF
    rows["body_len"] = sizes_a
    return rows


def _key_position(tail: bytes, key: bytes) -> int:
    """Where the UNIQ_KEY value starts in a v1 tail (TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES)."""
    props_at = 1 + tail[0] + 2
    probe = b"\x02" + tail[props_at:]
    return probe.index(_UNIQ_LABEL + key + b"\x02") + len(_UNIQ_LABEL) - 1 + props_at
