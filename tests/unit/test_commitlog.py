"""`CommitLog`: appends with queue offsets, RocketMQ's AppendCallbackTest (a batch that does
not fit the rest of a segment moves whole to the next one behind an 8-byte blank; a batch
that fits gets consecutive queue offsets, one store time and distinct ids), transaction
records, reads by physical offset, positions, and the transient store pool."""
from __future__ import annotations

import struct

import zlib

import pytest

from core.record.codec import BLANK_SIZE, MAGIC_BLANK
from core.record.decode import decode_message
from core.log.commitlog import CommitLog, append_status_to_put
from core.files.fileops import REAL_FILE_OPS
from core.record.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK, Message,
    decode_message_id,
)
from core.status import AppendMessageStatus, PutMessageStatus
from core.files.transient_pool import TransientStorePool

SEG = 4096 * 4


@pytest.fixture
def make_log(tiny_config):
    logs = []

    def make(pool=False, **overrides):
        overrides.setdefault("enabled_append_prop_crc", False)   # RocketMQ's record sizes
        cfg = tiny_config(**overrides)
        log = CommitLog(cfg, REAL_FILE_OPS, pool=TransientStorePool(3, SEG) if pool else None)
        log.queue.load()
        logs.append(log)
        return log

    yield make
    for log in logs:
        log.shutdown()


def put(log, msg):
    rec = log.prepare(msg)
    assert not isinstance(rec, PutMessageStatus), rec
    return log.append(rec)


def put_batch(log, msgs):
    return log.append_batch([log.prepare(m) for m in msgs])


def test_appends_assign_offsets(make_log):
    log = make_log()
    r0 = put(log, Message("A", b"x" * 10))
    r1 = put(log, Message("A", b"y" * 10))
    r2 = put(log, Message("B", b"z" * 10, queue_id=3))
    assert r0.status is AppendMessageStatus.PUT_OK
    assert (r0.wrote_offset, r0.wrote_bytes, r0.logics_offset) == (0, 102, 0)
    assert (r1.wrote_offset, r1.logics_offset) == (102, 1)
    assert (r2.wrote_offset, r2.logics_offset) == (204, 0)
    assert log.topic_queue_table == {("A", 0): 2, ("B", 3): 1}
    assert log.get_max_offset() == 306
    m = decode_message(log.look_record(102))
    assert (m.body, m.queue_offset, m.commit_log_offset, m.store_timestamp) == (
        b"y" * 10, 1, 102, r1.store_timestamp)
    host, phys = decode_message_id(r1.msg_id)
    assert host == ("127.0.0.1", 10911) and phys == 102


def test_records_carry_the_record_crc_when_enabled(make_log):
    """enabled_append_prop_crc: 20 bytes more per record, the property last, its CRC over the
    record's bytes before it, as the position fields were set (reference 2.12)."""
    log = make_log(enabled_append_prop_crc=True)
    r0 = put(log, Message("A", b"x" * 10))
    r1 = put_batch(log, [Message("A", b"y" * 10), Message("A", b"z" * 10)])
    assert (r0.wrote_bytes, r1.record_sizes) == (122, (122, 122))
    for phys in (0, 122, 244):
        rec = log.look_record(phys)
        assert rec[-20:-11] == b"__CRC32#\x01" and rec[-1:] == b"\x02"
        assert int(rec[-11:-1][::-1]) == zlib.crc32(rec[:-20]) & 0x7FFFFFFF
        assert decode_message(rec).properties == {}


def test_store_host_comes_from_the_config(make_log):
    log = make_log(store_host="[2001:db8::9]:10911")
    r = put(log, Message("A", b"x", store_host=("10.0.0.1", 1)))
    assert r.wrote_bytes == 91 + 1 + 1 + 12
    assert len(r.msg_id) == 56
    m = decode_message(log.look_record(0))
    assert m.store_host == ("2001:db8::9", 10911)


def fill_until_left(log, left, topic="F"):
    """Append messages until fewer than `left` + one record's size bytes remain in the
    segment, then one sized so that exactly `left` bytes remain."""
    while True:
        pos = log.get_max_offset() % SEG
        room = SEG - pos - left
        if room <= 2000:
            break
        put(log, Message(topic, b"f" * 1000))
    body = room - (91 + len(topic))
    assert body >= 0
    r = put(log, Message(topic, b"f" * body))
    assert SEG - (r.next_offset % SEG) == left
    return r.next_offset


def test_batch_that_does_not_fit_moves_whole_to_the_next_segment(make_log):
    """AppendCallbackTest.testAppendMessageBatchEndOfFile through the CommitLog."""
    log = make_log()
    end = fill_until_left(log, 1000)
    batch = [Message("test-topic", b"body", tags="abc") for _ in range(10)]
    assert sum(log.prepare(m).size for m in batch) + BLANK_SIZE > 1000
    r = put_batch(log, batch)
    assert r.status is AppendMessageStatus.PUT_OK
    assert r.wrote_offset == SEG                       # the next segment's start
    assert r.logics_offset == 0 and r.msg_num == 10
    blank = log.read(end, 8)
    assert struct.unpack(">ii", blank) == (1000, MAGIC_BLANK)
    assert len(log.queue.files) == 2
    assert log.queue.files[0].wrote_position == SEG


def test_single_record_needs_8_spare_bytes(make_log):
    log = make_log()
    end = fill_until_left(log, 200)
    exact = Message("F", b"e" * (200 - 92))           # 200 bytes: no room for a blank after it
    r = put(log, exact)
    assert r.wrote_offset == SEG
    assert struct.unpack(">ii", log.read(end, 8)) == (200, MAGIC_BLANK)
    end2 = fill_until_left(log, 200)
    fits = Message("F", b"e" * (192 - 92))            # 192 + 8 = 200: fits, 8 bytes stay
    r2 = put(log, fits)
    assert r2.wrote_offset == end2
    assert SEG - r2.next_offset % SEG == 8


def test_batch_that_fits(make_log):
    """AppendCallbackTest.testAppendMessageBatchSucc."""
    log = make_log()
    batch = [Message("test-topic", b"body", tags="abc", born_timestamp=1234,
                     born_host=("192.168.1.1", 7777)) for _ in range(10)]
    r = put_batch(log, batch)
    assert r.status is AppendMessageStatus.PUT_OK
    assert r.msg_num == 10
    assert r.wrote_bytes == log.get_max_offset()
    ids = r.msg_id.split(",")
    assert len(ids) == 10 and len(set(ids)) == 10 and all(len(i) == 32 for i in ids)
    offset = 0
    for i, msg_id in enumerate(ids):
        assert decode_message_id(msg_id)[1] == offset
        m = decode_message(log.look_record(offset))
        assert (m.topic, m.body, m.tags, m.born_host, m.born_timestamp) == (
            "test-topic", b"body", "abc", ("192.168.1.1", 7777), 1234)
        assert m.queue_offset == i
        assert m.store_timestamp == r.store_timestamp
        offset += m.store_size
    assert log.topic_queue_table[("test-topic", 0)] == 10


def test_ipv6_batch_ids_are_56_chars(make_log):
    log = make_log(store_host="[::1]:10911")
    r = put_batch(log, [Message("t", b"body", born_host=("::1", 1)) for _ in range(10)])
    ids = r.msg_id.split(",")
    assert len(set(ids)) == 10 and all(len(i) == 56 for i in ids)


def test_batch_larger_than_a_segment_is_refused(make_log):
    log = make_log()
    big = [Message("t", b"b" * 4000) for _ in range(5)]
    r = put_batch(log, big)
    assert r.status is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED
    assert append_status_to_put(r.status) is PutMessageStatus.MESSAGE_ILLEGAL
    assert log.get_max_offset() == 0
    assert log.topic_queue_table == {}


@pytest.mark.parametrize("kind", [SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK])
def test_prepared_and_rollback_records_take_no_queue_offset(make_log, kind):
    log = make_log()
    put(log, Message("T", b"a"))
    r = put(log, Message("T", b"b", sys_flag=kind))
    assert r.status is AppendMessageStatus.PUT_OK
    assert decode_message(log.look_record(r.wrote_offset)).queue_offset == 0
    r2 = put(log, Message("T", b"c", sys_flag=SYSFLAG_TRANSACTION_COMMIT))
    assert r2.logics_offset == 1
    assert log.topic_queue_table[("T", 0)] == 2


def test_rolling_over_many_segments(make_log):
    log = make_log()
    offsets = [put(log, Message("R", b"r" * 700)).wrote_offset for _ in range(100)]
    assert len(log.queue.files) >= 4
    for mf in log.queue.files[:-1]:
        assert mf.is_full
    for i, off in enumerate(offsets):
        m = decode_message(log.look_record(off))
        assert m.queue_offset == i and m.commit_log_offset == off
        assert off // SEG == (off + m.store_size - 1) // SEG      # never across a segment


def test_reads(make_log):
    log = make_log()
    r = put(log, Message("A", b"hello", born_host=("::1", 5)))
    assert log.look_record(r.wrote_offset) == log.read(r.wrote_offset, r.wrote_bytes)
    assert log.look_record(r.next_offset) is None                  # past the end
    assert log.look_record(10 ** 9) is None
    assert log.read(0, r.wrote_bytes + 1) is None
    assert log.pickup_store_timestamp(0, r.wrote_bytes) == r.store_timestamp
    assert log.pickup_store_timestamp(-10, 138) == -1
    assert log.record_phys_offset(log.look_record(0)) == 0


def test_min_offset_skips_an_unavailable_first_segment(make_log):
    log = make_log()
    assert log.get_min_offset() == -1
    while len(log.queue.files) < 3:
        put(log, Message("A", b"x" * 1000))
    assert log.get_min_offset() == 0
    log.queue.files[0].shutdown()
    assert log.get_min_offset() == SEG
    assert log.pickup_store_timestamp(0, 100) == -1


def test_confirm_offset_async_and_sync(make_log):
    a = make_log()
    put(a, Message("A", b"x"))
    assert a.get_confirm_offset() == a.get_max_offset() == 93
    s = make_log(flush_disk_type="SYNC_FLUSH", store_path_root_dir=a.config.store_path_root_dir + "2")
    put(s, Message("A", b"x"))
    assert s.get_confirm_offset() == 0                 # nothing flushed yet
    s.flush(0)
    assert s.get_confirm_offset() == 93


def test_transient_pool_readers_see_committed_bytes(make_log):
    log = make_log(pool=True)
    r = put(log, Message("P", b"pooled"))
    assert log.queue.files[0].write_buffer is not None
    assert log.get_max_offset() == 0                   # written, not committed
    assert log.look_record(0) is None
    assert log.commit(0) is False
    assert log.get_max_offset() == r.next_offset
    assert decode_message(log.look_record(0)).body == b"pooled"
    assert log.flush(0) is False
    with open(log.queue.files[0].path, "rb") as f:
        assert f.read(r.wrote_bytes) == log.look_record(0)


def test_transient_pool_buffer_is_returned_when_its_segment_is_committed(make_log):
    log = make_log(pool=True)
    while len(log.queue.files) < 2:
        put(log, Message("P", b"p" * 1000))
    first = log.queue.files[0]
    while not log.commit(0):
        pass
    assert first.write_buffer is None and first.committed_position == SEG
    assert log.pool.available() >= 2
    m = decode_message(log.look_record(0))
    assert m.body == b"p" * 1000


def test_os_page_cache_busy(make_log):
    log = make_log(os_page_cache_busy_timeout_ms=1000)
    assert not log.is_os_page_cache_busy()
    log.begin_time_in_lock = 1                         # a put "began" long ago: over 10^7 ms
    assert not log.is_os_page_cache_busy()
    from core.log.commitlog import now_ms
    log.begin_time_in_lock = now_ms() - 2000
    assert log.is_os_page_cache_busy()
    log.begin_time_in_lock = now_ms() - 500
    assert not log.is_os_page_cache_busy()
    log.begin_time_in_lock = 0
