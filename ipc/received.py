"""Messages as clients receive them.

`ReceivedMessage` is a view of one CommitLog record inside a pull reply in the "raw" format
(frame 1 = stored records concatenated, docs/FORMAT.md). Splitting a frame reads four fields
of each record (TOTALSIZE, the step to the next record; MAGIC; SYSFLAG; BODYLEN), with one
struct call per record or, for a run of records of one size, one numpy step for the run, and
keeps only where the body is: a message is one small object. The fixed
header (offsets, timestamps, hosts) is unpacked on the first access of one of its fields, the
variable tail (topic, properties, tags, keys) on the first access of one of those, and the
body is sliced when read. A consumer that reads only `body` never unpacks more.

`message_from_fields` builds a `core.MessageExt` from a reply in the "fields" format
(a metadata map per message plus one frame of concatenated bodies), as `query_by_key`,
`view_by_id` and `look_by_offset` answer.
"""
from __future__ import annotations

import base64
import struct
from itertools import repeat

from core.record.layout import (
    HEADER_V4 as _HEADER_V4, HEADERS as _HEADERS, I16 as _I16, I64 as _I64, MAGIC_V1, MAGIC_V2,
    MIN_RECORD_SIZE, V6_BITS as _V6_BITS, host_lengths, picked_struct,
)
from core.record.message import (
    DEFAULT_HOST, KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, MessageExt,
    bytes_to_host, string_to_properties,
)
from core.record.crc_property import strip
from core.record.scan import like_run_length

_LEAN = picked_struct(("total", "magic", "sys_flag", "body_len"))   # of a v1 IPv4 record
_V4_SIZE = _HEADER_V4.size
RUN_MIN = 16                # from this many records of one size on, a run is split with numpy


class ReceivedMessage:
    """One stored message, decoded on demand from the frame: its body position and length are
    known from the split, the fixed header fields are unpacked at the first access of one of
    them, the variable tail at the first access of topic, tags, keys or properties. Attribute
    names are those of `core.MessageExt` (plus `phys_offset`)."""

    __slots__ = ("_buf", "_p", "_n", "_h", "_t")

    def __init__(self, buf: bytes, body_pos: int, body_len: int, header: tuple | None = None):
        self._buf = buf
        self._p = body_pos
        self._n = body_len
        self._h = header    # TOTALSIZE .. BODYLEN; None until asked (a v1 record, IPv4 hosts)
        self._t = None      # (topic, tags, keys, properties), when asked

    def _header(self) -> tuple:
        self._h = h = _HEADER_V4.unpack_from(self._buf, self._p - _V4_SIZE)
        return h

    def _tail(self) -> tuple:
        h, buf = self._h or self._header(), self._buf
        p = self._p + self._n
        if h[1] == MAGIC_V1:
            topic_len = buf[p]
            p += 1
        else:
            topic_len = _I16.unpack_from(buf, p)[0]
            p += 2
        topic = buf[p:p + topic_len].decode("utf-8")
        p += topic_len
        props_len = _I16.unpack_from(buf, p)[0]
        props = string_to_properties(strip(buf[p + 2:p + 2 + props_len]).decode("utf-8")) \
            if props_len > 0 else {}
        tags = props.pop(PROPERTY_TAGS, None)
        keys = props.pop(PROPERTY_KEYS, None)
        self._t = t = (topic, tags, keys, props)
        return t

    # -- fixed fields --------------------------------------------------------------------
    @property
    def store_size(self) -> int:
        return (self._h or self._header())[0]

    @property
    def body_crc(self) -> int:
        return (self._h or self._header())[2]

    @property
    def queue_id(self) -> int:
        return (self._h or self._header())[3]

    @property
    def flag(self) -> int:
        return (self._h or self._header())[4]

    @property
    def queue_offset(self) -> int:
        return (self._h or self._header())[5]

    @property
    def phys_offset(self) -> int:
        return (self._h or self._header())[6]

    commit_log_offset = phys_offset

    @property
    def sys_flag(self) -> int:
        return (self._h or self._header())[7]

    @property
    def born_timestamp(self) -> int:
        return (self._h or self._header())[8]

    @property
    def store_timestamp(self) -> int:
        return (self._h or self._header())[10]

    @property
    def reconsume_times(self) -> int:
        return (self._h or self._header())[12]

    @property
    def prepared_transaction_offset(self) -> int:
        return (self._h or self._header())[13]

    @property
    def body(self) -> bytes:
        p = self._p
        return self._buf[p:p + self._n]

    @property
    def born_host(self) -> tuple:
        return bytes_to_host((self._h or self._header())[9])

    @property
    def store_host(self) -> tuple:
        return bytes_to_host((self._h or self._header())[11])

    @property
    def msg_id(self) -> str:
        """The offset message id: store host address + port + physical offset, upper-case hex."""
        h = self._h or self._header()
        return (h[11] + _I64.pack(h[6])).hex().upper()

    # -- variable fields -----------------------------------------------------------------
    @property
    def topic(self) -> str:
        return (self._t or self._tail())[0]

    @property
    def tags(self) -> str | None:
        return (self._t or self._tail())[1]

    @property
    def keys(self) -> str | None:
        return (self._t or self._tail())[2]

    @property
    def properties(self) -> dict:
        """User properties (TAGS and KEYS are lifted out into `tags` and `keys`)."""
        return (self._t or self._tail())[3]

    @property
    def keys_list(self) -> list:
        keys = self.keys
        return [k for k in keys.split(KEY_SEPARATOR) if k] if keys else []

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    def to_message_ext(self) -> MessageExt:
        return MessageExt(
            topic=self.topic, body=self.body, queue_id=self.queue_id, flag=self.flag, tags=self.tags,
            keys=self.keys, properties=dict(self.properties), born_timestamp=self.born_timestamp,
            born_host=self.born_host, store_host=self.store_host, sys_flag=self.sys_flag,
            reconsume_times=self.reconsume_times,
            prepared_transaction_offset=self.prepared_transaction_offset,
            queue_offset=self.queue_offset, commit_log_offset=self.phys_offset,
            store_size=self.store_size, store_timestamp=self.store_timestamp,
            body_crc=self.body_crc, msg_id=self.msg_id)

    def __repr__(self) -> str:
        return (f"ReceivedMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, msg_id={self.msg_id}, body={self.body[:32]!r})")


class RecordSpans:
    """The records of one frame, found and checked by `find_records`: where each body starts
    and how long it is (plus the header of each record the careful loop read), without an
    object per record yet. `views` makes the ReceivedMessages."""
    __slots__ = ("buf", "starts", "lens", "heads")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.starts: list = []
        self.lens: list = []
        self.heads: dict = {}          # index -> header tuple, for records the careful loop took

    def __len__(self) -> int:
        return len(self.starts)

    def views(self) -> list:
        n, heads = len(self.starts), self.heads
        out = list(map(ReceivedMessage, repeat(self.buf, n), self.starts, self.lens))
        for i, h in heads.items():
            out[i]._h = h
        return out


def split_records(buf) -> list:
    """ReceivedMessage views of the records concatenated in `buf` (`find_records`)."""
    return find_records(buf).views()


def find_records(buf) -> RecordSpans:
    """The records concatenated in `buf` (copied once into bytes when it is another buffer).
    Anything that is not a whole record (a blank, a bad magic, a length that runs past the end)
    raises ValueError: the frame is not what the protocol says.

    Version-1 records with IPv4 hosts (nearly all) go through a lean loop: one unpack of four
    header fields, a few comparisons, where the body is (the header is unpacked later, when
    asked). Where two records in a row have one size (a producer's batch of like messages),
    `_take_run` checks the records of that size and body length that follow in one numpy step,
    without a loop in Python. At the first other record (v2 magic, an IPv6 host) or anything
    doubtful, the record-by-record loop takes over from there; it has the final word on what is
    a record and says where a bad frame went wrong."""
    if type(buf) is not bytes:
        buf = bytes(buf)
    out = RecordSpans(buf)
    starts, lens = out.starts, out.lens
    unpack = _LEAN.unpack_from
    pos, end = 0, len(buf)
    last = try_run_at = 0
    try:
        while pos < end:
            total, magic, sys_flag, body_len = unpack(buf, pos)
            if magic != MAGIC_V1 or sys_flag & _V6_BITS \
                    or not 0 <= body_len <= total - MIN_RECORD_SIZE:
                break
            if total == last and pos >= try_run_at and end - pos >= RUN_MIN * total:
                taken = _take_run(buf, pos, total, body_len, end, out)
                pos += taken * total
                if taken:
                    continue
                try_run_at = pos + RUN_MIN * total       # not a run: look again further on
            starts.append(pos + _V4_SIZE)
            lens.append(body_len)
            last = total
            pos += total
    except struct.error:
        pass                                       # a short tail: the careful loop says so
    if pos > end:                                  # the last record ran past the end
        starts.clear()
        lens.clear()
        pos = 0
    if pos < end:
        _split_carefully(buf, pos, out)
    return out


def _take_run(buf: bytes, pos: int, size: int, body_len: int, end: int, out: RecordSpans) -> int:
    """Add the records of `size` bytes with a body of `body_len` that lie back to back from
    `pos` (`core.record.scan.like_run_length`: a strided numpy check, in windows that grow
    eightfold); return how many, 0 when fewer than RUN_MIN."""
    n = like_run_length(buf, pos, None, size, body_len, (end - pos) // size)
    if n < RUN_MIN:
        return 0
    first = pos + _V4_SIZE
    out.starts.extend(range(first, first + n * size, size))
    out.lens.extend(repeat(body_len, n))
    return n


def _split_carefully(buf: bytes, pos: int, out: RecordSpans) -> None:
    """Add the records from `pos` on, checking each."""
    end = len(buf)
    try:
        while pos < end:
            h = _HEADER_V4.unpack_from(buf, pos)
            size = _V4_SIZE
            if h[7] & _V6_BITS:
                header = _HEADERS[host_lengths(h[7])]
                h = header.unpack_from(buf, pos)
                size = header.size
            total = h[0]
            if (h[1] != MAGIC_V1 and h[1] != MAGIC_V2) or total < MIN_RECORD_SIZE or pos + total > end \
                    or h[14] < 0 or size + h[14] > total:
                raise ValueError(f"no whole record at {pos} of a {end}-byte frame")
            out.heads[len(out.starts)] = h
            out.starts.append(pos + size)
            out.lens.append(h[14])
            pos += total
    except struct.error:
        raise ValueError(f"a truncated record at {pos} of a {end}-byte frame") from None


def parse_host(value) -> tuple:
    """`"ip:port"` (or `"[v6]:port"`, or an [ip, port] pair) -> (ip, port)."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return str(value[0]), int(value[1])
    if isinstance(value, str) and ":" in value:
        host, _, port = value.rpartition(":")
        try:
            return host.strip("[]"), int(port)
        except ValueError:
            return host, 0
    return DEFAULT_HOST


def message_from_fields(meta: dict, body: bytes) -> MessageExt:
    """A MessageExt from one metadata map of the "fields" format and its body."""
    keys = meta.get("keys")
    if isinstance(keys, (list, tuple)):
        keys = KEY_SEPARATOR.join(str(k) for k in keys)
    props = meta.get("properties") or {}
    props = {str(k): str(v) for k, v in props.items() if k not in (PROPERTY_TAGS, PROPERTY_KEYS)} \
        if isinstance(props, dict) else {}
    return MessageExt(
        topic=meta.get("topic", ""), body=body, queue_id=meta.get("queue_id", 0),
        flag=meta.get("flag", 0), tags=meta.get("tags"), keys=keys or None, properties=props,
        born_timestamp=meta.get("born_timestamp", 0), born_host=parse_host(meta.get("born_host")),
        store_host=parse_host(meta.get("store_host")), sys_flag=meta.get("sys_flag", 0),
        reconsume_times=meta.get("reconsume_times", 0), queue_offset=meta.get("queue_offset", 0),
        commit_log_offset=meta.get("phys_offset", 0), store_size=meta.get("store_size", 0),
        store_timestamp=meta.get("store_timestamp", 0), body_crc=meta.get("body_crc", 0),
        msg_id=meta.get("msg_id", ""))


def messages_from_reply(env: dict, frames: list) -> list:
    """The MessageExt list of a "fields" reply: `messages` metadata, bodies split by `body_size`."""
    metas = env.get("messages") or []
    data = frames[0] if frames else b""
    out = []
    pos = 0
    for meta in metas:
        n = int(meta.get("body_size", 0))
        out.append(message_from_fields(meta, bytes(data[pos:pos + n])))
        pos += n
    return out


def host_text(host: tuple) -> str:
    """(ip, port) -> "ip:port" ("[ip]:port" for IPv6)."""
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def message_to_dict(m) -> dict:
    """A JSON-ready map of a ReceivedMessage or MessageExt: the body as text when it is UTF-8,
    else as `body_base64`."""
    out = {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
           "phys_offset": m.commit_log_offset, "msg_id": m.msg_id, "tags": m.tags, "keys": m.keys,
           "properties": dict(m.properties), "flag": m.flag, "born_timestamp": m.born_timestamp,
           "store_timestamp": m.store_timestamp, "born_host": host_text(m.born_host),
           "store_host": host_text(m.store_host), "store_size": m.store_size,
           "reconsume_times": m.reconsume_times}
    body = bytes(m.body)
    try:
        out["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(body).decode("ascii")
    return out
