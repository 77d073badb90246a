"""The record a delayed message is delivered as, built from its stored record's bytes
(RocketMQ's messageTimeup, without decoding the message): `readdress` and `EncodedRun`.

A delay record (in the schedule topic, `codec.SCHEDULE_TOPIC`, or the timer topic) holds its
message whole; its delivery differs from it only in TOPIC (REAL_TOPIC), QUEUEID (REAL_QID),
PROPERTIES (DELAY, for a timer also TIMER_DELIVER_MS/TIMER_DELAY_SEC/TIMER_DELAY_MS, and the
stored record's own CRC property left out; every other property kept as stored, UNIQ_KEY and
REAL_TOPIC/REAL_QID too), the store host (the store's own) and the fields the append sets.
`readdress` therefore copies the body and the header fields as they are (the body CRC too: the
body is the same bytes) and writes a new header, topic and properties: a handful of byte
searches per record, no property map built and none serialised, no body CRC computed.

`EncodedRun` is a run of such records for one topic and queue, written into a segment as
`core.record.batch_encode.PreparedBatch` is (the CommitLog's `append_batch`, through
`MessageStore.put_encoded`): one copy of the run, then QUEUEOFFSET, PHYSICALOFFSET and
STORETIMESTAMP per record, and the CRC property sealed where the store writes it. The
records are those `core.record.codec.prepare_record` would make of the decoded delivery
(same fields and checks: tests/unit/test_delay_reput_record.py holds the two to each other);
only the order of the properties is the stored one.

What it costs: a second writer of the record's bytes beside core.record.codec (held to it by
the tests above), and `Readdresser`'s templates (at most 4,096 properties shapes). What it
saved (`.venv/bin/python benchmarks/delay.py --quick`, 20,000 messages, a 2-core machine shared
with other work, two runs each, the same benchmark on the code before): deliveries when a
level is due went from 3,300-11,800 to 13,000-45,000 msg/s (0.08-0.21x to 0.34-0.57x the
plain put rate; 0.23-0.31x to 0.68-1.24x the plain puts of the same span), timer deliveries
from 5,000-9,100 to 13,700-47,000 msg/s; the decode and encode of each message had been
about two thirds of a delivery's time.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from core.record.codec import HEADERS, MAX_PROPERTIES_BYTES, TOTAL_SIZE_SLACK, _topic_head
from core.record.crc_property import CRC32_RESERVED_LEN, LABEL, RESERVE, seal_run
from core.record.layout import (
    BY_FLAGS, F_BODY_LEN, F_BORN_HOST, F_BORN_TS, F_CRC, F_FLAG, F_MAGIC, F_RECONSUME,
    F_STORE_HOST, F_SYS_FLAG, I16, MAGIC_V1, MAGIC_V2, POSITIONS, QUEUE_OFFSET_POS, STORE_TIMESTAMP,
    SYSFLAG_POS, store_timestamp_position,
)
from core.record.message import PROPERTY_DELAY, PROPERTY_UNIQ_KEY, PROPERTY_WAIT, SYSFLAG_STOREHOST_V6

_SEP = b"\x02"
SYSFLAG_LOW = SYSFLAG_POS + 3          # SYSFLAG's low byte (big-endian): the host bits
# The values that differ from record to record of one producer's delayed messages: cut out of
# a `Readdresser`'s key (and put back into each delivery).
_VARYING = (b"\x02" + PROPERTY_UNIQ_KEY.encode() + b"\x01", b"\x02TIMER_OUT_MS\x01")
_MARK = b"\x01"                        # where a cut value was (no value holds 0x01)
_MARKED = b"\x01" + _MARK              # a label's end and the mark: nowhere else in properties
_REAL_TOPIC = b"\x02REAL_TOPIC\x01"
_REAL_QID = b"\x02REAL_QID\x01"
_WAIT = b"\x02" + PROPERTY_WAIT.encode() + b"\x01"
_NO_WAIT = PROPERTY_WAIT.encode() + b"\x01false\x02"
_HEADS: dict = {}              # REAL_TOPIC bytes -> (topic, TOPICLENGTH TOPIC), legal topics only


def drop_list(*names: str) -> tuple:
    """The property names `readdress` leaves out, as it searches for them."""
    return tuple(b"\x02" + n.encode() + b"\x01" for n in names)


LEVEL_DROPS = drop_list(PROPERTY_DELAY)


@dataclass(frozen=True)
class ReputRules:
    """What a delivery's record takes from the store it goes to: the store host (None: keep the
    stored one, for a host whose put path writes its own), whether records carry the CRC
    property, and the body limit."""
    store_host: bytes | None = None
    prop_crc: bool = False
    max_message_size: int = 4 * 1024 * 1024
    no_wait: bool = False          # WAIT false written in (RocketMQ's setWaitStoreMsgOK(false))


class Delivery:
    """One delivery's record (position fields zero, CRC reserve unsealed) and what a put needs
    of it. `body`: the body's bytes (batch_groups measures it)."""
    __slots__ = ("data", "topic", "queue_id", "sys_flag", "born_host", "body_at", "body_len")
    wait_store_msg_ok = False              # a re-put never waits for a flush by itself

    def __init__(self, data: bytes, topic: str, queue_id: int, sys_flag: int, born_host: bytes,
                 body_at: int, body_len: int):
        self.data, self.topic, self.queue_id, self.sys_flag = data, topic, queue_id, sys_flag
        self.born_host, self.body_at, self.body_len = born_host, body_at, body_len

    @property
    def body(self) -> bytes:
        return self.data[self.body_at:self.body_at + self.body_len]


def _real(w: bytes, label: bytes):
    i = w.rfind(label)                      # the last one, as a property map keeps it
    if i < 0:
        return None
    i += len(label)
    return w[i:w.index(_SEP, i)]


def _topic_of(raw_topic: bytes):
    hit = _HEADS.get(raw_topic)
    if hit is None:
        try:
            topic = raw_topic.decode("utf-8")
        except UnicodeDecodeError:
            return None
        head = _topic_head(topic)
        if not head:
            return None
        hit = (topic, head)
        if len(_HEADS) < 65536:
            _HEADS[raw_topic] = hit
    return hit


def parse(buf, pos: int):
    """(header tuple, body start, properties as `_SEP` + pairs each ending in `_SEP`, without
    the CRC property) of the record at `pos` of `buf`; None when its lengths do not add up.
    The header tuple is indexed by core.record.layout's F_* (F_STORE_TS: its store time)."""
    try:
        header = BY_FLAGS[(buf[pos + SYSFLAG_LOW] >> 4) & 3]
        h = header.unpack_from(buf, pos)
        body_at = pos + header.size
        p = body_at + h[F_BODY_LEN]
        magic = h[F_MAGIC]
        if magic == MAGIC_V1:
            p += 1 + buf[p]
        elif magic == MAGIC_V2:
            p += 2 + I16.unpack_from(buf, p)[0]
        else:
            return None
        end = p + 2 + I16.unpack_from(buf, p)[0]
        if h[F_BODY_LEN] < 0 or end - pos != h[0] or end < p + 2:
            return None
    except (struct.error, IndexError):
        return None
    if end - p - 2 >= CRC32_RESERVED_LEN and buf[end - CRC32_RESERVED_LEN:end - 11] == LABEL:
        end -= CRC32_RESERVED_LEN                 # the stored record's own CRC property
    props = buf[p + 2:end]
    if props.__class__ is not bytes:
        props = bytes(props)
    return h, body_at, (_SEP + props if not props or props[-1] == 2 else _SEP + props + _SEP)


def property_of(buf, pos: int, label: bytes) -> bytes | None:
    """The value of one property (`label`: an item of `drop_list`) of the record at `pos`."""
    parsed = parse(buf, pos)
    return None if parsed is None else _real(parsed[2], label)


def _cut(w: bytes) -> tuple:
    """(`w` with the values of `_VARYING` replaced by `_MARK`, those values in their order):
    what is left is alike for the records of one producer and delay (`Readdresser`'s key)."""
    spans = []
    for label in _VARYING:
        i = w.find(label)
        if i >= 0:
            i += len(label)
            spans.append((i, w.index(_SEP, i)))
    if not spans:
        return w, ()
    if len(spans) > 1:
        spans.sort()
    pieces, values, at = [], [], 0
    for i, j in spans:
        pieces.append(w[at:i])
        values.append(w[i:j])
        at = j
    pieces.append(w[at:])
    return _MARK.join(pieces), values


def _template(w: bytes, drops: tuple, rules: ReputRules):
    """What a delivery takes from the properties `w` (as `_cut` leaves them): (topic, TOPICLENGTH
    TOPIC, queue id, the new properties' pieces around the cut values, their length); None when
    they name no legal real topic and queue."""
    raw_topic, raw_qid = _real(w, _REAL_TOPIC), _real(w, _REAL_QID)
    if raw_topic is None or raw_qid is None:
        return None
    named = _HEADS.get(raw_topic) or _topic_of(raw_topic)
    try:
        queue_id = int(raw_qid)
    except ValueError:
        return None
    if named is None or not 0 <= queue_id < (1 << 31):
        return None
    for label in drops:
        while (i := w.find(label)) >= 0:
            w = w[:i] + w[w.index(_SEP, i + 1):]
    if rules.no_wait:
        while (i := w.find(_WAIT)) >= 0:
            w = w[:i] + w[w.index(_SEP, i + 1):]
        w += _NO_WAIT
    props = w[1:] + RESERVE if rules.prop_crc else w[1:]
    pieces = props.split(_MARKED)             # each cut: a label's 0x01, then the mark
    pieces = [p + b"\x01" for p in pieces[:-1]] + pieces[-1:]
    return named[0], named[1], queue_id, pieces, sum(map(len, pieces))


class Readdresser:
    """`readdress` with `rules` and `drops` fixed, remembering the `_template` of each
    properties shape (at most `KEPT`): a level's records mostly differ only in body, UNIQ_KEY
    and (timers) TIMER_OUT_MS, and then a delivery costs one parse, two searches and one header
    pack (the template's searches, parse of REAL_QID and removals once per shape). tests/unit/test_delay_reput_record.py
    holds it to `readdress`, which makes every template anew."""
    KEPT = 4096

    def __init__(self, rules: ReputRules, drops: tuple):
        self.rules, self.drops = rules, drops
        self._templates: dict = {}

    def __call__(self, buf, pos: int, parsed=None) -> Delivery | None:
        if parsed is None:
            parsed = parse(buf, pos)
            if parsed is None:
                return None
        h, body_at, w = parsed
        shape, values = _cut(w)
        templates = self._templates
        t = templates.get(shape)
        if t is None:
            t = _template(shape, self.drops, self.rules) or False
            if len(templates) >= self.KEPT:
                templates.clear()
            templates[shape] = t
        return _delivery(buf, h, body_at, t, values, self.rules) if t else None


def readdress(buf, pos: int, drops: tuple, rules: ReputRules, parsed=None) -> Delivery | None:
    """The delivery of the delay record at `pos` of `buf` (a whole record there; `parsed`:
    its `parse`, when the caller has it), with the properties of `drops` (`drop_list`) left
    out; None when it is not a delay record (no usable REAL_TOPIC/REAL_QID, lengths that do
    not add up) or its delivery would be refused for good (an illegal topic, a body or
    properties over the limits). The reference of `Readdresser`, which jobs use."""
    return Readdresser(rules, drops)(buf, pos, parsed)


def _delivery(buf, h: tuple, body_at: int, t: tuple, values, rules: ReputRules):
    topic, head, queue_id, pieces, props_len = t
    if values:
        props_len += sum(map(len, values))
        props = pieces[0] + values[0] + pieces[1] if len(values) == 1 else \
            b"".join(x for pair in zip(pieces, values) for x in pair) + pieces[-1]
    else:
        props = pieces[0]
    body_len = h[F_BODY_LEN]
    if body_len > rules.max_message_size or props_len > MAX_PROPERTIES_BYTES:
        return None
    store_host = rules.store_host or h[F_STORE_HOST]
    born = h[F_BORN_HOST]
    if len(store_host) == 8:
        sys_flag = h[F_SYS_FLAG] & ~SYSFLAG_STOREHOST_V6
        new_header = HEADERS[len(born), 8]
    else:
        sys_flag = h[F_SYS_FLAG] | SYSFLAG_STOREHOST_V6
        new_header = HEADERS[len(born), 20]
    size = new_header.size + body_len + len(head) + 2 + props_len
    if size > rules.max_message_size + TOTAL_SIZE_SLACK:
        return None
    data = b"".join((new_header.pack(size, MAGIC_V1, h[F_CRC], queue_id, h[F_FLAG], 0, 0, sys_flag,
                                     h[F_BORN_TS], born, 0, store_host, h[F_RECONSUME], 0, body_len),
                     buf[body_at:body_at + body_len], head, I16.pack(props_len), props))
    return Delivery(data, topic, queue_id, sys_flag, born, new_header.size, body_len)


class EncodedRun:
    """Deliveries of one topic and queue as one batch for `CommitLog.append_batch`: `first`
    stands for the run (topic, queue, flags), `write` copies it into a segment and sets the
    fields of each record that its place gives."""
    __slots__ = ("first", "record_sizes", "total", "_data", "_sealed")

    def __init__(self, deliveries: list):
        self.first = deliveries[0]
        self.record_sizes = tuple(len(d.data) for d in deliveries)
        self.total = sum(self.record_sizes)
        self._data = b"".join(d.data for d in deliveries) if len(deliveries) > 1 else self.first.data
        self._sealed = self.first.data[-CRC32_RESERVED_LEN:-11] == LABEL    # one store's rules

    def __len__(self) -> int:
        return len(self.record_sizes)

    def write(self, buf, pos: int, queue_offset: int | None, phys_offset: int,
              store_timestamp: int) -> int:
        """Write the records at `pos` of `buf`, the first at `phys_offset` with `queue_offset`
        (None: 0 for all, a transaction's prepared or rollback record); return the end."""
        start, end = pos, pos + self.total
        buf[pos:end] = self._data
        ts_at = store_timestamp_position(self.first.sys_flag)   # one born host length per run
        pack_positions, pack_ts = POSITIONS.pack_into, STORE_TIMESTAMP.pack_into
        q = queue_offset
        for size in self.record_sizes:
            pack_positions(buf, pos + QUEUE_OFFSET_POS, 0 if q is None else q, phys_offset + pos - start)
            pack_ts(buf, pos + ts_at, store_timestamp)
            pos += size
            if q is not None:
                q += 1
        if self._sealed:
            seal_run(buf, start, self.record_sizes)
        return end
