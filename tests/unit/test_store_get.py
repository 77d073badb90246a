"""`MessageStore` read path with RocketMQ's DefaultMessageStoreTest and ReputMessageServiceTest
numbers: lookups by physical offset and id, offset by time, store timestamps, pull sizes, the
tag filter, every GetMessageStatus, index queries, and visibility under SYNC_FLUSH."""
from __future__ import annotations

import threading
import time

import pytest

from core.record.crc_property import CRC32_RESERVED_LEN
from core.log.commitlog import now_ms
from core.record.message import Message
from core.status import GetMessageStatus

G = GetMessageStatus
SEG = 4096 * 4


def put_n(store, n, topic="T", queue_id=0, body=lambda i: b"body-%d" % i, **kw):
    results = [store.put_message(Message(topic, body(i), queue_id=queue_id, **kw)) for i in range(n)]
    assert all(r.ok for r in results)
    return [r.append_result for r in results]


def test_look_message_by_offset_first_last_and_out_of_bound(store):
    """DefaultMessageStoreTest.testLookMessageByOffset_*."""
    res = put_n(store, 10, body=lambda i: b"Once, there was a chance for me! offset %d" % i)
    first = store.look_message_by_offset(res[0].wrote_offset)
    assert first.body == b"Once, there was a chance for me! offset 0"
    sized = store.look_message_by_offset(res[0].wrote_offset, res[0].wrote_bytes)
    assert sized.body == first.body
    last = store.look_message_by_offset(res[-1].wrote_offset)
    assert last.body == b"Once, there was a chance for me! offset 9"
    assert store.look_message_by_offset(res[-1].next_offset) is None
    assert store.look_message_by_offset(10 ** 12) is None
    assert store.look_message_by_offset(res[0].wrote_offset + 1) is None      # not a record


def test_view_message_by_id(store):
    res = put_n(store, 3)
    for i, r in enumerate(res):
        m = store.view_message_by_id(r.msg_id)
        assert m.body == b"body-%d" % i and m.msg_id == r.msg_id
    assert store.view_message_by_id("not-an-id") is None
    assert store.view_message_by_id("7F00000100002A9F" + "%016X" % 10 ** 9) is None


def put_spaced(store, n, gap_ms=10, topic="FooBar"):
    """Put `n` messages at least `gap_ms` apart (polling the clock, no fixed sleep)."""
    results = []
    for i in range(n):
        if results:
            target = results[-1].store_timestamp + gap_ms
            deadline = time.monotonic() + 5
            while now_ms() < target and time.monotonic() < deadline:
                time.sleep(0.001)
        r = store.put_message(Message(topic, b"m%d" % i))
        assert r.ok
        results.append(r.append_result)
    assert store.wait_for_dispatch()
    return results


def test_get_offset_in_queue_by_time(store):
    """DefaultMessageStoreTest.testGetOffsetInQueueByTime and its skew variants."""
    res = put_spaced(store, 10)
    for i, r in enumerate(res):
        assert res[i].store_timestamp >= res[0].store_timestamp + 10 * i
        assert store.get_offset_in_queue_by_time("FooBar", 0, r.store_timestamp) == i
        assert store.get_offset_in_queue_by_time("FooBar", 0, r.store_timestamp - 2) == i
        phys = store.get_commit_log_offset_in_queue("FooBar", 0, i)
        assert phys == r.wrote_offset
    assert store.get_offset_in_queue_by_time("FooBar", 0, res[0].store_timestamp - 20_000) == 0
    assert store.get_offset_in_queue_by_time("FooBar", 1, res[0].store_timestamp) == 0
    assert store.get_offset_in_queue_by_time("nope", 0, res[0].store_timestamp) == 0
    after = store.get_offset_in_queue_by_time("FooBar", 0, res[-1].store_timestamp + 20_000)
    assert after == 10


def test_get_message_store_timestamp(store):
    """DefaultMessageStoreTest.testGetMessageStoreTimeStamp and the not-found cases."""
    res = put_n(store, 10)
    assert store.wait_for_dispatch()
    for i, r in enumerate(res):
        assert store.get_message_store_timestamp("T", 0, i) == r.store_timestamp
    assert store.get_message_store_timestamp("T", 1, 0) == -1
    assert store.get_message_store_timestamp("T", 1, -1) == -1
    assert store.get_message_store_timestamp("T", 0, -1) == -1
    assert store.get_message_store_timestamp("T", 0, 10) == -1
    assert store.commitlog.pickup_store_timestamp(-10, 138) == -1
    assert store.get_earliest_message_time() == res[0].store_timestamp
    assert store.get_earliest_message_time("T", 0) == res[0].store_timestamp


def test_pull_size(store):
    """DefaultMessageStoreTest.testPullSize: 32 messages, max 32/20/10."""
    put_n(store, 32)
    assert store.wait_for_dispatch()
    for max_msgs in (32, 20, 10):
        r = store.get_message("g", "T", 0, 0, max_msgs)
        assert r.status is G.FOUND
        assert r.message_count == max_msgs
        assert r.next_begin_offset == max_msgs
        assert r.queue_offsets == list(range(max_msgs))


def test_pull_is_capped_by_the_in_memory_transfer_count(store):
    put_n(store, 45)
    assert store.wait_for_dispatch()
    r = store.get_message("g", "T", 0, 0, 64)
    assert r.message_count == 32                       # max_transfer_count_on_message_in_memory
    assert r.next_begin_offset == 32


def test_pull_is_capped_by_transfer_bytes(tiny_config, open_store):
    st = open_store(tiny_config(max_transfer_bytes_on_message_in_memory=1000))
    put_n(st, 10, body=lambda i: b"x" * 300)
    assert st.wait_for_dispatch()
    r = st.get_message("g", "T", 0, 0, 32)
    assert r.message_count == 2                        # a third record would pass 1000 bytes
    assert r.next_begin_offset == 2


def test_pull_stops_at_the_consume_queue_file_end(store):
    put_n(store, 60)                                   # 50 entries per consume-queue file
    assert store.wait_for_dispatch()
    r = store.get_message("g", "T", 0, 40, 32)
    assert r.message_count == 10 and r.next_begin_offset == 50
    r = store.get_message("g", "T", 0, 50, 32)
    assert r.message_count == 10 and r.next_begin_offset == 60


def test_tag_filter(store):
    tags = ["TagA", "TagB", "TagC"]
    for i in range(30):
        assert store.put_message(Message("Tags", b"%d" % i, tags=tags[i % 3])).ok
    assert store.put_message(Message("Tags", b"untagged")).ok
    assert store.wait_for_dispatch()
    ab = store.get_message("g", "Tags", 0, 0, 32, "TagA || TagB")
    assert ab.status is G.FOUND
    assert [m.tags for m in ab.messages] == [tags[i % 3] for i in range(30) if i % 3 != 2]
    assert ab.next_begin_offset == 31                  # scanned past the filtered entries
    assert store.get_message("g", "Tags", 0, 0, 32, "*").message_count == 31
    assert store.get_message("g", "Tags", 0, 0, 32, None).message_count == 31
    c = store.get_message("g", "Tags", 0, 0, 32, " TagC ")
    assert [m.body for m in c.messages] == [b"%d" % i for i in range(2, 30, 3)]
    none = store.get_message("g", "Tags", 0, 0, 32, "TagZ")
    assert none.status is G.NO_MATCHED_MESSAGE
    assert none.message_count == 0 and none.next_begin_offset == 31


def test_get_message_statuses(store):
    put_n(store, 5, topic="S")
    assert store.wait_for_dispatch()
    # RocketMQ creates a queue on first lookup: an unknown topic or queue is an empty queue
    r = store.get_message("g", "unknown", 0, 3, 1)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (G.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    r = store.get_message("g", "S", 7, 0, 1)
    assert r.status is G.NO_MESSAGE_IN_QUEUE
    assert (store.get_min_offset_in_queue("S", 7), store.get_max_offset_in_queue("S", 7)) == (0, 0)
    store.cq_store.find_or_create("Empty", 0)
    r = store.get_message("g", "Empty", 0, 3, 1)
    assert (r.status, r.next_begin_offset) == (G.NO_MESSAGE_IN_QUEUE, 0)
    r = store.get_message("g", "S", 0, 5, 1)
    assert (r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (G.OFFSET_OVERFLOW_ONE, 5, 0, 5)
    r = store.get_message("g", "S", 0, 9, 1)
    assert r.status is G.OFFSET_OVERFLOW_BADLY
    assert r.next_begin_offset == 5                    # RocketMQ 5: the max offset
    r = store.get_message("g", "S", 0, 4, 1)
    assert (r.status, r.next_begin_offset, r.messages[0].body) == (G.FOUND, 5, b"body-4")


def test_a_slave_keeps_the_requested_offset_unless_it_checks_offsets(tiny_config, open_store):
    """RocketMQ's nextOffsetCorrection: a SLAVE answers a bad offset with the offset asked
    for (its queue may only lag the master's), unless offset_check_in_slave is on."""
    master = open_store(tiny_config())
    put_n(master, 5, topic="S")
    assert master.wait_for_dispatch()
    master.shutdown()
    nexts = {}
    for check in (False, True):
        slave = open_store(tiny_config(broker_role="SLAVE", offset_check_in_slave=check))
        nexts[check] = [(r.status, r.next_begin_offset) for r in
                        (slave.get_message("g", "S", 0, 9, 1), slave.get_message("g", "S", 1, 3, 1),
                         slave.get_message("g", "S", 0, 5, 1))]
        slave.shutdown()
    assert nexts[False] == [(G.OFFSET_OVERFLOW_BADLY, 9), (G.NO_MESSAGE_IN_QUEUE, 3), (G.OFFSET_OVERFLOW_ONE, 5)]
    assert nexts[True] == [(G.OFFSET_OVERFLOW_BADLY, 5), (G.NO_MESSAGE_IN_QUEUE, 0), (G.OFFSET_OVERFLOW_ONE, 5)]


def test_offset_too_small_after_commitlog_files_expire(store):
    res = put_n(store, 80, topic="X", body=lambda i: b"x" * 900)
    assert store.wait_for_dispatch()
    segments = len(store.commitlog.queue.files)
    assert segments >= 4
    assert store.delete_expired_files() == 0           # nothing is 72 hours old
    # A segment a background thread (flush, reput, prefault) holds that moment is deleted on a
    # later pass, as RocketMQ's cleaner retries a file still in use: pass again a few times.
    deleted = 0
    for _ in range(200):
        deleted += store.delete_expired_files(clean_immediately=True)
        if deleted >= segments - 1:
            break
        time.sleep(0.005)
    assert deleted == segments - 1                      # never the last segment
    min_phys = store.get_min_phy_offset()
    assert min_phys == deleted * SEG
    first_left = next(i for i, r in enumerate(res) if r.wrote_offset >= min_phys)
    assert store.get_min_offset_in_queue("X", 0) == first_left
    r = store.get_message("g", "X", 0, 0, 1)
    assert (r.status, r.next_begin_offset) == (G.OFFSET_TOO_SMALL, first_left)
    assert (r.min_offset, r.max_offset) == (first_left, 80)
    r = store.get_message("g", "X", 0, first_left, 32)
    assert r.status is G.FOUND and r.queue_offsets[0] == first_left
    assert store.look_message_by_offset(0) is None
    assert store.get_offset_in_queue_by_time("X", 0, 0) == first_left
    assert store.put_message(Message("X", b"after")).append_result.logics_offset == 80


def test_query_message_newest_first_with_key_recheck(store):
    assert store.put_message(Message("Q", b"k-1", keys="order-1 shared")).ok
    assert store.put_message(Message("Q", b"k-2", keys="shared")).ok
    assert store.put_message(Message("Q", b"u-1", properties={"UNIQ_KEY": "U1"})).ok
    assert store.put_message(Message("Q", b"aa", keys="Aa")).ok      # "Aa" and "BB" collide
    assert store.put_message(Message("Q", b"bb", keys="BB")).ok
    assert store.put_message(Message("Other", b"other", keys="shared")).ok
    assert store.wait_for_dispatch()
    end = now_ms() + 1000
    shared = store.query_message("Q", "shared", 32, 0, end)
    assert [m.body for m in shared.messages] == [b"k-2", b"k-1"]
    assert [m.body for m in store.query_message("Q", "order-1", 32, 0, end).messages] == [b"k-1"]
    assert [m.body for m in store.query_message("Q", "U1", 32, 0, end).messages] == [b"u-1"]
    assert [m.body for m in store.query_message("Q", "Aa", 32, 0, end).messages] == [b"aa"]
    assert [m.body for m in store.query_message("Q", "BB", 32, 0, end).messages] == [b"bb"]
    assert [m.body for m in store.query_message("Other", "shared", 32, 0, end).messages] == [b"other"]
    assert store.query_message("Q", "shared", 1, 0, end).messages[0].body == b"k-2"
    assert store.query_message("Q", "shared", 32, end + 10_000, end + 20_000).messages == []
    assert store.query_message("Q", "missing", 32, 0, end).messages == []


def test_query_across_index_files(store):
    """512 entries per index file: 700 keyed messages roll to a second file."""
    for i in range(700):
        assert store.put_message(Message("I", b"%d" % i, keys="k%d" % (i % 7))).ok
    assert store.wait_for_dispatch()
    assert len(store.index_service.files) >= 2
    r = store.query_message("I", "k3", 64, 0, now_ms() + 1000)
    assert [int(m.body) for m in r.messages] == [i for i in range(699, -1, -1) if i % 7 == 3][:64]


def test_reput_waits_for_flush_under_sync_flush(tiny_config, open_store):
    """ReputMessageServiceTest: with nothing flushed, a SYNC_FLUSH store shows nothing."""
    st = open_store(tiny_config(flush_disk_type="SYNC_FLUSH"))
    st.flush_service.stop()                            # nobody flushes from now on
    for i in range(10):
        r = st.put_message(Message("FooBar", b"Once, there was a chance for me!", tags="TAG1",
                                   keys=str(1_700_000_000_000 + i), properties={"WAIT": "false"}))
        assert r.ok
    assert st.get_max_phy_offset() == 10 * (158 + len("WAIT\x01false\x02") + CRC32_RESERVED_LEN)
    assert st.commitlog.queue.flushed_where == 0
    assert st.get_confirm_offset() == st.commitlog.queue.flushed_where
    assert st.wait_for_dispatch()                      # caught up with the confirm offset
    assert st.get_max_offset_in_queue("FooBar", 0) == 0
    assert st.get_message("g", "FooBar", 0, 0, 10).status in (
        G.NO_MATCHED_LOGIC_QUEUE, G.NO_MESSAGE_IN_QUEUE)
    assert st.flush() == st.get_max_phy_offset()
    assert st.wait_for_dispatch()
    assert st.get_message("g", "FooBar", 0, 0, 10).message_count == 10


def test_reput_does_not_wait_for_flush_under_async_flush(store):
    store.flush_service.stop()
    put_n(store, 10, topic="FooBar")
    assert store.commitlog.queue.flushed_where == 0
    assert store.get_confirm_offset() == store.get_max_phy_offset()
    assert store.wait_for_dispatch()
    assert store.get_message("g", "FooBar", 0, 0, 10).message_count == 10


def test_dispatch_never_passes_the_flushed_position(sync_store):
    stop = threading.Event()
    violations = []
    queue = sync_store.commitlog.queue

    def watch():
        while not stop.is_set():
            reput = sync_store.reput_service.reput_from
            cq = sync_store.cq_store.find("W", 0)
            cq_end = cq.max_physic_offset if cq else -1
            flushed = queue.flushed_where
            if reput > flushed or cq_end > flushed:
                violations.append((reput, cq_end, flushed))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(300):
            assert sync_store.put_message(Message("W", b"w" * 200, properties={
                "WAIT": "false" if i % 2 else "true"})).ok
    finally:
        stop.set()
        watcher.join()
    assert not violations
    sync_store.flush()
    assert sync_store.wait_for_dispatch()
    assert sync_store.get_max_offset_in_queue("W", 0) == 300


def test_consumer_sees_message_after_dispatch(store, wait_until):
    r = store.put_message(Message("Live", b"hello"))
    assert wait_until(lambda: store.get_message("g", "Live", 0, 0, 1).status is G.FOUND)
    got = store.get_message("g", "Live", 0, 0, 1).messages[0]
    assert got.commit_log_offset == r.append_result.wrote_offset


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_both_flush_modes_round_trip(tiny_config, open_store, flush):
    st = open_store(tiny_config(flush_disk_type=flush))
    res = put_n(st, 100, topic="M", body=lambda i: b"%05d" % i * 40)
    assert st.wait_for_dispatch()
    offset, bodies = 0, []
    while offset < 100:
        r = st.get_message("g", "M", 0, offset, 32)
        bodies.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
    assert bodies == [b"%05d" % i * 40 for i in range(100)]
    assert st.get_max_phy_offset() == res[-1].next_offset
