"""`MessageStore` put path with RocketMQ's DefaultMessageStoreTest and BatchPutMessageTest
numbers: write and read (IPv4 and IPv6), message limits and statuses, failed puts consume
no queue offset, group commit, max offsets, batches, segment ends, both flush modes, the
transient store pool, SERVICE_NOT_AVAILABLE, and a put waking an idle reput thread."""
from __future__ import annotations

import struct
import threading

import pytest

from core import jobs
from core.record.crc_property import CRC32_RESERVED_LEN
from core.record.codec import MAGIC_BLANK
from core.config import ConfigError
from core.record.decode import decode_message
from core.record.message import Message
from core.status import GetMessageStatus, PutMessageStatus

S = PutMessageStatus
BODY = b"Once, there was a chance for me!"
SEG = 4096 * 4


def foobar(i=0, **kw):
    fields = dict(topic="FooBar", body=BODY, tags="TAG1", keys=str(1_700_000_000_000 + i))
    fields.update(kw)
    return Message(**fields)


def test_write_and_read_ipv4_and_ipv6(store):
    """DefaultMessageStoreTest.testWriteAndRead: 10 IPv4 and 10 IPv6 messages, then 20 more."""
    for i in range(10):
        assert store.put_message(foobar(i)).ok
    for i in range(10):
        assert store.put_message(foobar(i, born_host=("::1", 9000 + i))).ok
    assert store.wait_for_dispatch()
    for i in range(20):
        r = store.get_message("g", "FooBar", 0, i, 1)
        assert r.status is GetMessageStatus.FOUND
        m = r.messages[0]
        assert m.body == BODY and m.queue_offset == i
        assert m.born_host[0] == ("127.0.0.1" if i < 10 else "::1")
    for i in range(20):
        assert store.put_message(foobar(i)).ok
    assert store.wait_for_dispatch()
    for i in range(20, 40):
        assert store.get_message("g", "FooBar", 0, i, 1).status is GetMessageStatus.FOUND


def test_ipv6_store_host(tiny_config, open_store):
    store = open_store(tiny_config(store_host="[::1]:10911"))
    r = store.put_message(foobar(born_host=("::2", 1)))
    assert r.ok and r.append_result.wrote_bytes == 158 + 24 + CRC32_RESERVED_LEN
    assert len(r.append_result.msg_id) == 56
    assert store.view_message_by_id(r.append_result.msg_id).body == BODY


def test_ten_foobar_messages_end_at_1580(tiny_config, open_store):
    """RocketMQ's ReputMessageServiceTest sizes: records without the CRC property."""
    sync_store = open_store(tiny_config(flush_disk_type="SYNC_FLUSH", enabled_append_prop_crc=False))
    for i in range(10):
        assert sync_store.put_message(foobar(i)).ok
    assert sync_store.get_max_phy_offset() == 1580
    assert sync_store.commitlog.queue.flushed_where == 1580


@pytest.fixture
def big_store(tiny_config, open_store):
    """64 KiB segments and max_message_size 4096: room for 32 KiB properties."""
    return open_store(tiny_config(mapped_file_size_commitlog=4096 * 16, max_message_size=4096))


def test_put_long_message(big_store):
    """DefaultMessageStoreTest.testPutLongMessage and friends."""
    st = big_store
    assert st.put_message(Message("T", b"b" * 4096)).status is S.PUT_OK
    assert st.put_message(Message("T", b"b" * 4097)).status is S.MESSAGE_ILLEGAL
    assert st.put_message(Message("T", b"b" * (4096 + 65536))).status is S.MESSAGE_ILLEGAL
    assert st.put_message(Message("t" * 127, b"b")).status is S.PUT_OK
    assert st.put_message(Message("t" * 128, b"b")).status is S.MESSAGE_ILLEGAL
    # "p" \x01 value \x02 and the CRC property: 32767 and 32768 bytes.
    assert st.put_message(Message("T", b"b", properties={"p": "v" * (32764 - CRC32_RESERVED_LEN)})) \
        .status is S.PUT_OK
    too_long = Message("T", b"b", properties={"p": "v" * (32765 - CRC32_RESERVED_LEN)})
    assert st.put_message(too_long).status is S.PROPERTIES_SIZE_EXCEEDED
    assert st.put_message(Message("", b"b")).status is S.MESSAGE_ILLEGAL


def test_a_failed_put_consumes_no_queue_offset(big_store):
    st = big_store
    assert st.put_message(Message("T", b"a")).append_result.logics_offset == 0
    before = st.get_max_phy_offset()
    for bad in (Message("T", b"b" * 4097), Message("T", b"b", properties={"p": "v" * 40000}),
                Message("T", b"b", properties={"a": "x\x01y"})):
        assert not st.put_message(bad).ok
    assert st.get_max_phy_offset() == before
    assert st.put_message(Message("T", b"c")).append_result.logics_offset == 1
    assert st.commitlog.topic_queue_table[("T", 0)] == 2


def test_put_message_when_property_is_too_long(big_store):
    """DefaultMessageStoreTest.testPutMessage_whenMessagePropertyIsTooLong."""
    st = big_store
    r = st.put_message(Message("T", b"b", properties={"too_long": "1" * 32768}))
    assert r.status is S.PROPERTIES_SIZE_EXCEEDED
    assert st.get_max_offset_in_queue("T", 0) == 0
    assert st.put_message(Message("T", b"b", properties={"fine": "1" * 100})).status is S.PUT_OK
    assert st.wait_for_dispatch()
    assert st.get_max_offset_in_queue("T", 0) == 1


def test_group_commit(sync_store):
    """SYNC_FLUSH: every acknowledged record is flushed when its put returns."""
    results, errors = [], []

    def producer(n):
        for i in range(25):
            r = sync_store.put_message(Message("G", b"%d-%d" % (n, i), queue_id=n))
            flushed = sync_store.commitlog.queue.flushed_where
            if not r.ok or flushed < r.append_result.next_offset:
                errors.append((r.status, flushed, r.append_result))
            results.append(r)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 100
    assert sync_store.wait_for_dispatch()
    for n in range(4):
        got = sync_store.get_message("g", "G", n, 0, 32)
        assert [m.body for m in got.messages] == [b"%d-%d" % (n, i) for i in range(25)]


def test_sync_flush_put_without_wait_returns_at_once(tiny_config, open_store):
    st = open_store(tiny_config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200))
    st.flush_service.stop()                           # nobody flushes from now on
    r = st.put_message(Message("T", b"x", properties={"WAIT": "false"}))
    assert r.status is S.PUT_OK
    r = st.put_message(Message("T", b"y"))
    assert r.status is S.FLUSH_DISK_TIMEOUT


def test_max_offset(store):
    """DefaultMessageStoreTest.testMaxOffset: dispatched (committed) against assigned."""
    for _ in range(3):
        assert store.put_message(Message("T", b"x")).ok
    assert store.wait_for_dispatch()
    assert store.get_max_offset_in_queue("T", 0) == 3
    store.reput_service.stop()                        # nothing is dispatched from now on
    for _ in range(2):
        assert store.put_message(Message("T", b"x")).ok
    assert store.get_max_offset_in_queue("T", 0) == 3
    assert store.commitlog.topic_queue_table[("T", 0)] == 5


def test_a_put_wakes_an_idle_reput(store, monkeypatch, wait_until):
    """Once idle the reput thread sleeps IDLE_INTERVAL_MS between looks, but the next put
    wakes it: here the interval is 30 s, and the message is still in its queue at once."""
    monkeypatch.setattr(jobs, "IDLE_AFTER_S", 0.05)
    monkeypatch.setattr(jobs, "IDLE_INTERVAL_MS", 30_000)
    assert store.put_message(Message("T", b"x")).ok
    assert store.wait_for_dispatch()
    assert wait_until(lambda: store.reput_service.idle)      # idle now, in a 30 s wait
    assert store.put_messages([Message("T", b"y"), Message("T", b"z")]).ok
    assert store.wait_for_dispatch(timeout=5)
    assert wait_until(lambda: store.reput_service.idle)      # and idle again
    assert store.put_message(Message("T", b"w")).ok
    assert store.wait_for_dispatch(timeout=5)
    assert store.get_max_offset_in_queue("T", 0) == 4


def test_async_flush_waits_for_least_pages_or_the_thorough_interval(tiny_config, open_store,
                                                                     wait_until):
    store = open_store(tiny_config(flush_commitlog_least_pages=2,
                                   flush_commitlog_thorough_interval=200))
    assert store.put_message(Message("A", b"a" * 300)).ok
    end = store.get_max_phy_offset()
    queue = store.commitlog.queue
    assert wait_until(lambda: queue.flushed_where >= end)           # the thorough flush
    while store.get_max_phy_offset() < 3 * 4096:                    # over two pages
        assert store.put_message(Message("A", b"a" * 1000)).ok
    assert wait_until(lambda: queue.flushed_where >= 2 * 4096)


def test_segment_ends_with_a_blank_record(store):
    """AppendCallbackTest END_OF_FILE through the store: every full segment ends in a blank."""
    results = [store.put_message(Message("E", b"e" * (300 + i))) for i in range(120)]
    assert all(r.ok for r in results)
    files = store.commitlog.queue.files
    assert len(files) >= 3
    for r0, r1 in zip(results, results[1:]):
        a = r0.append_result
        if a.next_offset // SEG != r1.append_result.wrote_offset // SEG:
            left = SEG - a.next_offset % SEG
            assert left >= 8
            assert r1.append_result.wrote_offset % SEG == 0
            blank = store.commitlog.read(a.next_offset, 8)
            assert struct.unpack(">ii", blank) == (left, MAGIC_BLANK)
            assert a.next_offset + left == r1.append_result.wrote_offset
        else:
            assert r1.append_result.wrote_offset == a.next_offset
    assert store.wait_for_dispatch()
    got = []
    offset = 0
    while True:
        r = store.get_message("g", "E", 0, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            break
        got.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
    assert got == [b"e" * (300 + i) for i in range(120)]


def batch_msgs(n=10, topic="batch-write-topic", **kw):
    return [Message(topic, b"body%d" % i, tags="TAG1", keys=str(1_700_000_000_000 + i), **kw)
            for i in range(n)]


def test_put_messages(sync_store):
    """BatchPutMessageTest.testPutMessages."""
    r = sync_store.put_messages(batch_msgs())
    assert r.ok
    assert r.append_result.msg_num == 10
    assert sync_store.wait_for_dispatch()
    offset = 0
    for i in range(10):
        m = sync_store.look_message_by_offset(offset)
        assert m is not None and m.body == b"body%d" % i and m.queue_offset == i
        offset += m.store_size
        g = sync_store.get_message("g", "batch-write-topic", 0, i, 1)
        assert g.status is GetMessageStatus.FOUND and g.messages[0].body == b"body%d" % i
    assert offset == r.append_result.wrote_bytes
    assert len(r.append_result.msg_id.split(",")) == 10


def test_put_ipv6_host_messages(sync_store):
    """BatchPutMessageTest.testPutIPv6HostMessages."""
    r = sync_store.put_messages(batch_msgs(born_host=("::1", 1234)))
    assert r.ok
    offset = 0
    for i in range(10):
        m = sync_store.look_message_by_offset(offset)
        assert m.born_host == ("::1", 1234) and m.body == b"body%d" % i
        offset += m.store_size


def test_batch_that_does_not_fit_moves_to_the_next_segment(store):
    while store.get_max_phy_offset() % SEG < SEG - 1500:
        assert store.put_message(Message("F", b"f" * 500)).ok
    end = store.get_max_phy_offset()
    r = store.put_messages([Message("B", b"b" * 200) for _ in range(10)])
    assert r.ok
    assert r.append_result.wrote_offset == (end // SEG + 1) * SEG
    assert struct.unpack(">ii", store.commitlog.read(end, 8)) == (SEG - end % SEG, MAGIC_BLANK)
    assert store.wait_for_dispatch()
    g = store.get_message("g", "B", 0, 0, 32)
    assert [m.queue_offset for m in g.messages] == list(range(10))


def test_batch_with_a_bad_message_stores_nothing(store):
    assert store.put_message(Message("B", b"first")).ok
    before = store.get_max_phy_offset()
    cases = [
        (batch_msgs(topic="B")[:5] + [Message("B", b"x", properties={"p": "v" * 40000})],
         S.PROPERTIES_SIZE_EXCEEDED),
        (batch_msgs(topic="B")[:5] + [Message("other", b"x")], S.MESSAGE_ILLEGAL),
        (batch_msgs(topic="B")[:5] + [Message("B", b"x", queue_id=1)], S.MESSAGE_ILLEGAL),
        (batch_msgs(topic="B")[:5] + [Message("B", b"x", sys_flag=0x4)], S.MESSAGE_ILLEGAL),
        (batch_msgs(topic="B")[:5] + [Message("B", b"x", properties={"DELAY": "3"})], S.MESSAGE_ILLEGAL),
        ([Message("B", b"x%d" % i, properties={"DELAY": "2"}) for i in range(4)], S.MESSAGE_ILLEGAL),
        ([Message("B", b"x%d" % i, properties={"DELAY": "2", "UNIQ_KEY": "U%d" % i}) for i in range(4)],
         S.MESSAGE_ILLEGAL),                           # RocketMQ: no delay level in a batch
        ([Message("B", b"x" * 3000) for _ in range(8)], S.MESSAGE_ILLEGAL),     # > one segment
        ([], S.MESSAGE_ILLEGAL),
    ]
    for msgs, status in cases:
        assert store.put_messages(msgs).status is status
    assert store.get_max_phy_offset() == before
    r = store.put_message(Message("B", b"second"))
    assert r.append_result.logics_offset == 1


def test_batch_body_over_max_message_size(tiny_config, open_store):
    st = open_store(tiny_config(max_message_size=1000))
    assert st.put_messages([Message("B", b"x" * 400) for _ in range(3)]).status is S.MESSAGE_ILLEGAL
    assert st.put_messages([Message("B", b"x" * 400) for _ in range(2)]).ok


def test_dynamic_max_message_size(tiny_config, open_store):
    """RocketMQ's testDynamicMaxMessageSize: the limit is read on every put, single or batch."""
    st = open_store(tiny_config(max_message_size=1000))
    body = b"x" * 1010
    assert st.put_message(Message("D", body)).status is S.MESSAGE_ILLEGAL
    assert st.put_messages([Message("D", body)]).status is S.MESSAGE_ILLEGAL
    st.config = st.config.replace(max_message_size=1010)
    assert st.put_message(Message("D", body)).ok
    assert st.put_messages([Message("D", body)]).ok
    st.config = st.config.replace(max_message_size=10)
    assert st.put_message(Message("D", body)).status is S.MESSAGE_ILLEGAL
    assert st.put_messages([Message("D", body)]).status is S.MESSAGE_ILLEGAL


def test_keys_fixed_at_open_cannot_change_while_open(tiny_config, open_store):
    st = open_store(tiny_config())
    with pytest.raises(ConfigError, match="flush_disk_type cannot change while the store is open"):
        st.config = st.config.replace(flush_disk_type="SYNC_FLUSH")
    assert st.config.flush_disk_type == "ASYNC_FLUSH"
    with pytest.raises(RuntimeError, match="started already"):
        st.start()


def test_transient_store_pool(tiny_config, open_store, wait_until):
    cfg = tiny_config(transient_store_pool_enable=True, transient_store_pool_size=3)
    st = open_store(cfg)
    assert st.commitlog.pool is not None
    results = [st.put_message(Message("P", b"p%04d" % i + b"." * 400)) for i in range(100)]
    assert all(r.ok for r in results)
    end = results[-1].append_result.next_offset
    assert wait_until(lambda: st.get_max_phy_offset() == end)          # committed
    assert st.wait_for_dispatch()
    got = []
    offset = 0
    while offset < 100:
        r = st.get_message("g", "P", 0, offset, 32)
        assert r.status is GetMessageStatus.FOUND
        got.extend(m.body[:5] for m in r.messages)
        offset = r.next_begin_offset
    assert got == [b"p%04d" % i for i in range(100)]
    st.shutdown()
    assert not __import__("os").path.exists(cfg.abort_path)
    st2 = open_store(cfg)
    assert st2.get_max_phy_offset() == end
    assert st2.get_max_offset_in_queue("P", 0) == 100
    r = st2.put_message(Message("P", b"after restart"))
    assert r.ok and r.append_result.logics_offset == 100
    assert st2.wait_for_dispatch() and wait_until(lambda: st2.get_message(
        "g", "P", 0, 100, 1).status is GetMessageStatus.FOUND)


def test_transient_pool_is_ignored_under_sync_flush(tiny_config, open_store):
    st = open_store(tiny_config(transient_store_pool_enable=True, flush_disk_type="SYNC_FLUSH"))
    assert st.commitlog.pool is None
    assert st.put_message(Message("T", b"x")).ok


def test_slave_refuses_puts(tiny_config, open_store):
    st = open_store(tiny_config(broker_role="SLAVE"))
    assert st.put_message(Message("T", b"x")).status is S.SERVICE_NOT_AVAILABLE
    assert st.put_messages([Message("T", b"x")]).status is S.SERVICE_NOT_AVAILABLE


def test_not_started_and_shut_down_stores_refuse_puts(tiny_config, open_store):
    st = open_store(tiny_config(), start=False)
    assert st.put_message(Message("T", b"x")).status is S.SERVICE_NOT_AVAILABLE
    st.start()
    assert st.put_message(Message("T", b"x")).ok
    st.shutdown()
    assert st.put_message(Message("T", b"x")).status is S.SERVICE_NOT_AVAILABLE
    assert st.put_messages([Message("T", b"x")]).status is S.SERVICE_NOT_AVAILABLE
    assert st.get_message("g", "T", 0, 0, 1) is None


def test_unwritable_store_refuses_puts(store):
    from core.running_flags import DISK_FULL, NOT_READABLE
    store.flags.set(DISK_FULL)
    assert store.put_message(Message("T", b"x")).status is S.SERVICE_NOT_AVAILABLE
    store.flags.clear(DISK_FULL)
    assert store.put_message(Message("T", b"x")).ok
    store.flags.set(NOT_READABLE)
    assert store.get_message("g", "T", 0, 0, 1) is None
    store.flags.clear(NOT_READABLE)


def test_stored_fields(store):
    msg = Message("F", b"fields", queue_id=2, flag=7, tags="t", keys=["k1", "k2"],
                  properties={"UNIQ_KEY": "U-1", "custom": "v"}, born_timestamp=123,
                  born_host=("10.1.2.3", 4567), reconsume_times=3)
    r = store.put_message(msg)
    m = decode_message(store.commitlog.look_record(r.append_result.wrote_offset))
    assert (m.topic, m.queue_id, m.flag, m.tags, m.keys_list) == ("F", 2, 7, "t", ["k1", "k2"])
    assert m.properties == {"UNIQ_KEY": "U-1", "custom": "v"}
    assert (m.born_timestamp, m.born_host, m.reconsume_times) == (123, ("10.1.2.3", 4567), 3)
    assert m.store_host == ("127.0.0.1", 10911)
    assert m.store_timestamp == r.append_result.store_timestamp
    assert m.msg_id == r.append_result.msg_id
