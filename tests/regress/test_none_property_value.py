"""Regression: a property whose value is None was refused as MESSAGE_ILLEGAL.

`properties_to_string` skips None values (as RocketMQ skips nulls), but the separator check
in `prepare_record` counted every pair of the map, so the counts never matched.
"""
from core.record.codec import encode_message, prepare_record
from core.record.decode import decode_message
from core.record.message import Message
from core.status import PutMessageStatus


def test_none_valued_property_is_skipped_not_refused():
    msg = Message("T", b"body", properties={"gone": None, "kept": "1"}, tags="A")
    rec = prepare_record(msg, 1024)
    assert not isinstance(rec, PutMessageStatus)
    decoded = decode_message(encode_message(msg))
    assert decoded.properties == {"kept": "1"}
    assert decoded.tags == "A"


def test_separator_inside_a_value_is_still_refused():
    msg = Message("T", b"body", properties={"gone": None, "bad": "a\x01b"})
    assert prepare_record(msg, 1024) is PutMessageStatus.MESSAGE_ILLEGAL


def test_put_through_the_store(store):
    r = store.put_message(Message("T", b"body", properties={"gone": None}))
    assert r.ok
