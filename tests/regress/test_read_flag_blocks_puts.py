"""Regression: `put_message` refused every put with SERVICE_NOT_AVAILABLE when any running
flag was set, including NOT_READABLE, which in RocketMQ stops reads only (isWriteable
ignores it); `put_messages` followed the rule correctly."""
from core.record.message import Message
from core.running_flags import NOT_READABLE


def test_not_readable_store_still_takes_puts(store):
    store.flags.set(NOT_READABLE)
    assert store.put_message(Message("T", b"x")).ok
    assert store.put_messages([Message("T", b"y")]).ok
    assert store.get_message("g", "T", 0, 0, 1) is None
