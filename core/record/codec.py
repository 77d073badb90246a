"""CommitLog record codec, byte for byte as Apache RocketMQ 5.x (DESIGN.md section 3).

`prepare_record` validates a message and builds everything that does not depend on where
it lands; `write_record` then packs it straight into a mapped segment with the queue offset,
physical offset and store timestamp. `check_record` is the recovery/dispatch parser that
tells a valid record from a blank, a torn or a corrupt one. Reading a record back as a
message is `core.record.decode`.

Records carry RocketMQ 5.2's whole-record CRC property when the encoder is asked for it
(`prop_crc`, the store's `enabled_append_prop_crc`); `core.record.crc_property` owns its bytes, and
`parse_record` checks it where a record has it (the body CRC where it has not).

The body CRC covers only the body. So that recovery also notices a record whose tail a
torn write zeroed, the CRC-checked parse refuses a topic containing a NUL (topics never
contain one; puts refuse them) and non-empty properties ending in a NUL (RocketMQ 5.2+ ends
them with the 0x02 separator, older versions with a value's last character).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from core.record.crc import crc32
from core.record.props import (  # noqa: F401  (the builder under its old names, for callers)
    properties_string, properties_string as _properties_string,
    properties_string_general as _properties_string_general,
)
from core.record.stop import Stop
from core.record.layout import (  # noqa: F401  (the format's constants, as callers import them)
    BLANK_SIZE, BORN_HOST_POS, FIELDS, FRAME as _BLANK, HEADERS, I16 as _I16, I32 as _I32, I64 as _I64,
    MAGIC_BLANK, MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE, PHYS_OFFSET_POS, QUEUE_OFFSET_POS, SYSFLAG_POS,
    host_lengths, record_size, store_timestamp_position,
)
from core.record.hashing import tags_code
from core.record.crc_property import CRC32_RESERVED_LEN, LABEL, RESERVE, seal, strip, verify
from core.record.message import (
    PROPERTY_DELAY, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY,
    SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6, host_to_bytes, string_to_properties,
)
from core.record import refusal as why
from core.status import PutMessageStatus, refuse, take_reason

MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767
TOTAL_SIZE_SLACK = 64 * 1024   # TOTALSIZE may exceed max_message_size by this much
# RocketMQ's delay topic: a record of it with a DELAY level gets its delivery time (store
# timestamp + the level's delay in the store's message_delay_level, a level above the last taken
# as the last) as consume-queue tag code (reference 2.13); DELAY_LEVEL_MS is RocketMQ's default
# messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DELAY_LEVEL_MS = (1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000,
                  420000, 480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000)
# FLAG SYSFLAG RECONSUMETIMES BORNTIMESTAMP PREPARED: packed only to check that each fits its field
_INT_FIELDS = struct.Struct(">" + "".join(dict(FIELDS)[n] for n in ("flag", "sys_flag", "reconsume", "born_ts",
                                                                    "prepared")))


@dataclass(slots=True)
class PreparedRecord:
    """A validated message, encoded except for its position-dependent fields."""
    size: int
    header: struct.Struct
    crc: int
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes
    reconsume_times: int
    prepared_offset: int
    body: bytes
    tail: bytes          # TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES
    topic: str
    tags_code: int
    keys: str
    uniq_key: str


_HOSTS: dict = {}
_TOPICS: dict = {}


def _host_bytes(host) -> tuple[bytes, bool]:
    """host_to_bytes with a cache: producers reuse a handful of hosts."""
    try:
        hit = _HOSTS.get(host)
    except TypeError:                                  # an unhashable host (a list): no cache
        return host_to_bytes(host)
    if hit is None:
        hit = host_to_bytes(host)
        if len(_HOSTS) < 4096:
            _HOSTS[host] = hit
    return hit


def _topic_head(topic: str) -> bytes:
    """TOPICLENGTH + TOPIC, cached per topic; b"" for an illegal topic. Besides RocketMQ's
    length rule a topic must be one directory name (consumequeue/<topic>/): no NUL, no "/",
    not "." or "..", which would put its consume queues elsewhere or outside the store."""
    head = _TOPICS.get(topic)
    if head is None:
        topic_b = topic.encode("utf-8")
        legal = 0 < len(topic_b) <= MAX_TOPIC_BYTES and b"\x00" not in topic_b \
            and b"/" not in topic_b and topic_b not in (b".", b"..")
        head = bytes((len(topic_b),)) + topic_b if legal else b""
        if len(_TOPICS) < 65536:
            _TOPICS[topic] = head
    return head


def is_body(body) -> bool:
    """Whether `body` can be a message body: bytes, a bytearray, or a C-contiguous memoryview
    of single bytes (`len` must count its bytes: a view of wider items would not)."""
    if isinstance(body, (bytes, bytearray)):
        return True
    return isinstance(body, memoryview) and body.itemsize == 1 and body.c_contiguous


def prepare_record(msg, max_message_size: int, store_host_bytes: bytes | None = None,
                   prop_crc: bool = False):
    """Validate `msg` and encode it; return a PreparedRecord or the PutMessageStatus that refuses it.
    With `prop_crc` the properties end in the CRC reserve (`core.record.crc_property`), which counts
    towards the 32767-byte limit as in RocketMQ; `write_record` fills it in."""
    body = msg.body
    topic = msg.topic
    if not is_body(body) or not isinstance(topic, str):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.head_problem(msg, b"", 0, MAX_TOPIC_BYTES))
    head = _topic_head(topic)
    body_len = len(body)
    queue_id = msg.queue_id
    if not head or body_len > max_message_size or queue_id.__class__ is not int \
            or not 0 <= queue_id < (1 << 31):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL,
                      why.head_problem(msg, head, max_message_size, MAX_TOPIC_BYTES))
    try:
        props_s, pairs, tags, keys = properties_string(msg)
        tag_hash = tags_code(tags)
    except (TypeError, AttributeError):                  # e.g. TAGS that is not a str
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.NOT_TEXT)
    props_b = props_s.encode("utf-8")
    if prop_crc:
        props_b = with_reserve(props_b)
    if len(props_b) > MAX_PROPERTIES_BYTES:
        return refuse(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                      why.properties_too_large(len(props_b), MAX_PROPERTIES_BYTES))
    if pairs * 2 != props_s.count("\x01") + props_s.count("\x02"):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.separator_problem(msg))
    try:
        _INT_FIELDS.pack(msg.flag, msg.sys_flag, msg.reconsume_times, msg.born_timestamp,
                         msg.prepared_transaction_offset)    # each must fit its Java field
        born, born_v6 = _host_bytes(msg.born_host)
        store, store_v6 = (store_host_bytes, len(store_host_bytes) == 20) if store_host_bytes \
            else _host_bytes(msg.store_host)
    except (ValueError, TypeError, IndexError, struct.error):
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.FALLBACK)
    sys_flag = msg.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    if born_v6:
        sys_flag |= SYSFLAG_BORNHOST_V6
    if store_v6:
        sys_flag |= SYSFLAG_STOREHOST_V6
    size = 90 + len(head) + body_len + len(props_b) + (12 if born_v6 else 0) + (12 if store_v6 else 0)
    if size > max_message_size + TOTAL_SIZE_SLACK:
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.record_too_large(size, max_message_size))
    return PreparedRecord(
        size, HEADERS[len(born), len(store)], crc32(body) & 0x7FFFFFFF, msg.queue_id,
        msg.flag, sys_flag, msg.born_timestamp, born, store, msg.reconsume_times,
        msg.prepared_transaction_offset, body, head + _I16.pack(len(props_b)) + props_b, topic,
        tag_hash, keys, (msg.properties or {}).get(PROPERTY_UNIQ_KEY) or "")


def with_reserve(props_b: bytes) -> bytes:
    """PROPERTIES followed by the CRC reserve: a 0x02 first when they are not empty and do not
    end in one (RocketMQ's rule; ours always do)."""
    if props_b and props_b[-1] != 2:
        props_b += b"\x02"
    return props_b + RESERVE


def prepare_batch(msg, bodies: list, max_message_size: int, store_host_bytes: bytes | None = None,
                  uniq_keys: list | None = None, prop_crc: bool = False):
    """`prepare_record` for records that share every field of `msg` but the body (a batch sent
    without per-message fields) and, with `uniq_keys`, the UNIQ_KEY property (record i gets
    uniq_keys[i]; `msg.properties` must not hold one). The first record is prepared in full;
    the others differ from it only in body, CRC, size and the UNIQ_KEY bytes of the tail.
    Every record's PREPARED TRANSACTION OFFSET is 0, as RocketMQ writes a batch's (the message's
    is checked, not kept). Returns the list, or the PutMessageStatus that refuses one of them.
    Sets `msg.body` to the first body (and `msg.properties` to include the first UNIQ_KEY)."""
    msg.body = bodies[0]
    if uniq_keys is not None:
        if len(uniq_keys) != len(bodies) or PROPERTY_UNIQ_KEY in (msg.properties or {}):
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.keys_problem(msg, uniq_keys, len(bodies)))
        msg.properties = {**(msg.properties or {}), PROPERTY_UNIQ_KEY: uniq_keys[0]}
    first = prepare_record(msg, max_message_size, store_host_bytes, prop_crc)
    if first.__class__ is PutMessageStatus:
        return refuse(first, why.in_batch(0, take_reason()))
    first.prepared_offset = 0        # RocketMQ writes 0 into every record of a batch (2.11)
    out = [first]
    if uniq_keys is not None:
        return _prepare_keyed(first, bodies, uniq_keys, max_message_size, out)
    fixed = first.size - len(first.body)
    limit = min(max_message_size, max_message_size + TOTAL_SIZE_SLACK - fixed)
    f = first
    for i, body in enumerate(bodies[1:], 1):
        n = len(body)
        if n > limit or not is_body(body):
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(i, why.body_problem(
                body, max_message_size, fixed)))
        out.append(PreparedRecord(
            fixed + n, f.header, crc32(body) & 0x7FFFFFFF, f.queue_id, f.flag, f.sys_flag,
            f.born_timestamp, f.born_host, f.store_host, f.reconsume_times, f.prepared_offset, body,
            f.tail, f.topic, f.tags_code, f.keys, f.uniq_key))
    return out


_UNIQ_LABEL = b"\x02" + PROPERTY_UNIQ_KEY.encode() + b"\x01"


def uniq_key_at(props: bytes, key: bytes) -> int:
    """Where the UNIQ_KEY value `key` starts in a PROPERTIES string."""
    return (b"\x02" + props).index(_UNIQ_LABEL + key + b"\x02") + len(_UNIQ_LABEL) - 1


def _prepare_keyed(f: PreparedRecord, bodies: list, uniq_keys: list, max_message_size: int,
                   out: list):
    """The rest of `prepare_batch` with a UNIQ_KEY per record: the first record's tail is cut
    around its UNIQ_KEY value, and each record's tail is the two pieces around its own key."""
    topic_head = f.tail[:1 + f.tail[0]]                     # TOPICLENGTH TOPIC
    props = f.tail[len(topic_head) + 2:]
    at = uniq_key_at(props, f.uniq_key.encode("utf-8"))
    before, after = props[:at], props[at + len(f.uniq_key.encode("utf-8")):]
    fixed = f.size - len(f.body) - len(props)
    room = max_message_size + TOTAL_SIZE_SLACK - fixed
    pack_len = _I16.pack
    for i, (body, key) in enumerate(zip(bodies[1:], uniq_keys[1:]), 1):
        n = len(body)
        if n > max_message_size or not is_body(body) \
                or key.__class__ is not str:
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(i, why.body_problem(
                body, max_message_size, 0) if key.__class__ is str else why.NOT_KEY))
        key_b = key.encode("utf-8")
        props_len = len(before) + len(key_b) + len(after)
        if props_len > MAX_PROPERTIES_BYTES:
            return refuse(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                          why.in_batch(i, why.properties_too_large(props_len, MAX_PROPERTIES_BYTES)))
        if "\x01" in key or "\x02" in key or n + props_len > room:
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, why.in_batch(i, why.separator_in("the UNIQ_KEY")
                          if "\x01" in key or "\x02" in key else why.record_too_large(
                              fixed + props_len + n, max_message_size)))
        out.append(PreparedRecord(
            fixed + props_len + n, f.header, crc32(body) & 0x7FFFFFFF, f.queue_id, f.flag,
            f.sys_flag, f.born_timestamp, f.born_host, f.store_host, f.reconsume_times,
            f.prepared_offset, body, b"".join((topic_head, pack_len(props_len), before, key_b, after)),
            f.topic, f.tags_code, f.keys, key))
    return out


def write_header(buf, pos: int, rec: PreparedRecord, queue_offset: int, phys_offset: int,
                 store_timestamp: int) -> int:
    """Pack the fixed header of `rec` into `buf` at `pos`; return where its body goes."""
    header = rec.header
    header.pack_into(buf, pos, rec.size, MAGIC_V1, rec.crc, rec.queue_id, rec.flag, queue_offset,
                     phys_offset, rec.sys_flag, rec.born_timestamp, rec.born_host, store_timestamp,
                     rec.store_host, rec.reconsume_times, rec.prepared_offset, len(rec.body))
    return pos + header.size


def write_record(buf, pos: int, rec: PreparedRecord, queue_offset: int, phys_offset: int,
                 store_timestamp: int, sealed: bool = True) -> int:
    """Pack `rec` into `buf` at `pos` (sealing its CRC property, if it has the reserve, unless
    not `sealed`: bytes whose position fields are set later); return the position after it."""
    body = rec.body
    p = write_header(buf, pos, rec, queue_offset, phys_offset, store_timestamp)
    end = p + len(body)
    buf[p:end] = body
    tail_end = end + len(rec.tail)
    buf[end:tail_end] = rec.tail
    if sealed and rec.tail[-CRC32_RESERVED_LEN:-11] == LABEL:
        seal(buf, pos, rec.size)
    return tail_end


class PreparedRecords(list):
    """A batch prepared record by record (`prepare_batch`, `prepare_each`): a list of
    PreparedRecords that writes itself as `core.record.batch_encode.PreparedBatch` does, so
    that the CommitLog appends either alike."""
    __slots__ = ()

    @property
    def first(self) -> PreparedRecord:
        return self[0]

    @property
    def total(self) -> int:
        return sum(r.size for r in self)

    def write(self, buf, pos: int, queue_offset: int | None, phys_offset: int,
              store_timestamp: int) -> int:
        """Write the records at `pos` of `buf`, the first at `phys_offset` with `queue_offset`
        (None: 0 for all, a transaction's prepared or rollback record); return the end."""
        at = phys_offset - pos
        for i, rec in enumerate(self):
            pos = write_record(buf, pos, rec, 0 if queue_offset is None else queue_offset + i,
                               at + pos, store_timestamp)
        return pos

    @property
    def record_sizes(self) -> tuple:
        return tuple(r.size for r in self)


def write_blank(buf, pos: int, length: int) -> None:
    """The end-of-file filler: TOTALSIZE = bytes left, MAGIC = blank."""
    _BLANK.pack_into(buf, pos, length, MAGIC_BLANK)


def encode_message(msg, queue_offset=0, phys_offset=0, store_timestamp=0, max_message_size=1 << 62,
                   prop_crc: bool = False):
    """One record as bytes (tests, tools), with the CRC property when `prop_crc`. Raises
    ValueError for a message the store would refuse."""
    rec = prepare_record(msg, max_message_size, prop_crc=prop_crc)
    if isinstance(rec, PutMessageStatus):
        raise ValueError(f"message refused: {rec.name}")
    buf = bytearray(rec.size)
    write_record(buf, 0, rec, queue_offset, phys_offset, store_timestamp)
    return bytes(buf)


def _read_topic(buf, p: int, magic: int) -> tuple[str, int]:
    """TOPICLENGTH (1 byte in v1, 2 in v2) and TOPIC at `p`; (topic, position after it)."""
    if magic == MAGIC_V1:
        n, p = buf[p], p + 1
    else:
        n, p = _I16.unpack_from(buf, p)[0], p + 2
    return bytes(buf[p:p + n]).decode("utf-8"), p + n


@dataclass(slots=True)
class DispatchRequest:
    """What the dispatcher needs of one record to build the consume queue and the index."""
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str
    sys_flag: int
    prepared_transaction_offset: int


RecordCheck = Stop         # check_record's outcomes: Stop.BLANK, END or CORRUPT


def parse_record(buf, pos: int, limit: int, check_crc) -> tuple:
    """The record at `pos` (not reading past `limit`), read once with every check of
    `check_record`: (None, TOTALSIZE, header, body position, topic, properties) for a valid
    record, `header` the fields as `core.record.layout.HEADERS` unpacks them, `properties` without the CRC
    property; otherwise (Stop.BLANK, END or CORRUPT, the size `check_record` gives,
    None, 0, None, None). `check_crc` is a check mode of `core.record.crc_property` (False, True,
    FORCED)."""
    if limit - pos < 8:
        return Stop.END, 0, None, 0, None, None
    total, magic = _BLANK.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        if 8 <= total <= limit - pos:
            return Stop.BLANK, total, None, 0, None, None
        return Stop.END, 0, None, 0, None, None
    if magic not in (MAGIC_V1, MAGIC_V2) or total < MIN_RECORD_SIZE or total > limit - pos:
        return Stop.END, 0, None, 0, None, None
    try:
        header = HEADERS[host_lengths(_I32.unpack_from(buf, pos + SYSFLAG_POS)[0])]
        h = header.unpack_from(buf, pos)
        body_at = pos + header.size
        body_len = h[14]
        if body_len < 0 or body_at + body_len > pos + total:
            return Stop.CORRUPT, total, None, 0, None, None
        topic, p = _read_topic(buf, body_at + body_len, magic)
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len - pos != total:
            return Stop.CORRUPT, total, None, 0, None, None
        if check_crc and ("\x00" in topic or (props_len and buf[p + props_len - 1] == 0)
                          or not verify(buf, pos, total, check_crc,
                                        lambda: crc32(buf[body_at:body_at + body_len]) & 0x7FFFFFFF == h[2])):
            return Stop.CORRUPT, total, None, 0, None, None   # torn zeros: module doc
        props = string_to_properties(strip(bytes(buf[p:p + props_len])).decode("utf-8")) \
            if props_len else {}
    except (struct.error, UnicodeDecodeError, IndexError, KeyError):
        return Stop.CORRUPT, total, None, 0, None, None
    return None, total, h, body_at, topic, props


def check_record(buf, pos: int, limit: int, check_crc, delay_levels: tuple = DELAY_LEVEL_MS):
    """Parse the record at `pos` (not reading past `limit`).

    Returns (DispatchRequest, size) for a valid record, (Stop.BLANK, size) for a blank,
    (Stop.END, 0) where no record starts, and (Stop.CORRUPT, size) for a framed
    record that fails its checks. A delay record's tag code comes from `delay_levels` (the
    store's `message_delay_level` in ms).
    """
    outcome, total, h, _, topic, props = parse_record(buf, pos, limit, check_crc)
    if outcome is not None:
        return outcome, total
    store_ts = h[10]
    tag_code = tags_code(props.get(PROPERTY_TAGS))
    if topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
        tag_code = _delivery_time(props[PROPERTY_DELAY], store_ts, tag_code, delay_levels)
    return DispatchRequest(
        topic, h[3], h[6], total, tag_code, store_ts, h[5],
        props.get(PROPERTY_KEYS, ""), props.get(PROPERTY_UNIQ_KEY, ""), h[7], h[13]), total


def _delivery_time(level: str, store_timestamp: int, tag_code: int, levels: tuple) -> int:
    """The tag code of a SCHEDULE_TOPIC record with DELAY `level`: its delivery time; `tag_code`
    for a level that is not above 0 (or not a number)."""
    try:
        n = min(int(level), len(levels))
    except ValueError:
        return tag_code
    return store_timestamp + levels[n - 1] if n > 0 else tag_code


_DELAY_LABEL = b"\x02" + PROPERTY_DELAY.encode() + b"\x01"


def schedule_tag_code(props_raw: bytes, store_timestamp: int, tag_code: int,
                      levels: tuple = DELAY_LEVEL_MS) -> int:
    """The tag code of a SCHEDULE_TOPIC record from its PROPERTIES bytes (UTF-8) and store
    time: its delivery time by `levels` when it has a DELAY level, else `tag_code` (its TAGS hash)."""
    w, at = b"\x02" + props_raw, -1
    while (at := w.rfind(_DELAY_LABEL, 0, at if at >= 0 else len(w))) >= 0:   # the last one set
        end = w.find(b"\x02", at + len(_DELAY_LABEL))
        level = w[at + len(_DELAY_LABEL):end if end >= 0 else len(w)]
        if level:
            return _delivery_time(level, store_timestamp, tag_code, levels)
    return tag_code


def read_i32(buf, pos: int) -> int:
    return _I32.unpack_from(buf, pos)[0]


def read_i64(buf, pos: int) -> int:
    return _I64.unpack_from(buf, pos)[0]
