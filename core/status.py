"""Status enums and result objects of the put and get paths, with RocketMQ's names.

Statuses travel on the hot path instead of exceptions (STYLE.md): a caller always gets
one of these, never a raised error, for anything a client could cause. The status enums
are `StrEnum`s: a member is its RocketMQ name (`status == "PUT_OK"`, `str(status)`), as the
wire protocol and the CLI print it, and still compares by identity.

A refused put also says why: the check that refuses it names the message and the rule
(`refuse`), and the result that answers the put carries that reason beside the status
(`PutMessageResult.reason`, the `reason` of the appender's reply). The encoders answer with
the bare status, which their callers test with one `is`; the reason waits, for the thread
that asked, until the caller takes it (`take_reason`), right after the refusal.
"""
from __future__ import annotations

import enum
from functools import lru_cache
import threading
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

from core.record.message import message_ids


class PutMessageStatus(enum.StrEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPPED_FILE_FAILED"    # RocketMQ 4's spelling: the same member
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    OS_PAGE_CACHE_BUSY = "OS_PAGECACHE_BUSY"     # RocketMQ 5's spelling: the same member
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def ok(self) -> bool:
        return self is PutMessageStatus.PUT_OK


_REFUSAL = threading.local()     # .reason: the reason of this thread's last refusal


def refuse(status: PutMessageStatus, reason: str) -> PutMessageStatus:
    """`status`, with `reason` (which message, which rule) kept for `take_reason`: a check
    that refuses a put returns `refuse(status, why)` where it found what is wrong."""
    _REFUSAL.reason = reason
    return status


def take_reason() -> str:
    """The reason of the refusal this thread was just answered with ("" if none), once."""
    reason = getattr(_REFUSAL, "reason", "")
    _REFUSAL.reason = ""
    return reason


class AppendMessageStatus(enum.StrEnum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.StrEnum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    # Ours (integrity, DESIGN.md section 7): the record at next_begin_offset - 1 is damaged and
    # was not served; `reason` says how. The pull goes on at next_begin_offset.
    MESSAGE_DAMAGED = "MESSAGE_DAMAGED"


@lru_cache(maxsize=256)       # batch shapes repeat (core.record.batch_encode keeps 128)
def _starts(record_sizes: tuple) -> np.ndarray:
    """Each record's offset from the first, for records of `record_sizes` back to back."""
    starts = np.zeros(len(record_sizes), np.int64)
    np.cumsum(record_sizes[:-1], out=starts[1:])
    return starts


class AppendMessageResult(namedtuple("AppendMessageResult", (
        "status", "wrote_offset", "wrote_bytes", "store_timestamp", "logics_offset", "msg_num",
        "store_host", "record_sizes"), defaults=(0, 0, 0, 0, 1, b"", ()))):
    """What the CommitLog reports for one appended message or batch. A tuple, so that the
    append path makes it with one C call (`new_result`); message ids are made on first use
    from the store host and the records' offsets (most callers never read them)."""
    __slots__ = ()

    @property
    def next_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes

    def offsets_hex(self) -> str:
        """Each record's physical offset as int64 in 16 upper-case hex digits, separated by
        single spaces: one array and one hex call for a batch of any size. The records'
        offsets from the first are kept for the `record_sizes` tuples seen last (a batch
        shape's sizes are one tuple, `core.record.batch_encode`), so a batch of a shape seen before
        adds its first offset with one numpy call."""
        return self.offsets_bytes().hex(" ", 8).upper()

    def offsets_bytes(self) -> bytes:
        """Each record's physical offset as a big-endian int64, back to back."""
        return (_starts(tuple(self.record_sizes) or (0,)) + self.wrote_offset).astype(">i8").tobytes()

    @property
    def msg_ids(self) -> list:
        """One offset message id (store host, then physical offset) per record."""
        if not self.store_host:
            return []
        if len(self.record_sizes) <= 1:                 # a single put: no array needed
            return [(self.store_host + self.wrote_offset.to_bytes(8, "big", signed=True)).hex().upper()]
        return message_ids(self.store_host, self.offsets_bytes())

    @property
    def msg_id(self) -> str:
        """The offset message id; comma-joined for a batch, as RocketMQ does."""
        return ",".join(self.msg_ids)


class PutMessageResult(namedtuple("PutMessageResult", ("status", "append_result", "reason"),
                                  defaults=(None, ""))):
    """A put's answer: its status, once appended the AppendMessageResult, and when refused
    the reason (which message breaks which rule)."""
    __slots__ = ()

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


# The results as the put path makes them: `new_result(AppendMessageResult, (all eight
# fields))`, `new_result(PutMessageResult, (status, append_result, ""))`, without a Python call.
new_result = tuple.__new__


@dataclass(slots=True)
class GetMessageResult:
    """A pull's answer. `buffers` are the raw records; `messages` decodes them on demand."""
    status: GetMessageStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    buffers: list = field(default_factory=list)
    queue_offsets: list = field(default_factory=list)
    _messages: list | None = None
    reason: str = ""             # with MESSAGE_DAMAGED: what is wrong with the record

    @property
    def messages(self) -> list:
        if self._messages is None:
            from core.record.decode import pulled_messages
            self._messages = pulled_messages(self.buffers)
        return self._messages

    @property
    def message_count(self) -> int:
        return len(self.buffers)


@dataclass(slots=True)
class QueryMessageResult:
    messages: list = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
