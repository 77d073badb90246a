"""core.record.codec.prepare_batch, the appender's fast path for a batch sent without per-message
fields: every record it prepares is the one prepare_record would have prepared, and it refuses
what prepare_record refuses."""
from __future__ import annotations

import dataclasses

import pytest

from core.record.codec import PreparedRecord, prepare_batch, prepare_record
from core.record.message import Message, host_to_bytes
from core.status import PutMessageStatus

STORE_HOST = host_to_bytes(("127.0.0.1", 10911))[0]


def template(**fields):
    return dataclasses.replace(
        Message("Batch", b"", 3, 7, "TagA", "k1 k2", {"a": "b"}, 1234, ("10.1.2.3", 99)), **fields)


def fields_of(rec: PreparedRecord) -> list:
    return [getattr(rec, f.name) for f in dataclasses.fields(PreparedRecord)]


@pytest.mark.parametrize("host", [None, STORE_HOST], ids=["own-store-host", "given-store-host"])
def test_same_records_as_prepare_record(host):
    bodies = [b"", b"x", b"hello" * 100, memoryview(b"0123456789")[2:8]]
    got = prepare_batch(template(), bodies, 4096, host)
    assert len(got) == len(bodies)
    for rec, body in zip(got, bodies):
        want = prepare_record(dataclasses.replace(template(), body=body), 4096, host)
        assert isinstance(want, PreparedRecord)
        assert fields_of(rec) == fields_of(want)


def test_refuses_what_prepare_record_refuses():
    assert prepare_batch(template(), [b"ok", b"x" * 4097], 4096) is PutMessageStatus.MESSAGE_ILLEGAL
    assert prepare_batch(template(), [b"x" * 4097, b"ok"], 4096) is PutMessageStatus.MESSAGE_ILLEGAL
    assert prepare_batch(template(), [b"ok", "not bytes"], 4096) is PutMessageStatus.MESSAGE_ILLEGAL
    big = template(properties={"p": "v" * 40000})
    assert prepare_batch(big, [b"a", b"b"], 4096) is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert prepare_batch(template(), [b"x" * 4096], 4096)[0].size > 4096


@pytest.mark.parametrize("props", [{}, {"a": "b"}, {"a": "b", "é": "ü"}])
@pytest.mark.parametrize("tags,keys", [(None, None), ("TagA", "k1 k2")])
def test_uniq_keys_give_the_records_prepare_record_gives(props, tags, keys):
    """With a UNIQ_KEY per record (the producer's batches), each record is the one
    prepare_record makes of the message with that key added to its properties."""
    bodies = [b"one", b"", b"three" * 50, memoryview(b"0123456789")[2:8]]
    uniq = ["7F0000010E5A18B4AAC26B5C8A3E0001", "", "short", "ключ"]
    got = prepare_batch(template(properties=dict(props), tags=tags, keys=keys), bodies, 4096,
                        STORE_HOST, uniq)
    assert len(got) == len(bodies)
    for rec, body, key in zip(got, bodies, uniq):
        want = prepare_record(template(properties={**props, "UNIQ_KEY": key}, tags=tags, keys=keys,
                                       body=body), 4096, STORE_HOST)
        assert fields_of(rec) == fields_of(want)


def test_uniq_keys_refused_as_prepare_record_refuses():
    def batch(keys, bodies=(b"a", b"b"), **fields):
        return prepare_batch(template(**fields), list(bodies), 4096, STORE_HOST, keys)
    assert batch(["k", "bad\x01key"]) is PutMessageStatus.MESSAGE_ILLEGAL
    assert batch(["k", "bad\x02"]) is PutMessageStatus.MESSAGE_ILLEGAL
    assert batch(["k", 5]) is PutMessageStatus.MESSAGE_ILLEGAL
    assert batch(["k"]) is PutMessageStatus.MESSAGE_ILLEGAL                 # one key short
    assert batch(["k", "v" * 40000]) is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert batch(["k", "k2"], properties={"UNIQ_KEY": "x"}) is PutMessageStatus.MESSAGE_ILLEGAL
    assert batch(["k", "k2"], bodies=(b"a", b"x" * 4097)) is PutMessageStatus.MESSAGE_ILLEGAL
