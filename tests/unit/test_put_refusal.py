"""The reason beside a refused put names the rule the message breaks, said by the check that
refuses it (core.record.refusal, core.status.take_reason)."""
from hypothesis import given, strategies as st

from core.record.batch_encode import prepare_batch_records, prepare_each
from core.record.codec import prepare_record
from core.record.message import Message
from core.record.refusal import FALLBACK
from core.status import PutMessageStatus, take_reason

MAX = 4096


def refused(msg):
    status = prepare_record(msg, MAX)
    assert status.__class__ is PutMessageStatus, status
    return take_reason()


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
    assert take_reason().startswith(
        "message 1 of the batch: the UNIQ_KEY holds")
    delayed = [Message("T", b"a"), Message("T", b"b", properties={"DELAY": "3"})]
    assert prepare_each(delayed, MAX) is PutMessageStatus.MESSAGE_ILLEGAL
    assert take_reason().startswith(
        "message 1 of the batch: a batch takes no delay level")


@given(st.sampled_from(["tags", "keys", "value", "name"]), st.text(max_size=8), st.sampled_from("\x01\x02"))
def test_a_separator_anywhere_is_named(where, text, sep):
    bad = text + sep + text
    msg = Message("T", b"x", **({"properties": {"p": bad}} if where == "value" else
                                {"properties": {bad: "v"}} if where == "name" else {where: bad}))
    assert "the separators of RocketMQ's property string" in refused(msg)


def test_the_embedded_stores_result_carries_the_reason(open_store, tiny_config):
    store = open_store(tiny_config())
    r = store.put_message(Message("T", b"x", tags="t\x01"))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.reason.startswith("the tags holds")
    r = store.put_messages([Message("T", b"a"), Message("T", b"b" * (MAX * 1024))])
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "max_message_size" in r.reason
    r = store.put_messages([Message("T", b"a"), Message("T", b"b", keys="k\x02")])
    assert r.reason.startswith("message 1 of the batch: the keys holds")
    r = store.put_message(Message("T", b"x", properties={"DELAY": "soon"}))
    assert "delay level (property DELAY) must be an integer" in r.reason
    assert store.put_message(Message("T", b"fine")).reason == ""
    assert take_reason() == ""                   # taken once, by the store


def test_a_record_or_batch_over_a_segment_says_so(open_store, tiny_config):
    store = open_store(tiny_config())           # 16 KiB segments, max_message_size 4 MiB
    size = store.commitlog.file_size
    r = store.put_message(Message("T", b"x" * size))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert r.reason == f"the record would not fit in a CommitLog segment of {size} bytes (mapped_file_size_commitlog)"
    r = store.put_messages([Message("T", b"b" * 4000) for _ in range(5)])
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and r.reason.startswith("the batch would not fit")
