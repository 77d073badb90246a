"""Reading stored records back as messages: `decode_message` and the `LazyMessageExt` it
returns (DESIGN.md section 3 for the bytes). The record is checked for its framing at once
(`pulled_messages`, for a pull's records: at the first field read); each part is decoded on
its first read, so a caller that reads only the body and offsets never parses properties or
hosts. The CRC property (`core.record.crc_property`) is not among a message's properties.
"""
from __future__ import annotations

import struct
from dataclasses import fields
from operator import attrgetter

from core.record.crc import crc32
from core.record.crc_property import strip
from core.record.layout import (
    BODY_POS as _BODY_POS, HEADERS, I64 as _I64, MAGIC_V1, MAGIC_V2, V6_BITS as _V6_BITS, host_lengths,
    picked_struct,
)
from core.record.message import (
    PROPERTY_KEYS, PROPERTY_TAGS, MessageExt, bytes_to_host, string_to_properties,
)

# TOTALSIZE MAGIC BODYCRC SYSFLAG BODYLEN: what `decode_message` checks, by (sys_flag >> 4) & 3.
_FRAMES = tuple(picked_struct(("total", "magic", "crc", "sys_flag", "body_len"), *host_lengths(f << 4))
                for f in range(4))
_FRAME_V4 = _FRAMES[0]
_TOPIC_STRS: dict = {}


def _topic_str(raw: bytes) -> str:
    """TOPIC bytes -> str, cached (a store holds few topics)."""
    topic = _TOPIC_STRS.get(raw)
    if topic is None:
        topic = raw.decode("utf-8")
        if len(_TOPIC_STRS) < 65536:
            _TOPIC_STRS[raw] = topic
    return topic


class LazyMessageExt(MessageExt):
    """A MessageExt read from a stored record, decoded as it is read: `decode_message` checks
    only the framing; the first read of a field unpacks the fixed header (one struct call);
    the body is sliced on first read; topic, tags, keys and properties are parsed together on
    the first read of one of them; hosts and the message id are made when read. Every field is
    writable: the first write decodes the rest into the ordinary MessageExt slots and drops the
    record. Equal to a MessageExt with the same fields; copies and pickles are MessageExt."""

    # The record (bytes, starting at 0); the header's fields, () before the first read and
    # None once the fields live in the slots; (topic, tags, keys, properties); the body.
    __slots__ = ("_rec", "_h", "_t", "_body")

    def __init__(self, *args, **kwargs):           # direct construction, dataclasses.replace
        self._h = None
        MessageExt.__init__(self, *args, **kwargs)

    def _header(self) -> tuple:
        rec = self._rec
        if self._h is False:                       # from `pulled_messages`: check it now
            _frame_end(rec, 0)
        self._t = self._body = None
        self._h = h = HEADERS[host_lengths(rec[39])].unpack_from(rec)     # SYSFLAG's low byte
        return h

    def _tail(self) -> tuple:
        h, rec = self._h or self._header(), self._rec
        p = _BODY_POS[(h[7] >> 4) & 3] + h[14]
        if h[1] == MAGIC_V1:
            n, p = rec[p], p + 1
        else:
            n, p = rec[p] << 8 | rec[p + 1], p + 2
        topic = _topic_str(rec[p:p + n])
        p += n + 2
        props = string_to_properties(strip(rec[p:h[0]]).decode("utf-8")) if p < h[0] else {}
        self._t = t = (topic, props.pop(PROPERTY_TAGS, None), props.pop(PROPERTY_KEYS, None), props)
        return t

    def _materialize(self) -> None:
        values = _field_values(self)
        self._h = self._rec = self._t = self._body = None
        for put, value in zip(_SLOT_SETTERS, values):
            put(self, value)

    def __eq__(self, other):
        if isinstance(other, MessageExt):
            return _field_values(self) == _field_values(other)
        return NotImplemented

    def __reduce__(self):
        return MessageExt, _field_values(self)


def _header_field(get, i: int):
    def fget(self):
        h = self._h
        if h:
            return h[i]
        return get(self) if h is None else self._header()[i]
    return fget


def _tail_field(get, i: int):
    def fget(self):
        h = self._h
        if h is None:
            return get(self)
        return ((self._t if h else None) or self._tail())[i]
    return fget


def _computed_field(get, make):
    def fget(self):
        h = self._h
        if h is None:
            return get(self)
        return make(self, h or self._header())
    return fget


def _read_body(self, h) -> bytes:
    body = self._body
    if body is None:
        p = _BODY_POS[(h[7] >> 4) & 3]
        body = self._body = self._rec[p:p + h[14]]
    return body


def _setter(put):
    def fset(self, value):
        if self._h is not None:
            self._materialize()
        put(self, value)
    return fset


_GETTERS = {
    "topic": (_tail_field, 0), "body": (_computed_field, _read_body), "queue_id": (_header_field, 3),
    "flag": (_header_field, 4), "tags": (_tail_field, 1), "keys": (_tail_field, 2),
    "properties": (_tail_field, 3), "born_timestamp": (_header_field, 8),
    "born_host": (_computed_field, lambda self, h: bytes_to_host(h[9])),
    "store_host": (_computed_field, lambda self, h: bytes_to_host(h[11])),
    "sys_flag": (_header_field, 7), "reconsume_times": (_header_field, 12),
    "prepared_transaction_offset": (_header_field, 13), "queue_offset": (_header_field, 5),
    "commit_log_offset": (_header_field, 6), "store_size": (_header_field, 0),
    "store_timestamp": (_header_field, 10), "body_crc": (_header_field, 2),
    "msg_id": (_computed_field, lambda self, h: (h[11] + _I64.pack(h[6])).hex().upper()),
}
_FIELD_NAMES = tuple(f.name for f in fields(MessageExt))
assert set(_FIELD_NAMES) == set(_GETTERS), "LazyMessageExt must read every MessageExt field"
_SLOT_SETTERS = []
for _name in _FIELD_NAMES:          # a property over each MessageExt slot
    _slot = next(c.__dict__[_name] for c in MessageExt.__mro__ if _name in c.__dict__)
    _kind, _arg = _GETTERS[_name]
    setattr(LazyMessageExt, _name, property(_kind(_slot.__get__, _arg), _setter(_slot.__set__),
                                            doc=f"MessageExt.{_name}, read from the record"))
    _SLOT_SETTERS.append(_slot.__set__)
del _name, _slot, _kind, _arg
_field_values = attrgetter(*_FIELD_NAMES)
_new_lazy = object.__new__


def decode_message(buf, pos: int = 0, check_crc: bool = False) -> MessageExt:
    """The record at `pos` as a MessageExt: a LazyMessageExt holding the record (a copy of it
    unless `buf` is a bytes object of just this record). Raises ValueError if it is not a whole
    record: a blank or foreign magic, lengths that do not add up to TOTALSIZE, or, when
    `check_crc`, a body CRC mismatch. A topic or properties that are not UTF-8 (check_record
    refuses such a record before it is dispatched) raise UnicodeDecodeError, a ValueError,
    when first read."""
    p = _frame_end(buf, pos, check_crc)
    if pos or len(buf) != p or buf.__class__ is not bytes:
        buf = bytes(buf[pos:p])                      # hold just this record, never a mapping
    m = _new_lazy(LazyMessageExt)
    m._rec = buf
    m._h = ()
    return m


def pulled_messages(records: list) -> list:
    """Records as a pull returns them (bytes objects of one whole record each, cut at the
    sizes their consume-queue entries give) as LazyMessageExt, each framing-checked as
    `decode_message` does but on its first field read, together with the header unpack that
    read needs anyway; a record that fails the check raises ValueError there."""
    return list(map(_unchecked, records))


def _unchecked(rec: bytes) -> LazyMessageExt:
    m = _new_lazy(LazyMessageExt)
    m._rec = rec
    m._h = False
    return m


def _frame_end(buf, pos: int, check_crc: bool = False) -> int:
    """The end of the whole record at `pos` of `buf`, or ValueError (`decode_message`)."""
    try:
        total, magic, crc, sys_flag, body_len = _FRAME_V4.unpack_from(buf, pos)
        if sys_flag & _V6_BITS:
            total, magic, crc, sys_flag, body_len = _FRAMES[(sys_flag >> 4) & 3].unpack_from(buf, pos)
        body = pos + _BODY_POS[(sys_flag >> 4) & 3]
        p = body + body_len                          # TOPICLENGTH
        if magic == MAGIC_V1:
            p += 1 + buf[p]
        elif magic == MAGIC_V2:
            p += 2 + (buf[p] << 8 | buf[p + 1])
        else:
            raise ValueError(f"no message at {pos}: magic {magic & 0xFFFFFFFF:#x}")
        p += 2 + (buf[p] << 8 | buf[p + 1])          # past PROPERTIES
    except (struct.error, IndexError):
        raise ValueError(f"no whole record at {pos}") from None
    n = len(buf)
    if p - pos != total or body_len < 0 or p > n:
        raise ValueError(f"record at {pos}: TOTALSIZE {total}, fields add up to {p - pos}, "
                         f"{n - pos} bytes there")
    if check_crc and crc32(buf[body:body + body_len]) & 0x7FFFFFFF != crc:
        raise ValueError(f"record at {pos}: body CRC mismatch")
    return p


