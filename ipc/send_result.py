"""`SendResult`, what a producer's put or batch put came to, and `parse_send_reply`, which makes
one from the appender's reply (docs/PROTOCOL.md): a put status with its message ids and
offsets, or, for a refusal, the status with the error code and the reason the store gave.
An error reply (status "ERROR") becomes a put status too: UNAVAILABLE is
SERVICE_NOT_AVAILABLE, a failure on the store's side UNKNOWN_ERROR, any other code (a bad
field, a bad topic name) MESSAGE_ILLEGAL.
"""
from __future__ import annotations

from core.record.key_block import KeyBlock
from core.record.message import message_ids
from core.status import PutMessageStatus
from ipc.protocol import ERROR, ErrorCode

_PUT_STATUSES = {s.value: s for s in PutMessageStatus}
_ERROR_STATUS = {
    ErrorCode.UNAVAILABLE: PutMessageStatus.SERVICE_NOT_AVAILABLE,
    ErrorCode.INTERNAL: PutMessageStatus.UNKNOWN_ERROR,
    ErrorCode.UNKNOWN_OP: PutMessageStatus.UNKNOWN_ERROR,
}


class SendResult:
    """The answer to a put or a batch put. `status` is a core.PutMessageStatus; `msg_id` is the
    offset message id (of the first message of a batch, all in `msg_ids`); `uniq_key(s)` the
    client-side ids; `error_code`/`reason` are set when the store refused the put and said why. A list
    given as `msg_ids` is kept as it is (a reply's own list, not copied)."""

    __slots__ = ("status", "topic", "_msg_ids", "queue_id", "queue_offset", "phys_offset",
                 "store_timestamp", "count", "_uniq_keys", "error_code", "reason")

    def __init__(self, status, topic="", msg_ids=(), queue_id=-1, queue_offset=-1, phys_offset=-1,
                 store_timestamp=0, count=0, uniq_keys=(), error_code=None, reason=""):
        self.status = status
        self.topic = topic
        # a list, or OffsetIds made into one on first use
        self._msg_ids = msg_ids if msg_ids.__class__ in (list, OffsetIds) else list(msg_ids)
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.phys_offset = phys_offset
        self.store_timestamp = store_timestamp
        self.count = count
        self._uniq_keys = uniq_keys    # a list, or a core.record.key_block.KeyBlock split on first use
        self.error_code = error_code
        self.reason = reason

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def msg_ids(self) -> list:
        return self._listed("_msg_ids", OffsetIds, OffsetIds.ids)

    @property
    def msg_id(self) -> str:
        return self.msg_ids[0] if self.msg_ids else ""

    @property
    def uniq_keys(self) -> list:
        return self._listed("_uniq_keys", KeyBlock, KeyBlock.keys)

    def _listed(self, slot: str, lazy: type, make) -> list:
        """The list kept in `slot`, made from its `lazy` form (`make(lazy)`) on first use."""
        value = getattr(self, slot)
        if value.__class__ is lazy:
            value = make(value)
            setattr(self, slot, value)
        return value

    @property
    def uniq_key(self) -> str:
        return self.uniq_keys[0] if self.uniq_keys else ""

    def __repr__(self) -> str:
        extra = f", error={self.error_code!r}, reason={self.reason!r}" \
            if self.error_code or self.reason else ""
        return (f"SendResult({self.status.name}, msg_id={self.msg_id!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, phys_offset={self.phys_offset}, count={self.count}{extra})")


class MessageResult(SendResult):
    """Message `i` of a stored batch: a SendResult read from its batch's (`whole`) on demand, so
    that an auto-batched message costs one small object instead of a SendResult, an OffsetIds,
    a slice and a key string each (ipc/accumulator.py `results`). `keys`: the batch's UNIQ_KEYs
    as a KeyBlock or a list."""

    __slots__ = ("_whole", "_i", "_keys")

    def __init__(self, whole: SendResult, i: int, keys):   # noqa: the base's slots are not used
        self._whole = whole
        self._i = i
        self._keys = keys

    status = property(lambda self: self._whole.status)
    topic = property(lambda self: self._whole.topic)
    queue_id = property(lambda self: self._whole.queue_id)
    store_timestamp = property(lambda self: self._whole.store_timestamp)
    count = property(lambda self: 1)
    error_code = property(lambda self: None)
    reason = property(lambda self: "")

    @property
    def ok(self) -> bool:
        return self._whole.status is PutMessageStatus.PUT_OK

    @property
    def queue_offset(self) -> int:
        return self._whole.queue_offset + self._i

    @property
    def _offsets(self):
        ids = self._whole._msg_ids
        return ids if ids.__class__ is OffsetIds and len(ids) > self._i else None

    @property
    def phys_offset(self) -> int:
        ids = self._offsets
        if ids is None:
            return self._whole.phys_offset if self._i == 0 else -1
        return int.from_bytes(ids.offsets[8 * self._i:8 * self._i + 8], "big", signed=True)

    @property
    def msg_ids(self) -> list:
        ids, i = self._offsets, self._i
        if ids is not None:
            return message_ids(ids.host, ids.offsets[8 * i:8 * i + 8])
        return self._whole.msg_ids[i:i + 1]

    @property
    def uniq_keys(self) -> list:
        keys, i = self._keys, self._i
        if keys.__class__ is KeyBlock:
            w = keys.width
            return [keys.data[i * w:(i + 1) * w].decode("ascii")]
        return [keys[i]]


def parse_send_reply(env: dict, topic: str, uniq_keys) -> SendResult:
    """A SendResult from a `put` or `put_batch` reply (an error reply becomes a status)."""
    status = env.get("status")
    if status == ERROR:
        code = _error_code(env.get("code"))
        return SendResult(_ERROR_STATUS.get(code, PutMessageStatus.MESSAGE_ILLEGAL), topic,
                          uniq_keys=uniq_keys, error_code=code, reason=str(env.get("reason", "")))
    st = _PUT_STATUSES.get(status) if status.__class__ is str else None
    if st is None:
        return SendResult(PutMessageStatus.UNKNOWN_ERROR, topic, uniq_keys=uniq_keys,
                          reason=f"unexpected status {status!r}")
    if st is not PutMessageStatus.PUT_OK and "reason" in env:   # a refusal that says why
        return SendResult(st, topic, uniq_keys=uniq_keys, error_code=_error_code(env.get("code")),
                          reason=str(env["reason"]))
    ids = env.get("msg_ids")
    if ids is None:
        offsets = env.get("phys_offsets")
        if offsets.__class__ is bytes and len(offsets) % 8 == 0:   # id_format "offsets"
            ids = OffsetIds(env.get("store_host"), offsets)
        else:
            ids = [env["msg_id"]] if env.get("msg_id") else []
    return SendResult(st, topic, ids, env.get("queue_id", -1), env.get("queue_offset", -1),
                      env.get("phys_offset", -1), env.get("store_timestamp", 0),
                      env.get("count", len(ids)), uniq_keys)


class OffsetIds:
    """A batch reply's `store_host` and `phys_offsets` (docs/PROTOCOL.md, `id_format`): the
    offset message ids, made when `SendResult.msg_ids` is first read."""

    __slots__ = ("host", "offsets")

    def __init__(self, host, offsets: bytes):
        self.host = host if host.__class__ is bytes else b""
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) // 8 if self.host else 0

    def ids(self) -> list:
        """One id per record (core.record.message.message_ids)."""
        return message_ids(self.host, self.offsets)


def _error_code(code):
    """The ErrorCode of a reply's `code` (None when absent; the number when unknown)."""
    if code is None:
        return None
    try:
        return ErrorCode(code)
    except ValueError:
        return code
