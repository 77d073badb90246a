"""The reason beside a refused put names the rule the message breaks (core.put_refusal)."""
from hypothesis import given, strategies as st

from core.record.batch_encode import prepare_batch_records
from core.record.codec import prepare_record
from core.record.message import Message
from core.put_refusal import FALLBACK, refusal_reason
from core.status import PutMessageStatus

MAX = 4096


def refused(msg):
    status = prepare_record(msg, MAX)
    assert status.__class__ is PutMessageStatus, status
    return refusal_reason([msg], status, MAX, batch=False)


def test_each_rule_is_named():
    assert "\\x01 or \\x02" in refused(Message("T", b"x", keys="a\x01b"))
    assert refused(Message("T", b"x", tags="t\x02")).startswith("the tags holds")
    assert "property 'p'" in refused(Message("T", b"x", properties={"p": "v\x01"}))
    assert "body is 4097 bytes, over max_message_size 4096" in refused(Message("T", b"x" * 4097))
    assert "over 32767" in refused(Message("T", b"x", properties={"p": "v" * 40_000}))
    assert refused(Message("T", b"x", flag=1 << 40)) == FALLBACK


def test_a_batch_names_the_message():
    bodies = [b"a", b"b", b"c"]
    keys = ["k0", "k\x021", "k2"]
    template = Message("T", b"")
    status = prepare_batch_records(template, bodies, MAX, None, keys)
    assert status is PutMessageStatus.MESSAGE_ILLEGAL
    assert refusal_reason([template], status, MAX, True, bodies, keys).startswith(
        "message 1 of the batch: the UNIQ_KEY holds")
    delayed = [Message("T", b"a"), Message("T", b"b", properties={"DELAY": "3"})]
    assert refusal_reason(delayed, PutMessageStatus.MESSAGE_ILLEGAL, MAX, True).startswith(
        "message 1 of the batch: a batch takes no delay level")


@given(st.sampled_from(["tags", "keys", "value", "name"]), st.text(max_size=8), st.sampled_from("\x01\x02"))
def test_a_separator_anywhere_is_named(where, text, sep):
    bad = text + sep + text
    msg = Message("T", b"x", **({"properties": {"p": bad}} if where == "value" else
                                {"properties": {bad: "v"}} if where == "name" else {where: bad}))
    assert "the separators of RocketMQ's property string" in refused(msg)
