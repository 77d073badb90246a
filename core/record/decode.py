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
from core.record.props import topic_of
from core.record.message import (
    PROPERTY_KEYS, PROPERTY_TAGS, MessageExt, bytes_to_host, string_to_properties,
)

# TOTALSIZE MAGIC BODYCRC SYSFLAG BODYLEN: what `decode_message` checks, by (sys_flag >> 4) & 3.
_FRAMES = tuple(picked_struct(("total", "magic", "crc", "sys_flag", "body_len"), *host_lengths(f << 4))
                for f in range(4))
_FRAME_V4 = _FRAMES[0]
_V4_BODY = _BODY_POS[0]


def _topic_str(raw: bytes) -> str:
    """TOPIC bytes -> str through the topic cache of `core.record.props`; UnicodeDecodeError
    for bytes that are not UTF-8."""
    return topic_of(raw) or raw.decode("utf-8")


class LazyMessageExt(MessageExt):
    """A MessageExt read from a stored record, decoded as it is read: the one lazy record view,
    of the store (`decode_message`, `pulled_messages`) and of the clients (`ipc.received`
    derives its ReceivedMessage from it, over the records of a pull reply's frame).

    Where the body is is known when the view is made (`decode_message` checks the framing at
    once; `pulled_messages` at the first field read); the first read of a header field
    unpacks the fixed header (one struct call); the body is sliced when read; topic, tags,
    keys and properties are parsed together on the first read of one of them; hosts and the
    message id are made when read. Every field is writable: the first write decodes the rest
    into the ordinary MessageExt slots and drops the record. Equal to a MessageExt with the
    same fields; copies and pickles are MessageExt."""

    # The buffer holding the record (None once the fields live in the slots); where the record
    # starts in it; where its body starts (-1: the framing is not checked yet, `pulled_messages`)
    # and its length; the header's fields (None before the first read); (topic, tags, keys,
    # properties), None before the first read.
    __slots__ = ("_buf", "_at", "_p", "_n", "_h", "_t")

    def __init__(self, *args, **kwargs):           # direct construction, dataclasses.replace
        self._buf = self._h = self._t = None
        MessageExt.__init__(self, *args, **kwargs)

    def _check(self) -> None:
        self._p, self._n, _ = _frame(self._buf, self._at)

    def _header(self) -> tuple:
        buf, at = self._buf, self._at
        if self._p < 0:                            # from `pulled_messages`: check it now
            self._check()
        self._h = h = HEADERS[host_lengths(buf[at + 39])].unpack_from(buf, at)   # SYSFLAG's low byte
        return h

    def _tail(self) -> tuple:
        h, buf = self._h or self._header(), self._buf
        p = self._p + self._n
        if h[1] == MAGIC_V1:
            n, p = buf[p], p + 1
        else:
            n, p = buf[p] << 8 | buf[p + 1], p + 2
        topic = _topic_str(buf[p:p + n])
        p += n + 2
        end = self._at + h[0]
        props = string_to_properties(strip(buf[p:end]).decode("utf-8")) if p < end else {}
        self._t = t = (topic, props.pop(PROPERTY_TAGS, None), props.pop(PROPERTY_KEYS, None), props)
        return t

    def _materialize(self) -> None:
        values = _field_values(self)
        self._buf = self._h = self._t = None
        for put, value in zip(_SLOT_SETTERS, values):
            put(self, value)

    def __eq__(self, other):
        if isinstance(other, MessageExt):
            return _field_values(self) == _field_values(other)
        return NotImplemented

    def __reduce__(self):
        return MessageExt, _field_values(self)


class FrameView(LazyMessageExt):
    """A LazyMessageExt over a record inside a frame of records (`core.record.split`), made
    with its body position and length: `FrameView(frame, body_pos, body_len)` for a version-1
    record with IPv4 hosts, whose header has not been unpacked; `view_at` for any other."""
    __slots__ = ()

    def __init__(self, buf: bytes, body_pos: int, body_len: int):
        self._buf = buf
        self._at = body_pos - _V4_BODY
        self._p = body_pos
        self._n = body_len
        self._h = self._t = None


def _header_field(get, i: int):
    def fget(self):
        h = self._h
        if h is not None:
            return h[i]
        return get(self) if self._buf is None else self._header()[i]
    return fget


def _tail_field(get, i: int):
    def fget(self):
        t = self._t
        if t is not None:
            return t[i]
        return get(self) if self._buf is None else self._tail()[i]
    return fget


def _computed_field(get, make):
    def fget(self):
        if self._buf is None:
            return get(self)
        return make(self, self._h or self._header())
    return fget


def _body_field(get, _):
    def fget(self):
        buf = self._buf
        if buf is None:
            return get(self)
        if self._p < 0:
            self._check()
        p = self._p
        return buf[p:p + self._n]
    return fget


def _setter(put):
    def fset(self, value):
        if self._buf is not None:
            self._materialize()
        put(self, value)
    return fset


_GETTERS = {
    "topic": (_tail_field, 0), "body": (_body_field, None), "queue_id": (_header_field, 3),
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
    body, body_len, end = _frame(buf, pos, check_crc)
    if pos or len(buf) != end or buf.__class__ is not bytes:
        buf = bytes(buf[pos:end])                    # hold just this record, never a mapping
        body -= pos
    return view_at(LazyMessageExt, buf, 0, body, body_len, None)


def view_at(cls, buf: bytes, at: int, body: int, body_len: int, header: tuple | None):
    """A `cls` (LazyMessageExt or a subclass) over the record at `at` of `buf`, its body at
    `body` (-1: not yet checked) of `body_len` bytes, its header unpacked or None."""
    m = _new_lazy(cls)
    m._buf = buf
    m._at = at
    m._p = body
    m._n = body_len
    m._h = header
    m._t = None
    return m


def pulled_messages(records: list) -> list:
    """Records as a pull returns them (bytes objects of one whole record each, cut at the
    sizes their consume-queue entries give) as LazyMessageExt, each framing-checked as
    `decode_message` does but on its first field read, together with the header unpack that
    read needs anyway; a record that fails the check raises ValueError there."""
    return list(map(_unchecked, records))


def _unchecked(rec: bytes) -> LazyMessageExt:
    return view_at(LazyMessageExt, rec, 0, -1, 0, None)


def _frame(buf, pos: int, check_crc: bool = False) -> tuple[int, int, int]:
    """(body position, body length, end) of the whole record at `pos` of `buf`, or ValueError
    (`decode_message`)."""
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
    return body, body_len, p
