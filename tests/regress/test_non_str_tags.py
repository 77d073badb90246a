"""TAGS that is not a str was refused (MESSAGE_ILLEGAL) for a message without properties but
raised AttributeError out of `prepare_record` (and so out of `put_message`) for one with
properties: the tag hash was taken outside the check. Both are refused now."""
from core.record.codec import prepare_record
from core.record.message import Message
from core.status import PutMessageStatus


def test_non_str_tags_refused_with_or_without_properties():
    for props in ({}, {"a": "b"}):
        msg = Message("T", b"x", tags=7, properties=props)
        assert prepare_record(msg, 1024) is PutMessageStatus.MESSAGE_ILLEGAL
