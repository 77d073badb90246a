"""Messages as clients receive them.

`ReceivedMessage` is a view of one CommitLog record inside a pull reply in the "raw" format
(frame 1 = stored records concatenated, docs/FORMAT.md): the store's lazy record view
(`core.record.decode.LazyMessageExt`) over the frame, which `core.record.split` splits
keeping only where each body is. The fixed header (offsets, timestamps, hosts) is unpacked
on the first access of one of its fields, the variable tail (topic, properties, tags, keys)
on the first access of one of those, and the body is sliced when read. A consumer that reads
only `body` never unpacks more.

`message_from_fields` builds a `core.MessageExt` from a reply in the "fields" format
(a metadata map per message plus one frame of concatenated bodies), as `query_by_key`,
`view_by_id` and `look_by_offset` answer.
"""
from __future__ import annotations

import base64
from dataclasses import fields
from operator import attrgetter

from core.record.decode import FrameView
from core.record.message import DEFAULT_HOST, KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, MessageExt
from core.record.split import (  # noqa: F401  (the split's parts, as tests reach them here)
    RUN_MIN, RecordSpans as _Spans, _split_carefully, _take_run, find_records as _find_records,
)

_NAMES = tuple(f.name for f in fields(MessageExt))
_FIELD_VALUES = attrgetter(*_NAMES)
_PROPERTIES_AT = _NAMES.index("properties")


class ReceivedMessage(FrameView):
    """One stored message of a pull reply, decoded on demand from the frame: the store's lazy
    record view (`core.record.decode.LazyMessageExt`, a `core.MessageExt`), made by
    `split_records` over the frame with its body position and length known from the split;
    the fixed header fields are unpacked at the first access of one of them, the variable tail
    at the first access of topic, tags, keys or properties."""

    __slots__ = ()

    def to_message_ext(self) -> MessageExt:
        values = list(_FIELD_VALUES(self))
        values[_PROPERTIES_AT] = dict(values[_PROPERTIES_AT])
        return MessageExt(*values)

    def __repr__(self) -> str:
        return (f"ReceivedMessage(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, msg_id={self.msg_id}, body={self.body[:32]!r})")


class RecordSpans(_Spans):
    """`core.record.split.RecordSpans` whose views are ReceivedMessages."""
    __slots__ = ()
    view = ReceivedMessage


def split_records(buf) -> list:
    """ReceivedMessage views of the records concatenated in `buf` (`find_records`)."""
    return find_records(buf).views()


def find_records(buf) -> RecordSpans:
    """`core.record.split.find_records`, as ReceivedMessage spans."""
    return _find_records(buf, RecordSpans)


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
