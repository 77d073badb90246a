"""Decoding of the appender's `put` and `put_batch` requests (docs/PROTOCOL.md) into
`core.record.message.Message` objects, with the wire errors a client can cause: BAD_FIELD (named),
BAD_TOPIC, TOO_MANY_FRAMES; and the encoding of their replies. A body over
`max_message_size` or a topic over 127 UTF-8 bytes is no protocol error but a put the store
refuses, as RocketMQ's does: the parser returns an `IllegalMessage` result instead of the
request (codes BODY_TOO_LARGE, BAD_TOPIC), which the appender answers with the put status
MESSAGE_ILLEGAL and its reason.

A `put_batch` reply carries one message id per message. Its msgpack array is built in bulk
from the records' offsets in hex, each behind the same string header and store host
(`MsgIdArray`), and spliced into the reply map by `pack_reply`, instead of a Python string
per id: that was a tenth of the appender's own time per batch request.

Bodies are never copied here: each message's body is a memoryview slice of the request's body
frame (the engine's `prepare_record` takes its one copy). The queue id is left for the appender
to fill in once it knows the topic's queues; everything else a `Message` needs is decided here.
Store-level refusals (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED) stay with `prepare_record`.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

import zmq

from core.record.key_block import KeyBlock, block_problem
from core.record.message import Message
from core.meta.topics import MAX_TOPIC_BYTES, topic_name_problem
from core.status import PutMessageStatus
from ipc.protocol import ErrorCode, ProtocolError, field, pack

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64_MAX = (1 << 63) - 1
_HOSTS: dict = {}
_UNIFORM_SLICES: dict = {}      # (count, size) -> the bodies' slices of a batch of one body size


class IllegalMessage(NamedTuple):
    """A well-formed put the store refuses as RocketMQ's does (put status MESSAGE_ILLEGAL): a
    body over max_message_size, a topic over 127 UTF-8 bytes. `code` and `reason` say which.
    The parsers return it in place of the PutRequest."""
    code: ErrorCode
    reason: str
    status = PutMessageStatus.MESSAGE_ILLEGAL


@dataclass(slots=True)
class PutRequest:
    """`messages`, one per record; or, for a batch without per-message fields, one template
    message in `messages`, the records' bodies in `bodies` and maybe their UNIQ_KEYs in
    `uniq_keys` (a list of strings or a `core.record.key_block.KeyBlock`), with `block` the frame
    that holds the bodies back to back (for `core.record.batch_encode.prepare_columns`)."""
    topic: str
    queue_id: int | None          # None: the appender picks one round robin
    messages: list
    wait: bool
    body_bytes: int
    count: int
    bodies: list | None = None
    uniq_keys: list | KeyBlock | None = None
    block: memoryview | None = None
    sizes: list | None = None     # the bodies' lengths, with `bodies`
    id_offsets: bool = False      # the reply gives the records' offsets, not their message ids


def parse_put(env: dict, frames: list, born_host: tuple, now_ms: int,
              max_size: int) -> PutRequest | IllegalMessage:
    topic = _topic(env)
    if topic.__class__ is IllegalMessage:
        return topic
    if len(frames) != 1:
        raise ProtocolError(ErrorCode.TOO_MANY_FRAMES, f"put takes exactly one body frame, got {len(frames)}")
    body = frames[0]
    if len(body) > max_size:
        return IllegalMessage(ErrorCode.BODY_TOO_LARGE,
                              f"body of {len(body)} bytes is over max_message_size {max_size}")
    host = _host(env.get("born_host"), "born_host") if env.get("born_host") is not None else born_host
    msg = _message(env, "", topic, body, host, now_ms)
    wait = field(env, "wait", bool, True) and msg.properties.get("WAIT") != "false"
    return PutRequest(topic, _queue_id(env), [msg], wait, len(body), 1)


def parse_put_batch(env: dict, frames: list, born_host: tuple, now_ms: int,
                    max_size: int) -> PutRequest | IllegalMessage:
    topic = _topic(env)
    if topic.__class__ is IllegalMessage:
        return topic
    sizes = field(env, "sizes", list)
    if not sizes:
        raise ProtocolError(ErrorCode.BAD_FIELD, "field 'sizes' must not be empty")
    if len(frames) != 1:
        raise ProtocolError(ErrorCode.TOO_MANY_FRAMES,
                            f"put_batch takes exactly one frame of concatenated bodies, got {len(frames)}")
    data = memoryview(frames[0])
    n = len(sizes)
    uniform = sizes.count(sizes[0]) == n                # the common batch: bodies of one size
    if list(map(type, sizes)).count(int) != n or (sizes[0] if uniform else min(sizes)) < 0:
        raise ProtocolError(ErrorCode.BAD_FIELD, "field 'sizes' must be a list of integers >= 0")
    total = sizes[0] * n if uniform else sum(sizes)
    if total != len(data):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"field 'sizes' adds up to {total} bytes but the body frame has {len(data)}")
    if total > max_size and max(sizes) > max_size:      # no body is larger than the whole
        return IllegalMessage(ErrorCode.BODY_TOO_LARGE,
                              f"a body of {max(sizes)} bytes is over max_message_size {max_size}")
    host = _host(env.get("born_host"), "born_host") if env.get("born_host") is not None else born_host
    per = field(env, "messages", list, None)
    wait = field(env, "wait", bool, True)
    uniq_keys = field(env, "uniq_keys", list, None)
    key_block = field(env, "uniq_key_block", bytes, None)
    if key_block is not None:
        if uniq_keys is not None or per is not None:
            raise ProtocolError(ErrorCode.BAD_FIELD, "field 'uniq_key_block' goes with bodies only, "
                                                     "and not with 'uniq_keys'")
        problem = block_problem(key_block, len(sizes))
        if problem:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'uniq_key_block' {problem}")
        uniq_keys = KeyBlock(key_block, len(sizes))
    elif per is None:
        if uniq_keys is not None and (len(uniq_keys) != len(sizes)
                                      or set(map(type, uniq_keys)) != {str}):
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"field 'uniq_keys' must be a list of {len(sizes)} strings, one per body")
    id_offsets = _id_format(env)
    if per is None:
        bodies = list(map(data.__getitem__, _slices(sizes, uniform)))
        template = Message(topic, b"", 0, 0, None, None, {}, now_ms, host)
        return PutRequest(topic, _queue_id(env), [template], wait, total, n, bodies,
                          uniq_keys, data, sizes, id_offsets)
    if uniq_keys is not None:
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            "field 'uniq_keys' goes with bodies only; with 'messages' each "
                            "message carries its own UNIQ_KEY property")
    if len(per) != len(sizes):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"field 'messages' has {len(per)} entries but 'sizes' has {len(sizes)}")
    msgs = []
    off = 0
    for i, (n, m) in enumerate(zip(sizes, per)):
        if m is None:
            m = {}
        elif not isinstance(m, dict):
            raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'messages[{i}]' must be a map or nil")
        msgs.append(_message(m, f"messages[{i}].", topic, data[off:off + n], host, now_ms))
        off += n
    return PutRequest(topic, _queue_id(env), msgs, wait, total, len(msgs), id_offsets=id_offsets)


def _slices(sizes: list, uniform: bool) -> list:
    """The slice of each body in the batch frame; those of a batch of bodies of one size are
    kept (`_UNIFORM_SLICES`), a producer sends the same shape again and again."""
    if not uniform:
        ends = list(accumulate(sizes))
        return list(map(slice, [0, *ends], ends))
    key = (len(sizes), sizes[0])
    slices = _UNIFORM_SLICES.get(key)
    if slices is None:
        ends = range(sizes[0], sizes[0] * len(sizes) + 1, sizes[0]) if sizes[0] else [0] * len(sizes)
        slices = list(map(slice, [0, *ends], ends))
        if len(_UNIFORM_SLICES) >= 64:
            _UNIFORM_SLICES.clear()
        _UNIFORM_SLICES[key] = slices
    return slices


def _id_format(env: dict) -> bool:
    """Whether the reply is to give `phys_offsets` and `store_host` instead of `msg_ids`."""
    form = field(env, "id_format", str, "ids")
    if form not in ("ids", "offsets"):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"field 'id_format' must be \"ids\" or \"offsets\", got {form!r}")
    return form == "offsets"


def _topic(env: dict) -> str | IllegalMessage:
    """The topic of a put; an IllegalMessage for one over 127 bytes (a put status); other
    illegal names are protocol errors."""
    topic = field(env, "topic", str)
    problem = topic_name_problem(topic)
    if problem:
        if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
            return IllegalMessage(ErrorCode.BAD_TOPIC, problem)
        raise ProtocolError(ErrorCode.BAD_TOPIC, problem)
    return topic


def _queue_id(env: dict) -> int | None:
    return field(env, "queue_id", int, None, 0, INT32[1])


def _message(m: dict, prefix: str, topic: str, body, host: tuple, now_ms: int) -> Message:
    if not m:
        return Message(topic, body, 0, 0, None, None, {}, now_ms, host)
    flag = _int(m, prefix, "flag", 0, *INT32)
    tags = _opt(m, prefix, "tags", str)
    keys = m.get("keys")
    if keys is not None and not isinstance(keys, str):
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{prefix}keys' must be a string or a list of strings")
    props = m.get("properties")
    if props is None:
        props = {}
    elif not isinstance(props, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{prefix}properties' must be a map of strings to strings")
    born_ts = _int(m, prefix, "born_timestamp", now_ms, 0, INT64_MAX)
    return Message(topic, body, 0, flag, tags, keys, props, born_ts, host)


def _int(m: dict, prefix: str, name: str, default: int, lo: int, hi: int) -> int:
    value = m.get(name)
    if value is None:
        return default
    if type(value) is not int:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{prefix}{name}' must be int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{prefix}{name}' must be between {lo} and {hi}, got {value}")
    return value


def _opt(m: dict, prefix: str, name: str, kind):
    value = m.get(name)
    if value is not None and not isinstance(value, kind):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"field '{prefix}{name}' must be {kind.__name__}, got {type(value).__name__}")
    return value


def _host(text, name: str) -> tuple:
    """`"ip:port"` (`"[v6]:port"` too) as the (address, port) tuple the engine takes."""
    hit = _HOSTS.get(text) if isinstance(text, str) else None
    if hit is not None:
        return hit
    try:
        host, sep, port = text.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(text)
        parsed = (str(ipaddress.ip_address(host)), int(port))
    except (ValueError, AttributeError):
        raise ProtocolError(ErrorCode.BAD_FIELD,
                            f"field '{name}' must be \"ip:port\", got {text!r}") from None
    if len(_HOSTS) < 4096:
        _HOSTS[text] = parsed
    return parsed


def peer_host(address: str | None, fallback: tuple) -> tuple:
    """The born host of a client that did not name one: its IP as ZeroMQ reports it, port 0."""
    if not address:
        return fallback
    try:
        return (str(ipaddress.ip_address(address.strip("[]"))), 0)
    except ValueError:
        return fallback


class PeerHosts:
    """The born host of each client connection (its ZeroMQ identity) that names none, from the
    request's `Peer-Address`, kept while the connection is known (at most 10,000 of them)."""

    def __init__(self, fallback: tuple):
        self.fallback = fallback
        self.hosts: dict[bytes, tuple] = {}

    def of(self, identity: bytes, frame) -> tuple:
        host = self.hosts.get(identity)
        if host is None:
            try:
                address = frame.get("Peer-Address")
            except (zmq.ZMQError, AttributeError):
                address = None
            host = peer_host(address, self.fallback)
            if len(self.hosts) > 10_000:
                self.hosts.clear()
            self.hosts[identity] = host
        return host


class MsgIdArray(bytes):
    """A msgpack array of message ids, already encoded (see the module docstring)."""

    @classmethod
    def of(cls, result) -> "MsgIdArray":
        """The ids of a core.status.AppendMessageResult."""
        host = result.store_host
        if not host:
            return cls(pack([]))
        n = len(result.record_sizes) or 1
        tag = bytes((0xD9, 2 * len(host) + 16)) + host.hex().upper().encode()   # str 8, then the host
        head = bytes((0x90 | n,)) if n < 16 else \
            (b"\xdc" + n.to_bytes(2, "big") if n < 0x10000 else b"\xdd" + n.to_bytes(4, "big"))
        return cls(head + tag + result.offsets_hex().encode().replace(b" ", tag))


_MSG_IDS_KEY = pack("msg_ids")


def pack_reply(fields: dict) -> bytes:
    """msgpack of a put reply map; a MsgIdArray under "msg_ids" is spliced in as it is."""
    ids = fields.get("msg_ids")
    if ids.__class__ is not MsgIdArray:
        return pack(fields)
    rest = dict(fields)
    del rest["msg_ids"]
    n = len(rest)
    body = pack(rest)[1 if n < 16 else 3:]               # without its map header
    n += 1
    head = bytes((0x80 | n,)) if n < 16 else b"\xde" + n.to_bytes(2, "big")
    return b"".join((head, body, _MSG_IDS_KEY, ids))
