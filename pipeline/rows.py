"""The rows the `mqstore` Spark data source reads: their schema, and one row per message.

Every read (the CommitLog files in batch, the consume queues of a running store in streaming)
gives the same columns, named as `core.MessageExt` names its fields, with RocketMQ's
millisecond timestamps as Spark timestamps (UTC) and hosts as "ip:port" text:

    topic, queue_id, queue_offset, phys_offset, msg_id, tags, keys, properties, body,
    born_timestamp, store_timestamp, born_host, store_host, flag, sys_flag, reconsume_times

`keys` is the KEYS property as stored (keys separated by a space); `properties` holds the
other properties (UNIQ_KEY among them), TAGS and KEYS having columns of their own.
"""
from __future__ import annotations

import datetime

from ipc.received import host_text

SCHEMA = ("topic string, queue_id int, queue_offset long, phys_offset long, msg_id string, "
          "tags string, keys string, properties map<string,string>, body binary, "
          "born_timestamp timestamp, store_timestamp timestamp, born_host string, "
          "store_host string, flag int, sys_flag int, reconsume_times int")
COLUMNS = tuple(part.split()[0] for part in SCHEMA.split(", "))

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)


def timestamp(ms: int) -> datetime.datetime:
    """RocketMQ's milliseconds since the epoch as an aware UTC datetime (exact, no float)."""
    return _EPOCH + ms * _MS


def message_row(m) -> tuple:
    """The row of a message: a core.MessageExt, or an ipc.received.ReceivedMessage (the same
    attribute names)."""
    keys = m.keys
    if keys is not None and not isinstance(keys, str):
        keys = " ".join(keys)
    return (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id, m.tags, keys,
            dict(m.properties), bytes(m.body), timestamp(m.born_timestamp),
            timestamp(m.store_timestamp), host_text(m.born_host), host_text(m.store_host),
            m.flag, m.sys_flag, m.reconsume_times)
