"""mqstore's storage engine as a library: RocketMQ's CommitLog, consume queues, index,
checkpoint and recovery, usable in one process through `MessageStore`."""
from core.config import ConfigError, StoreConfig, StoreFormatError
from core.record.message import Message, MessageExt
from core.status import (
    AppendMessageResult, GetMessageResult, GetMessageStatus, PutMessageResult, PutMessageStatus,
    QueryMessageResult,
)


def __getattr__(name):
    # MessageStore pulls in every engine module; load it on first use.
    if name == "MessageStore":
        from core.store import MessageStore
        return MessageStore
    raise AttributeError(name)


__all__ = [
    "AppendMessageResult", "ConfigError", "GetMessageResult", "GetMessageStatus", "Message",
    "MessageExt", "MessageStore", "PutMessageResult", "PutMessageStatus", "QueryMessageResult",
    "StoreConfig", "StoreFormatError",
]
