"""Why the store refused a put: the words that go with a MESSAGE_ILLEGAL or
PROPERTIES_SIZE_EXCEEDED status.

The encoders (`core.record.codec`, `core.record.batch_encode`) answer with a status only: they are the put's
hot path. When they refuse, `refusal_reason` looks at the messages again and names the first
rule one of them breaks, so that a client learns what to change. It runs only for refused
puts, so it may be slow and plain.
"""
from __future__ import annotations

import dataclasses

from core.record.codec import MAX_PROPERTIES_BYTES, _properties_string
from core.record.key_block import key_list
from core.record.message import KEY_SEPARATOR, PROPERTY_UNIQ_KEY, SYSFLAG_TRANSACTION_MASK, has_delay_level
from core.status import PutMessageStatus

SEPARATORS = ("\x01", "\x02")
FALLBACK = ("a field is out of its Java range (flag, sys_flag, reconsume_times, born_timestamp, "
            "prepared_transaction_offset) or a host is not ip:port")


def refusal_reason(messages: list, status: PutMessageStatus, max_message_size: int, batch: bool,
                   bodies: list | None = None, uniq_keys=None) -> str:
    """The first rule the put breaks. `messages` are the put's messages; or, with `bodies`, one
    template message whose records differ only in body and (with `uniq_keys`, a list of
    strings or a `core.record.key_block.KeyBlock`) UNIQ_KEY."""
    if bodies is not None:
        template = messages[0]
        keys = key_list(uniq_keys) if uniq_keys is not None else [None] * len(bodies)
        items = [(template, body, key) for body, key in zip(bodies, keys)]
    else:
        items = [(m, m.body, None) for m in messages]
    for i, (msg, body, uniq_key) in enumerate(items):
        where = f"message {i} of the batch: " if batch else ""
        problem = message_problem(msg, body, uniq_key, max_message_size, batch)
        if problem:
            return where + problem
    if status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED:
        return f"the properties are over {MAX_PROPERTIES_BYTES} bytes"
    return FALLBACK


def message_problem(msg, body, uniq_key, max_message_size: int, batch: bool) -> str | None:
    """The first rule one message breaks (None: none), the same rules the store applies: the
    auto-batching producer (ipc/accumulator.py) asks it to send such a message on its own."""
    if batch and has_delay_level(msg.properties):
        return "a batch takes no delay level (property DELAY) and no timer, as RocketMQ's"
    if batch and msg.sys_flag & SYSFLAG_TRANSACTION_MASK:
        return "a batch takes no transaction message, as RocketMQ's"
    if len(body) > max_message_size:
        return f"the body is {len(body)} bytes, over max_message_size {max_message_size}"
    for what, text in _texts(msg, uniq_key):
        if any(s in text for s in SEPARATORS):
            return (f"{what} holds \\x01 or \\x02, the separators of RocketMQ's property string; "
                    "they may not appear in tags, keys or properties")
    size = _properties_bytes(msg, uniq_key)
    if size is not None and size > MAX_PROPERTIES_BYTES:
        return f"the properties are {size} bytes, over {MAX_PROPERTIES_BYTES}"
    if not batch and has_delay_level(msg.properties):
        return ("a timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) must be an integer "
                "and at most timer_max_delay_sec ahead; a delay level (DELAY) an integer")
    return None


def _properties_bytes(msg, uniq_key) -> int | None:
    """The length of the record's property string, as the encoder builds it (None: it cannot)."""
    if uniq_key is not None:
        msg = dataclasses.replace(msg, properties={**(msg.properties or {}), PROPERTY_UNIQ_KEY: uniq_key})
    try:
        return len(_properties_string(msg)[0].encode("utf-8", "surrogatepass"))
    except (TypeError, AttributeError):
        return None


def _texts(msg, uniq_key) -> list:
    """(what, text) of every string that goes into the record's topic and property string."""
    out = [("the topic", msg.topic)]
    if msg.tags:
        out.append(("the tags", str(msg.tags)))
    keys = msg.keys
    if keys:
        out.append(("the keys", keys if isinstance(keys, str) else KEY_SEPARATOR.join(map(str, keys))))
    for name, value in (msg.properties or {}).items():
        if value is not None and not (uniq_key is not None and name == PROPERTY_UNIQ_KEY):
            out += [(f"property name {name!r}", str(name)), (f"property {name!r}", str(value))]
    if uniq_key is not None:
        out.append(("the UNIQ_KEY", str(uniq_key)))
    return out
