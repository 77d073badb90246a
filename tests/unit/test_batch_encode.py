"""core.record.batch_encode: a batch written as columns is byte for byte the batch written record by
record (core.record.codec.prepare_batch + write_record), refused with the same status, and lands in
the CommitLog like any batch (roll to the next segment, the transient pool's buffers)."""
from __future__ import annotations

import copy
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.batch_encode import PreparedBatch, prepare_batch_records, prepare_columns
from core.record.codec import BLANK_SIZE, MAGIC_BLANK, prepare_batch, write_record
from core.log.commitlog import CommitLog
from core.record.decode import decode_message
from core.record.key_block import KeyBlock, block_problem
from core.files.fileops import REAL_FILE_OPS
from core.record.message import SYSFLAG_TRANSACTION_PREPARED, Message, host_to_bytes
from core.status import AppendMessageStatus, PutMessageStatus, take_reason
from core.files.transient_pool import TransientStorePool

STORE_HOST = host_to_bytes(("127.0.0.1", 10911))[0]
SEG = 4096 * 4


def write_reference(recs, pos, qoff, phys, ts) -> bytes:
    buf = bytearray(pos + sum(r.size for r in recs))
    p = pos
    for i, rec in enumerate(recs):
        p = write_record(buf, p, rec, qoff + i, phys + p - pos, ts)
    return bytes(buf)


def write_columns(batch: PreparedBatch, pos, qoff, phys, ts) -> bytes:
    buf = bytearray(pos + batch.total)
    assert batch.write(buf, pos, qoff, phys, ts) == len(buf)
    return bytes(buf)


templates = st.builds(
    lambda tags, keys, props, born, flag, v6: Message(
        "Batch", b"", 2, flag, tags, keys, props, born, ("::1", 9) if v6 else ("10.1.2.3", 99)),
    st.none() | st.sampled_from(["TagA", "ß"]), st.none() | st.just("k1 k2"),
    st.dictionaries(st.sampled_from(["a", "bb", "é"]), st.text(max_size=5), max_size=3),
    st.integers(0, 1 << 40), st.integers(0, 1 << 20), st.booleans())
key_sets = st.one_of(
    st.none(),
    st.integers(0, 40).map(lambda k: lambda n: ["%0*X" % (k, i) if k else "" for i in range(n)]),
    st.just(lambda n: ["k" * (i % 3) for i in range(n)]),            # different lengths
    st.just(lambda n: ["ключ%02d" % i for i in range(n)]),           # not ASCII
    st.just(lambda n: ["ab\x01c" if i == n - 1 else "abcd" for i in range(n)]))   # a separator


@settings(max_examples=75, deadline=None)
@given(templates, st.lists(st.integers(0, 300), min_size=1, max_size=12), st.booleans(), key_sets,
       st.sampled_from([200, 300, 4096]), st.integers(0, 1000), st.integers(0, 1 << 40),
       st.booleans())
def test_columns_write_the_bytes_record_by_record_writes(msg, sizes, same, keys, max_size, qoff, phys,
                                                          crc):
    """With and without the record CRC property (`crc`): the columns seal as write_record does."""
    bodies = [bytes([i % 251]) * (sizes[0] if same else n) for i, n in enumerate(sizes)]
    uniq = keys(len(bodies)) if keys else None
    want = prepare_batch(copy.copy(msg), bodies, max_size, STORE_HOST, uniq, crc)
    got = prepare_batch_records(copy.copy(msg), bodies, max_size, STORE_HOST, uniq, prop_crc=crc)
    block = as_key_block(uniq)
    if block is not None:                            # the same keys as one block: the same result
        from_block = prepare_batch_records(copy.copy(msg), bodies, max_size, STORE_HOST, block,
                                           prop_crc=crc)
        if from_block.__class__ is PreparedBatch:
            assert write_columns(from_block, 13, qoff, phys, 777) == write_reference(want, 13, qoff, phys, 777)
        elif from_block.__class__ is list:
            assert [r.uniq_key for r in from_block] == uniq
        else:
            assert from_block is want
    if want.__class__ is PutMessageStatus:
        assert got is want
        return
    if got.__class__ is list:                        # record by record: the columns declined
        assert prepare_columns(copy.copy(msg), bodies, max_size, STORE_HOST, uniq, prop_crc=crc) is None
        return
    assert got.record_sizes == tuple(r.size for r in want)
    assert write_columns(got, 13, qoff, phys, 777) == write_reference(want, 13, qoff, phys, 777)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(templates, st.lists(st.integers(0, 300), min_size=1, max_size=12), st.booleans(), key_sets,
       st.sampled_from([200, 300, 4096]), st.integers(0, 1000), st.integers(0, 1 << 40),
       st.booleans())
def test_columns_write_the_bytes_record_by_record_writes_many(msg, sizes, same, keys, max_size, qoff, phys,
                                                          crc):
    test_columns_write_the_bytes_record_by_record_writes.hypothesis.inner_test(msg, sizes, same, keys, max_size, qoff, phys, crc)


def as_key_block(uniq):
    """The keys as a KeyBlock, when they can be one (ASCII, one width, at least one byte)."""
    if not uniq or block_problem("".join(uniq).encode(), len(uniq)) or len(set(map(len, uniq))) != 1:
        return None
    return KeyBlock("".join(uniq).encode(), len(uniq))


def test_a_key_block_with_a_separator_is_refused():
    msg = Message("T", b"", 0, 0, None, None, {}, 1, ("127.0.0.1", 0))
    for n in (1, 2, 5):
        block = KeyBlock(b"ab\x02c" * n, n)
        assert prepare_batch_records(msg, [b"x"] * n, 4096, STORE_HOST, block) is PutMessageStatus.MESSAGE_ILLEGAL
        assert "separators" in take_reason()


def test_a_key_block_and_a_uniq_key_property_are_refused():
    msg = Message("T", b"", 0, 0, None, None, {"UNIQ_KEY": "own"}, 1, ("127.0.0.1", 0))
    assert prepare_batch_records(msg, [b"x", b"y"], 4096, STORE_HOST, KeyBlock(b"k1k2", 2)) \
        is PutMessageStatus.MESSAGE_ILLEGAL


def test_the_producers_batches_take_the_columns():
    bodies = [b"x" * 1024] * 100
    keys = ["7F0000010E5A18B4AAC26B5C8A3E%04X" % i for i in range(100)]
    msg = Message("Bench", b"", 1, 0, None, None, {}, 1, ("127.0.0.1", 0))
    assert isinstance(prepare_batch_records(msg, bodies, 4 << 20, STORE_HOST, keys), PreparedBatch)
    assert isinstance(prepare_batch_records(msg, bodies, 4 << 20, STORE_HOST, as_key_block(keys)), PreparedBatch)
    varied = [b"x" * (100 + i) for i in range(100)]
    assert isinstance(prepare_batch_records(msg, varied, 4 << 20, STORE_HOST, keys), PreparedBatch)
    assert prepare_batch_records(msg, varied, 4 << 20, STORE_HOST, None).__class__ is PreparedBatch


def test_the_template_is_left_as_it_was_when_the_columns_decline():
    msg = Message("Batch", b"", 0, 0, None, None, {"a": "b"}, 1, ("127.0.0.1", 0))
    keys = ["short", "longer key"]                   # different widths: record by record
    recs = prepare_batch_records(msg, [b"1", b"2"], 4096, STORE_HOST, keys)
    assert [r.uniq_key for r in recs] == keys


def test_queue_offset_none_writes_zero_for_every_record():
    msg = Message("T", b"", 0, 0, None, None, {}, 1, ("127.0.0.1", 0),
                  sys_flag=SYSFLAG_TRANSACTION_PREPARED)
    batch = prepare_columns(msg, [b"a", b"b", b"c"], 4096, STORE_HOST)
    buf = bytearray(batch.total)
    batch.write(buf, 0, None, 500, 9)
    pos = 0
    for size in batch.record_sizes:
        m = decode_message(bytes(buf[pos:pos + size]))
        assert (m.queue_offset, m.commit_log_offset) == (0, 500 + pos)
        pos += size


@pytest.fixture
def make_log(tiny_config):
    logs = []

    def make(pool=False):
        log = CommitLog(tiny_config(), REAL_FILE_OPS, pool=TransientStorePool(3, SEG) if pool else None)
        log.queue.load()
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.shutdown()                   # an export of a segment left behind would fail here


def columns(log, n, body=b"body"):
    msg = Message("test-topic", b"", 0, 0, "abc", None, {}, 1234, ("192.168.1.1", 7777))
    batch = prepare_columns(msg, [body] * n, log.max_message_size, log.store_host_bytes,
                            ["%032X" % i for i in range(n)])
    assert isinstance(batch, PreparedBatch)
    return batch


@pytest.mark.parametrize("pool", [False, True], ids=["mapped", "transient-pool"])
def test_a_column_batch_that_does_not_fit_moves_whole_to_the_next_segment(make_log, pool):
    log = make_log(pool)
    first = log.append_batch(columns(log, 50, b"f" * 100))
    assert first.status is AppendMessageStatus.PUT_OK
    left = SEG - first.next_offset
    batch = columns(log, 40, b"b" * 60)
    assert batch.total + BLANK_SIZE > left
    r = log.append_batch(batch)
    assert r.status is AppendMessageStatus.PUT_OK
    assert (r.wrote_offset, r.logics_offset, r.msg_num) == (SEG, 50, 40)
    while pool and not log.commit(0):              # one segment per call
        pass
    assert struct.unpack(">ii", log.read(first.next_offset, 8)) == (left, MAGIC_BLANK)
    offset = SEG
    for i in range(40):
        m = decode_message(log.look_record(offset))
        assert (m.body, m.queue_offset, m.commit_log_offset, m.tags) == (b"b" * 60, 50 + i, offset, "abc")
        assert m.properties["UNIQ_KEY"] == "%032X" % i
        offset += m.store_size
    assert log.topic_queue_table[("test-topic", 0)] == 90


def test_a_batch_of_a_known_shape_writes_its_own_bodies_keys_and_born_time():
    """The second batch of a shape takes the cached headers and tails: its bytes are still the
    ones record by record gives, and a field that is only equal (1.0 for 1) is not taken."""
    def batch(seed, born, flag=0):
        msg = Message("Shape", b"", 1, flag, "TagA", None, {"p": "v"}, born, ("127.0.0.1", 5))
        bodies = [bytes([seed + i]) * 64 for i in range(5)]
        keys = ["%032X" % (seed * 100 + i) for i in range(5)]
        return msg, bodies, keys
    for seed, born in ((1, 10), (2, 99), (3, 1 << 62)):
        msg, bodies, keys = batch(seed, born)
        want = prepare_batch(copy.copy(msg), bodies, 4096, STORE_HOST, keys)
        got = prepare_batch_records(msg, bodies, 4096, STORE_HOST, keys)
        assert isinstance(got, PreparedBatch)
        assert write_columns(got, 7, 5, 1000, 3) == write_reference(want, 7, 5, 1000, 3)
    msg, bodies, keys = batch(1, 10, flag=1)
    assert isinstance(prepare_batch_records(msg, bodies, 4096, STORE_HOST, keys), PreparedBatch)
    msg, bodies, keys = batch(1, 10, flag=1.0)
    assert prepare_batch_records(msg, bodies, 4096, STORE_HOST, keys) is PutMessageStatus.MESSAGE_ILLEGAL
    msg, bodies, keys = batch(1, 1.5)
    assert prepare_batch_records(msg, bodies, 4096, STORE_HOST, keys) is PutMessageStatus.MESSAGE_ILLEGAL
