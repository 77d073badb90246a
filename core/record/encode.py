"""One message encoded as its whole CommitLog record: `encode_record`, the one entry for a single
put, of the appender service (`services/appender/service.py`) and of the embedded store
(`CommitLog.append_message`).

`encode_record` gives the record's bytes (DESIGN.md section 3) with QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP left zero: the appender copies the bytes into the segment
and patches those three fields in place (`CommitLog.append_encoded`), so the work done under
the append lock is one copy and two small packs.

The common message (a bytes-like body, a topic seen before, properties joined by
`core.record.props.properties_string`, a known born host) is encoded in one pass here. Anything else, and anything
the store might refuse, goes through `core.record.codec.prepare_record`, whose checks and statuses
are the reference; this module never refuses a message by itself. Tests hold the two paths
to byte equality. With `prop_crc` the record ends in the CRC reserve (`core.record.crc_property`),
digits zero: the append seals it once the position fields are set.
"""
from __future__ import annotations

import struct

from core.record.codec import (
    HEADERS, _HOSTS, _I16, _TOPICS, MAGIC_V1, MAX_PROPERTIES_BYTES, TOTAL_SIZE_SLACK, is_body,
    prepare_record, with_reserve, write_record,
)
from core.record.crc import crc32
from core.record.props import properties_string
from core.record.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6
from core.status import PutMessageStatus

_HOST_BITS = ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)


def encode_record(msg, max_message_size: int, store_host_bytes: bytes, prop_crc: bool = False):
    """(record bytes, topic, queue id, sys flag) of `msg`, its position fields zero; or the
    PutMessageStatus refusing it (decided by `prepare_record`).

    The common message is encoded inline; any other, and any the store might refuse, takes
    `_general`. An odd field type raises TypeError or the like here: `_general` too."""
    try:
        body = msg.body
        topic = msg.topic
        head = _TOPICS.get(topic)                  # TOPICLENGTH TOPIC of a legal topic seen before
        queue_id = msg.queue_id
        if (body.__class__ is not bytes and not is_body(body)) or not head \
                or queue_id.__class__ is not int or not 0 <= queue_id < 0x80000000 \
                or len(body) > max_message_size:
            return _general(msg, max_message_size, store_host_bytes, prop_crc)
        s, n, tags, _ = properties_string(msg)
        if tags and tags.__class__ is not str:                # prepare_record refuses its tag code
            return _general(msg, max_message_size, store_host_bytes, prop_crc)
        props_b = s.encode("utf-8")
        if prop_crc:
            props_b = with_reserve(props_b)
        born = _HOSTS.get(msg.born_host)
        sys_flag = msg.sys_flag
        if len(props_b) > MAX_PROPERTIES_BYTES or n + n != s.count("\x01") + s.count("\x02") \
                or born is None or sys_flag.__class__ is not int:
            return _general(msg, max_message_size, store_host_bytes, prop_crc)
        born, born_v6 = born
        store_v6 = len(store_host_bytes) == 20
        sys_flag = sys_flag & _HOST_BITS | (SYSFLAG_BORNHOST_V6 if born_v6 else 0) \
            | (SYSFLAG_STOREHOST_V6 if store_v6 else 0)
        body_len = len(body)
        size = 90 + len(head) + body_len + len(props_b) + (12 if born_v6 else 0) + (12 if store_v6 else 0)
        if size > max_message_size + TOTAL_SIZE_SLACK:
            return _general(msg, max_message_size, store_host_bytes, prop_crc)
        header = HEADERS[len(born), len(store_host_bytes)].pack(   # struct.error: out of range
            size, MAGIC_V1, crc32(body) & 0x7FFFFFFF, queue_id, msg.flag, 0, 0, sys_flag,
            msg.born_timestamp, born, 0, store_host_bytes, msg.reconsume_times,
            msg.prepared_transaction_offset, body_len)
        return (b"".join((header, body, head, _I16.pack(len(props_b)), props_b)), topic, queue_id,
                sys_flag)
    except (TypeError, ValueError, AttributeError, LookupError, struct.error):
        return _general(msg, max_message_size, store_host_bytes, prop_crc)


def _general(msg, max_message_size: int, store_host_bytes: bytes, prop_crc: bool):
    """`encode_record` by way of `prepare_record`, for any message."""
    return encode_prepared(prepare_record(msg, max_message_size, store_host_bytes, prop_crc))


def encode_prepared(rec):
    """A PreparedRecord as `encode_record` gives it (a PutMessageStatus passes through)."""
    if rec.__class__ is PutMessageStatus:
        return rec
    data = bytearray(rec.size)
    write_record(data, 0, rec, 0, 0, 0, sealed=False)      # sealed once appended
    return bytes(data), rec.topic, rec.queue_id, rec.sys_flag
