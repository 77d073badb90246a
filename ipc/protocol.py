"""The wire protocol's envelope (docs/PROTOCOL.md is the contract).

A request is a multipart ZeroMQ message: frame 0 is a msgpack map `{"op": str, "rid": int, ...}`,
any further frames are raw bytes (message bodies, records). A reply is frame 0
`{"rid": int, "status": str, ...}` plus raw frames. An error reply has status "ERROR", an
integer `code` from `ErrorCode` and a readable `reason`. Service handlers are registered by op
name with the number of body frames they take; anything malformed (no string `op`, no integer
`rid`, body frames that do not match) gets an error reply, which echoes frame 0's `rid` when it
is an integer (else 0), and the service keeps running.
"""
from __future__ import annotations

import enum

import msgpack

PROTOCOL_VERSION = 1
ERROR = "ERROR"
OK = "OK"


class ErrorCode(enum.IntEnum):
    MALFORMED_FRAME = 1        # frame 0 is not a msgpack map
    UNKNOWN_OP = 2             # no handler for "op"
    BAD_FIELD = 3              # a field is missing or of the wrong type / out of range
    BAD_TOPIC = 4              # topic empty, too long, or with characters outside [%|a-zA-Z0-9_-]
    BODY_TOO_LARGE = 5         # a body over max_message_size
    NOT_FOUND = 6              # unknown topic, queue, message id, group
    UNAVAILABLE = 7            # the service cannot serve now (starting, draining, slave)
    INTERNAL = 8               # a bug: logged with a traceback on the server
    TOO_MANY_FRAMES = 9        # body frame count does not match the request
    UNKNOWN_MEMBER = 10        # no such member of the group (session ended, left, never joined)
    NOT_QUEUE_OWNER = 11       # a member's offset commit for a queue it does not own (any more)
    FORBIDDEN = 12             # secure mode: the request's key may not do this (ipc/access.py)


class ProtocolError(Exception):
    """Raised inside a handler to send an error reply."""

    def __init__(self, code: ErrorCode, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data) -> object:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def decode_frame0(frames: list) -> dict:
    """Frame 0 of a request as a map; ProtocolError MALFORMED_FRAME when it is not one."""
    if not frames:
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, "empty message")
    try:
        env = unpack(frames[0])
    except Exception as e:
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, f"frame 0 is not msgpack: {e}") from None
    if not isinstance(env, dict):
        raise ProtocolError(ErrorCode.MALFORMED_FRAME, "frame 0 must be a msgpack map")
    return env


def _is_rid(value) -> bool:
    """Whether `value` can be a request id: any integer, and a bool is not one."""
    return isinstance(value, int) and not isinstance(value, bool)


def readable_rid(env) -> int:
    """The `rid` a reply to `env` carries: its `rid` when that is an integer, else 0."""
    rid = env.get("rid") if isinstance(env, dict) else None
    return rid if _is_rid(rid) else 0


def check_envelope(env: dict) -> None:
    """ProtocolError BAD_FIELD unless `env` has a string `op` and an integer `rid`."""
    if not isinstance(env.get("op"), str):
        raise ProtocolError(ErrorCode.BAD_FIELD, "field 'op' must be a string")
    rid = env.get("rid")
    if rid is None:
        raise ProtocolError(ErrorCode.BAD_FIELD, "missing field 'rid'")
    if not _is_rid(rid):
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'rid' must be an integer, got {type(rid).__name__}")


def decode_request(frames: list) -> tuple[dict, list]:
    """(envelope, raw frames) of a request; ProtocolError when frame 0 is not a proper envelope."""
    env = decode_frame0(frames)
    check_envelope(env)
    return env, frames[1:]


def error_reply(rid, code: ErrorCode, reason: str) -> list:
    return [pack({"rid": rid if _is_rid(rid) else 0, "status": ERROR, "code": int(code), "reason": reason})]


def reply(rid: int, status: str, fields: dict | None = None, frames: list | None = None) -> list:
    env = {"rid": rid, "status": status}
    if fields:
        env.update(fields)
    return [pack(env)] + list(frames or ())


def field(env: dict, name: str, kind, default=..., minimum=None, maximum=None):
    """A typed field of a request; ProtocolError naming it when missing or wrong."""
    if name not in env or env[name] is None:
        if default is ...:
            raise ProtocolError(ErrorCode.BAD_FIELD, f"missing field '{name}'")
        return default
    value = env[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{name}' must be {names}, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{name}' must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field '{name}' must be <= {maximum}, got {value}")
    return value


class Handlers:
    """A registry of operations: `@handlers.op("put")` on a function(env, frames, peer) that
    returns the reply frames, or None when it will answer `peer` later (a held pull, a put
    waiting for its flush).

    The envelope is checked here for every op: frame 0 a map with a string `op` and an
    integer `rid`, and as many body frames as the op declares (`body_frames`, 0 unless
    given; None: the handler checks them itself, as `put` and `put_batch` do). An error
    reply carries frame 0's `rid` whenever that is an integer, else 0."""

    def __init__(self):
        self._ops = {}
        self.guard = None           # secure mode: an ipc.access.AccessGuard, asked before any op

    def op(self, name: str, body_frames: int | None = 0):
        def register(fn):
            self._ops[name] = (fn, body_frames)
            return fn
        return register

    def names(self) -> list[str]:
        return sorted(self._ops)

    def handle(self, frames: list, peer=None, log=None, user: str | None = None) -> list | None:
        """Decode, dispatch and return reply frames or None (deferred); never raises. With a
        `guard`, `user` (the ZAP User-Id of the request's connection) must be allowed the op."""
        rid = 0
        try:
            env = decode_frame0(frames)
            rid = readable_rid(env)
            check_envelope(env)
            if self.guard is not None:
                self.guard.check(env, user)
            entry = self._ops.get(env["op"])
            if entry is None:
                raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown op '{env['op']}'")
            fn, body_frames = entry
            raw = frames[1:]
            if body_frames is not None and len(raw) != body_frames:
                raise ProtocolError(ErrorCode.TOO_MANY_FRAMES,
                                    f"op '{env['op']}' takes {body_frames} body frames, got {len(raw)}")
            return fn(env, raw, peer)
        except ProtocolError as e:
            return error_reply(rid, e.code, e.reason)
        except Exception as e:                      # a bug: answer, log, keep serving
            if log is not None:
                log.exception("handler failed")
            return error_reply(rid, ErrorCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
