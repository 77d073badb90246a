"""Why the store refused a put: the words that go with a MESSAGE_ILLEGAL or
PROPERTIES_SIZE_EXCEEDED status.

The encoders (`core.codec`, `core.batch_encode`) answer with a status only: they are the put's
hot path. When they refuse, `refusal_reason` looks at the messages again and names the first
rule one of them breaks, so that a client learns what to change. It runs only for refused
puts, so it may be slow and plain.
"""
from __future__ import annotations

from core.codec import MAX_PROPERTIES_BYTES
from core.message import (
    KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, SYSFLAG_TRANSACTION_MASK,
    has_delay_level,
)
from core.status import PutMessageStatus

SEPARATORS = ("\x01", "\x02")
FALLBACK = ("a field is out of its Java range (flag, sys_flag, reconsume_times, born_timestamp, "
            "prepared_transaction_offset) or a host is not ip:port")


def refusal_reason(messages: list, status: PutMessageStatus, max_message_size: int, batch: bool,
                   bodies: list | None = None, uniq_keys: list | None = None) -> str:
    """The first rule the put breaks. `messages` are the put's messages; or, with `bodies`, one
    template message whose records differ only in body and (with `uniq_keys`) UNIQ_KEY."""
    if bodies is not None:
        template = messages[0]
        keys = uniq_keys if uniq_keys is not None else [None] * len(bodies)
        items = [(template, body, key) for body, key in zip(bodies, keys)]
    else:
        items = [(m, m.body, None) for m in messages]
    for i, (msg, body, uniq_key) in enumerate(items):
        where = f"message {i} of the batch: " if batch else ""
        problem = _problem(msg, body, uniq_key, max_message_size, batch)
        if problem:
            return where + problem
    if status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED:
        return f"the properties are over {MAX_PROPERTIES_BYTES} bytes"
    return FALLBACK


def _problem(msg, body, uniq_key, max_message_size: int, batch: bool) -> str | None:
    if batch and has_delay_level(msg.properties):
        return "a batch takes no delay level (property DELAY), as RocketMQ's"
    if batch and msg.sys_flag & SYSFLAG_TRANSACTION_MASK:
        return "a batch takes no transaction message, as RocketMQ's"
    if len(body) > max_message_size:
        return f"the body is {len(body)} bytes, over max_message_size {max_message_size}"
    texts = _texts(msg, uniq_key)
    for what, text in texts:
        if any(s in text for s in SEPARATORS):
            return (f"{what} holds \\x01 or \\x02, the separators of RocketMQ's property string; "
                    "they may not appear in tags, keys or properties")
    props = sum(len(t.encode("utf-8", "surrogatepass")) + 1 for what, t in texts if what != "the topic")
    if props > MAX_PROPERTIES_BYTES:
        return f"the properties are {props} bytes, over {MAX_PROPERTIES_BYTES}"
    return None


def _texts(msg, uniq_key) -> list:
    """(what, text) of every string that goes into the record's topic and property string."""
    out = [("the topic", msg.topic)]
    if msg.tags:
        out += [("the tags", str(msg.tags)), ("", PROPERTY_TAGS)]
    keys = msg.keys
    if keys:
        out += [("the keys", keys if isinstance(keys, str) else KEY_SEPARATOR.join(map(str, keys))),
                ("", PROPERTY_KEYS)]
    for name, value in (msg.properties or {}).items():
        if value is not None and not (uniq_key is not None and name == PROPERTY_UNIQ_KEY):
            out += [(f"property name {name!r}", str(name)), (f"property {name!r}", str(value))]
    if uniq_key is not None:
        out += [("the UNIQ_KEY", str(uniq_key)), ("", PROPERTY_UNIQ_KEY)]
    return out
