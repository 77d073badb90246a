"""A delayed put (a delay level or a timer) rewritten before it is encoded (RocketMQ 4's CommitLog.asyncPutMessage, 5's
HookUtils.handleScheduleMessage): the one place both put paths (core.MessageStore.put_message
and the appender's put) turn a message with a delay level into the record the scheduler
(core.delay.schedule) delivers later.

A message whose `DELAY` property is a level above 0, and that is not a prepared or rolled-back
transaction, is stored in `SCHEDULE_TOPIC_XXXX`, queue `level - 1`, with `REAL_TOPIC` and
`REAL_QID` holding its topic and queue; a level above the configured maximum is taken as the
maximum and written back as such, as RocketMQ does. Dispatch then gives its consume-queue entry
the delivery time as tag code (core.record.codec). The caller's message is never changed: the rewrite
is a copy.

A timer message (RocketMQ 5): `TIMER_DELIVER_MS` (an absolute time in ms), else
`TIMER_DELAY_SEC`, else `TIMER_DELAY_MS` (from now), is stored in `rmq_sys_wheel_timer`, queue
0, with REAL_TOPIC, REAL_QID and `TIMER_OUT_MS` (its delivery time), for the timer job
(core.delay.timer_job); a timer wins over a DELAY level. A delivery time more than
`timer_max_delay_sec` ahead is refused (MESSAGE_ILLEGAL; RocketMQ 5 answers its
WHEEL_TIMER_MSG_ILLEGAL), one not in the future is stored as a plain message at once, and a
value that is not an integer is refused.

Decisions beyond RocketMQ:
- A `DELAY` that is not an integer is refused (MESSAGE_ILLEGAL); RocketMQ's parseInt would
  fail the put with a system error. A level of 0 or below means no delay, as RocketMQ's.
- A message already addressed to SCHEDULE_TOPIC_XXXX or the timer topic is stored as it is (a RocketMQ broker's
  own delay record, a replay of a store's log): rewriting it would lose its REAL_TOPIC.
- Batches take no delay level (MESSAGE_ILLEGAL, RocketMQ's rule); the batch encoders refuse
  them, so only single puts come here.
"""
from __future__ import annotations

import copy
import time

from core.record.codec import SCHEDULE_TOPIC
from core.record.message import PROPERTY_DELAY, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_UNQUEUED, Message
from core.status import PutMessageStatus, refuse

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
TIMER_TOPIC = "rmq_sys_wheel_timer"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
# The timer properties a producer sets, in the order they are looked at, and their unit in ms
# (None: an absolute time).
TIMER_PROPERTIES = (("TIMER_DELIVER_MS", None), ("TIMER_DELAY_SEC", 1000), ("TIMER_DELAY_MS", 1))
_TIMERS = frozenset(name for name, _ in TIMER_PROPERTIES)
_ASKS = _TIMERS | {PROPERTY_DELAY}


def delay_rules(config) -> tuple:
    """What `delayed_put` needs of a StoreConfig: (delay levels in ms, timer limit in ms)."""
    return config.delay_levels_ms, config.timer_max_delay_sec * 1000


def level_of(value) -> int | None:
    """The delay level a DELAY property value asks for (0 or below: none), None when it is
    not an integer."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def timer_deliver_ms(props, now: int):
    """The delivery time a message's timer properties ask for; None without any; -1 when a
    value is not an integer."""
    for name, unit in TIMER_PROPERTIES:
        if name in props:
            value = level_of(props[name])
            if value is None:
                return -1
            return value if unit is None else now + value * unit
    return None


def delayed_put(msg, rules: tuple):
    """`msg` as the store is to keep it: itself when it is not delayed, a copy addressed to its
    delay queue or the timer topic when it is, or the PutMessageStatus refusing it (module
    docstring). `rules`: `delay_rules(config)`."""
    props = msg.properties
    if not props or _ASKS.isdisjoint(props) or msg.topic in (SCHEDULE_TOPIC, TIMER_TOPIC) \
            or (msg.sys_flag & SYSFLAG_TRANSACTION_MASK) in SYSFLAG_TRANSACTION_UNQUEUED:
        return msg
    levels_ms, timer_max_ms = rules
    now = time.time_ns() // 1_000_000 if not _TIMERS.isdisjoint(props) else 0
    deliver = timer_deliver_ms(props, now) if now else None
    if deliver is not None:
        if deliver < 0 or deliver - now > timer_max_ms:
            return refuse(PutMessageStatus.MESSAGE_ILLEGAL, "a timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC, "
                          "TIMER_DELAY_MS) must be an integer and at most timer_max_delay_sec ahead")
        if deliver <= now:
            return msg
        return _addressed(msg, TIMER_TOPIC, 0, {PROPERTY_TIMER_OUT_MS: str(deliver)})
    if PROPERTY_DELAY not in props:
        return msg
    level = level_of(props[PROPERTY_DELAY])
    if level is None:
        return refuse(PutMessageStatus.MESSAGE_ILLEGAL, "a delay level (property DELAY) must be an integer")
    if level <= 0:
        return msg
    level = min(level, len(levels_ms))
    return _addressed(msg, SCHEDULE_TOPIC, level - 1, {PROPERTY_DELAY: str(level)})


def _addressed(msg, topic: str, queue_id: int, extra: dict):
    """A copy of `msg` in `topic`/`queue_id`, its own topic and queue in REAL_TOPIC/REAL_QID."""
    props = {**msg.properties, **extra, PROPERTY_REAL_TOPIC: msg.topic,
             PROPERTY_REAL_QID: str(msg.queue_id)}
    if msg.__class__ is Message:                   # the usual: no copy protocol to go through
        return Message(topic, msg.body, queue_id, msg.flag, msg.tags, msg.keys, props,
                       msg.born_timestamp, msg.born_host, msg.store_host, msg.sys_flag,
                       msg.reconsume_times, msg.prepared_transaction_offset)
    out = copy.copy(msg)
    out.properties, out.topic, out.queue_id = props, topic, queue_id
    return out
