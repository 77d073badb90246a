"""Whether the store would refuse a message on its own, asked before it is sent: the
auto-batching producer (ipc/accumulator.py) sends such a message alone, so that the store's
own status and reason come back for it and no other message shares its fate.

The store does not use this to explain a refusal: its encoders say why where they refuse
(`core.record.refusal`, `core.status.refuse`). These are the same rules in the words of
`core.record.refusal`, checked on a `core.record.message.Message` before it is encoded.
"""
from __future__ import annotations

import dataclasses

from core.record import refusal as why
from core.record.codec import MAX_PROPERTIES_BYTES, _properties_string
from core.record.message import PROPERTY_UNIQ_KEY, SYSFLAG_TRANSACTION_MASK, has_delay_level


def message_problem(msg, body, uniq_key, max_message_size: int, batch: bool) -> str | None:
    """The first rule one message breaks (None: none), the same rules the store applies."""
    if batch and has_delay_level(msg.properties):
        return why.BATCH_DELAY
    if batch and msg.sys_flag & SYSFLAG_TRANSACTION_MASK:
        return why.BATCH_TRANSACTION
    if len(body) > max_message_size:
        return why.body_too_large(len(body), max_message_size)
    for what, text in why.texts(msg, uniq_key):
        if any(s in text for s in why.SEPARATORS):
            return why.separator_in(what)
    if uniq_key is not None:
        msg = dataclasses.replace(msg, properties={**(msg.properties or {}), PROPERTY_UNIQ_KEY: uniq_key})
    try:
        size = len(_properties_string(msg)[0].encode("utf-8", "surrogatepass"))
    except (TypeError, AttributeError):
        size = None
    if size is not None and size > MAX_PROPERTIES_BYTES:
        return why.properties_too_large(size, MAX_PROPERTIES_BYTES)
    if not batch and has_delay_level(msg.properties):
        return ("a timer (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) must be an integer "
                "and at most timer_max_delay_sec ahead; a delay level (DELAY) an integer")
    return None
