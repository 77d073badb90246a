"""core.record.encode, the single put's encoder: for any message, `encode_record` gives the bytes
`prepare_record` + `write_record` give (or the same refusing status), and a CommitLog fed by
`append_encoded` holds the same bytes and answers the same results as one fed by `append`."""
from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record import encode as record_encode
from core.record.codec import prepare_record
from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message, host_to_bytes
from core.record.encode import encode_prepared, encode_record
from core.status import PutMessageStatus

STORE_V4 = host_to_bytes(("10.0.0.1", 10911))[0]
STORE_V6 = host_to_bytes(("fe80::1", 10911))[0]

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
plain = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                min_size=1, max_size=8)
names = st.one_of(plain, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT"]), text)
values = st.one_of(plain, plain, st.none(), st.integers(-3, 3), st.just(""), text,
                   st.just("v" * 40000))
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
odd_ints = st.one_of(st.integers(-(1 << 64), 1 << 64), st.booleans(), st.just(1.0), st.none())
hosts = st.one_of(st.sampled_from([("127.0.0.1", 10911), ("::1", 1), ("10.1.2.3", 7)]),
                  st.tuples(st.ip_addresses().filter(
    lambda a: a.version == 4 or a.ipv4_mapped is None).map(str), st.integers(0, 65535)),
                  st.just(("not a host", 1)), st.just(["127.0.0.1", 5]))


def mostly(common, odd):
    """`common` nine times in ten, else `odd`."""
    return st.integers(0, 9).flatmap(lambda i: odd if i == 0 else common)


@st.composite
def messages(draw):
    """Mostly the common message (the inline path), each field sometimes odd or illegal."""
    return Message(
        topic=draw(mostly(st.sampled_from(["T", "BenchTopic", "é" * 63 + "e"]),
                          st.one_of(text, st.just("t" * 128), st.just("a\x00b"), st.just(b"T")))),
        body=draw(mostly(st.binary(max_size=300),
                         st.one_of(st.binary(max_size=9).map(bytearray), st.just(b"x" * 1100),
                                   st.just("str body")))),
        queue_id=draw(mostly(st.integers(0, 7), st.one_of(st.integers(-2, (1 << 31) + 1), odd_ints))),
        flag=draw(mostly(int32, odd_ints)),
        tags=draw(mostly(st.one_of(st.none(), st.just(""), plain),
                         st.one_of(text, st.integers(1, 3), st.just("TAGS")))),
        keys=draw(mostly(st.one_of(st.none(), st.just(""), plain, st.just("a b")),
                         st.one_of(st.just(" a  b "), st.lists(plain, max_size=3), text))),
        properties=draw(mostly(st.dictionaries(plain, plain, max_size=3),
                               st.one_of(st.dictionaries(names, values, max_size=4), st.none()))),
        born_timestamp=draw(mostly(int64, odd_ints)),
        born_host=draw(mostly(st.sampled_from([("127.0.0.1", 10911), ("::1", 1)]), hosts)),
        store_host=draw(hosts),
        sys_flag=draw(mostly(st.integers(0, 0x3F), st.one_of(int32, odd_ints))),
        reconsume_times=draw(mostly(int32, odd_ints)),
        prepared_transaction_offset=draw(mostly(int64, odd_ints)))


def general(msg, max_size, store, crc=False):
    return encode_prepared(prepare_record(copy.copy(msg), max_size, store, crc))


@settings(max_examples=100, deadline=None)
@given(messages(), st.sampled_from([1024, 200, 1 << 20]), st.sampled_from([STORE_V4, STORE_V6]),
       st.booleans())
def test_encode_record_equals_the_general_path(msg, max_size, store, crc):
    """With and without the record CRC reserve (`crc`)."""
    want = general(msg, max_size, store, crc)     # also fills the topic and host caches
    assert encode_record(msg, max_size, store, crc) == want


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(messages(), st.sampled_from([1024, 200, 1 << 20]), st.sampled_from([STORE_V4, STORE_V6]),
       st.booleans())
def test_encode_record_equals_the_general_path_many(msg, max_size, store, crc):
    test_encode_record_equals_the_general_path.hypothesis.inner_test(msg, max_size, store, crc)


def test_the_common_message_is_encoded_inline(monkeypatch):
    """The benchmark's message (topic, TAGS, one UNIQ_KEY) never takes the general path."""
    msg = Message("BenchTopic", b"b" * 1024, queue_id=3, tags="TagA",
                  properties={"UNIQ_KEY": "7F0000011A2B1B2C3D4E12340000ABCD"}, born_timestamp=17)
    want = general(msg, 4 << 20, STORE_V4)

    def refuse(*args):
        raise AssertionError("took the general path")
    monkeypatch.setattr(record_encode, "_general", refuse)
    assert encode_record(msg, 4 << 20, STORE_V4) == want
    keyed = dataclasses.replace(msg, keys="k1 k2", properties={"UNIQ_KEY": "u", "WAIT": "false"})
    monkeypatch.undo()
    want = general(keyed, 4 << 20, STORE_V4)
    monkeypatch.setattr(record_encode, "_general", refuse)
    assert encode_record(keyed, 4 << 20, STORE_V4) == want


def test_refusals_are_prepare_records():
    for msg in (Message("t" * 128, b"x"), Message("T", b"x" * 2000), Message("T", b"x", queue_id=-1),
                Message("T", b"x", properties={"a\x01": "b"}), Message("T", b"x", flag=1 << 31)):
        assert encode_record(msg, 1024, STORE_V4) is prepare_record(msg, 1024, STORE_V4)
    big = Message("T", b"x", properties={"p": "v" * 40000})
    assert encode_record(big, 1 << 20, STORE_V4) is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


def open_log(root, segment=4096) -> CommitLog:
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=segment)
    log = CommitLog(cfg, REAL_FILE_OPS)
    log.queue.load()
    return log


def log_bytes(log: CommitLog) -> bytes:
    log.flush(0)
    out = b""
    for mf in log.queue.files:
        with open(mf.path, "rb") as f:
            out += f.read()
    return out


@pytest.mark.parametrize("sys_flag", [0, 0x4, 0x8, 0xC])
def test_append_encoded_writes_what_append_writes(tmp_path, sys_flag):
    """Records of many sizes through tiny segments (blanks and rolls), with and without a queue
    offset (prepared and rollback transactions take none): same bytes, same results."""
    a, b = open_log(tmp_path / "a"), open_log(tmp_path / "b")
    clock = iter(range(10**6))
    import core.log.commitlog as commitlog_module
    real = commitlog_module.time
    try:
        for i in range(60):
            msg = Message(f"T{i % 3}", bytes([i]) * (i * 97 % 1000), queue_id=i % 2, tags="t",
                          properties={"UNIQ_KEY": f"{i:032X}"}, sys_flag=sys_flag,
                          born_host=("::1", 5) if i % 5 == 0 else ("127.0.0.1", 5))
            now = next(clock) * 1_000_000
            commitlog_module.time = type("T", (), {"time_ns": staticmethod(lambda: now)})
            ra = a.append(a.prepare(msg))
            rb = b.append_encoded(*encode_record(msg, b.max_message_size, b.store_host_bytes,
                                                 b.prop_crc))
            assert (ra.status, ra.wrote_offset, ra.wrote_bytes, ra.store_timestamp, ra.msg_num,
                    ra.store_host, ra.record_sizes, ra.msg_id) == \
                   (rb.status, rb.wrote_offset, rb.wrote_bytes, rb.store_timestamp, rb.msg_num,
                    rb.store_host, rb.record_sizes, rb.msg_id)
            if sys_flag in (0x4, 0xC):
                assert rb.logics_offset == 0
            else:
                assert ra.logics_offset == rb.logics_offset
    finally:
        commitlog_module.time = real
    assert a.topic_queue_table == b.topic_queue_table
    assert log_bytes(a) == log_bytes(b)
    a.shutdown()
    b.shutdown()



class _FixedClock:
    @staticmethod
    def time_ns():
        return 1_700_000_000_123_000_000


@settings(max_examples=25, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6), st.sampled_from([1024, 200, 1 << 20]))
def test_append_message_writes_what_append_writes_or_refuses_alike(tmp_path_factory, msgs, max_size):
    """`CommitLog.append_message` (the single put: the common message packed in place) against
    `prepare_record` + `append`: same statuses, same bytes, same results. Each message goes in
    twice, so that the second finds the topic, host and TAGS/KEYS caches filled."""
    import core.log.commitlog as commitlog_module
    root = tmp_path_factory.mktemp("log")
    a, b = open_log(root / "a", 1 << 16), open_log(root / "b", 1 << 16)
    a.max_message_size = b.max_message_size = max_size
    real = commitlog_module.time
    commitlog_module.time = _FixedClock
    try:
        for msg in msgs + msgs:
            want = a.prepare(copy.copy(msg))
            got = b.append_message(copy.copy(msg))
            if want.__class__ is PutMessageStatus:
                assert got is want
                continue
            ra = a.append(want)
            assert ra == got and ra.msg_id == got.msg_id
        assert a.topic_queue_table == b.topic_queue_table
        assert a.get_max_offset() == b.get_max_offset()
        # a message refused for a field out of range may leave b a segment with nothing in it
        assert log_bytes(a).rstrip(b"\0") == log_bytes(b).rstrip(b"\0")
    finally:
        commitlog_module.time = real
        a.shutdown()
        b.shutdown()


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=6), st.sampled_from([1024, 200, 1 << 20]))
def test_append_message_writes_what_append_writes_or_refuses_alike_many(tmp_path_factory, msgs, max_size):
    test_append_message_writes_what_append_writes_or_refuses_alike.hypothesis.inner_test(tmp_path_factory, msgs, max_size)


def test_append_message_packs_the_common_message_in_place(tmp_path, monkeypatch):
    """The benchmark's message never takes `encode_record` once the caches know it."""
    log = open_log(tmp_path, 1 << 16)
    msg = Message("BenchTopic", b"b" * 1024, queue_id=3, tags="TagA",
                  properties={"UNIQ_KEY": "7F0000011A2B1B2C3D4E12340000ABCD"}, born_timestamp=17)
    first = log.append_message(copy.copy(msg))                  # fills the caches
    monkeypatch.setattr(record_encode, "_general", lambda *a: pytest.fail("took the general path"))
    second = log.append_message(msg)
    assert (second.wrote_offset, second.logics_offset) == (first.wrote_bytes, 1)
    assert log.read(second.wrote_offset, second.wrote_bytes)[84:-11] == \
        log.read(first.wrote_offset, first.wrote_bytes)[84:-11]      # all but the CRC digits
    log.shutdown()
