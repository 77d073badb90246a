"""A delayed put rewritten before it is encoded (RocketMQ 4's CommitLog.asyncPutMessage, 5's
HookUtils.handleScheduleMessage): the one place both put paths (core.MessageStore.put_message
and the appender's put) turn a message with a delay level into the record the scheduler
(core.schedule) delivers later.

A message whose `DELAY` property is a level above 0, and that is not a prepared or rolled-back
transaction, is stored in `SCHEDULE_TOPIC_XXXX`, queue `level - 1`, with `REAL_TOPIC` and
`REAL_QID` holding its topic and queue; a level above the configured maximum is taken as the
maximum and written back as such, as RocketMQ does. Dispatch then gives its consume-queue entry
the delivery time as tag code (core.codec). The caller's message is never changed: the rewrite
is a copy.

Decisions beyond RocketMQ:
- A `DELAY` that is not an integer is refused (MESSAGE_ILLEGAL); RocketMQ's parseInt would
  fail the put with a system error. A level of 0 or below means no delay, as RocketMQ's.
- A message already addressed to SCHEDULE_TOPIC_XXXX is stored as it is (a RocketMQ broker's
  own delay record, a replay of a store's log): rewriting it would lose its REAL_TOPIC.
- Batches take no delay level (MESSAGE_ILLEGAL, RocketMQ's rule); the batch encoders refuse
  them, so only single puts come here.
"""
from __future__ import annotations

import copy

from core.codec import SCHEDULE_TOPIC
from core.message import PROPERTY_DELAY, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED
from core.status import PutMessageStatus

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"


def level_of(value) -> int | None:
    """The delay level a DELAY property value asks for (0 or below: none), None when it is
    not an integer."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def delayed_put(msg, levels_ms: tuple):
    """`msg` as the store is to keep it: itself when it is not delayed, a copy addressed to its
    delay queue when it is, or the PutMessageStatus refusing it (module docstring)."""
    props = msg.properties
    if not props or PROPERTY_DELAY not in props:
        return msg
    level = level_of(props[PROPERTY_DELAY])
    if level is None:
        return PutMessageStatus.MESSAGE_ILLEGAL
    if level <= 0 or msg.topic == SCHEDULE_TOPIC \
            or (msg.sys_flag & SYSFLAG_TRANSACTION_MASK) in SYSFLAG_TRANSACTION_UNQUEUED:
        return msg
    level = min(level, len(levels_ms))
    out = copy.copy(msg)
    out.properties = {**props, PROPERTY_DELAY: str(level), PROPERTY_REAL_TOPIC: msg.topic,
                      PROPERTY_REAL_QID: str(msg.queue_id)}
    out.topic = SCHEDULE_TOPIC
    out.queue_id = level - 1
    return out
