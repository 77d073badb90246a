"""Delay levels in the embedded store (core.delay.put, core.delay.schedule, core.delay.offsets): a put
with DELAY goes to its schedule queue and comes back in its real topic and queue when due, no
earlier than its delay and within a second after it, in order, with its body, properties and
UNIQ_KEY; the offsets file is RocketMQ's; a missing or torn one re-delivers, never loses."""
import json
import os
import time

import pytest
from hypothesis import given, settings, strategies as st

from core import Message
from core.record.codec import SCHEDULE_TOPIC
from core.config import ConfigError, StoreConfig, parse_delay_levels
from core.status import PutMessageStatus

LEVELS = "1s 2s 3s"


def _pull_all(store, topic, queue_id, want, timeout=10.0):
    """Messages of the queue from offset 0 until `want` are there (or the deadline), each with
    the time it was first seen."""
    got, seen_at = [], []
    offset = 0
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if r is not None and r.messages:
            now = time.time() * 1000
            got += r.messages
            seen_at += [now] * len(r.messages)
            offset = r.next_begin_offset
        else:
            time.sleep(0.01)
    return got, seen_at


def test_parse_delay_levels():
    assert parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h") == (
        1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
        540000, 600000, 1200000, 1800000, 3600000, 7200000)
    assert parse_delay_levels("2d 1h") == (172800000, 3600000)
    assert StoreConfig().delay_levels_ms[2] == 10000
    for bad in ("", "1x", "5", "s", "0s", "1.5s", "-1s"):
        with pytest.raises(ConfigError) as e:
            StoreConfig(message_delay_level=bad)
        assert e.value.key == "message_delay_level" and "message_delay_level" in str(e.value)


def test_each_level_delivered_on_time_in_order(tiny_config, open_store):
    store = open_store(tiny_config(message_delay_level=LEVELS))
    sent = {}
    for level in (1, 2, 3):
        for i in range(5):
            m = Message("orders", b"L%d-%d" % (level, i), queue_id=level % 2, tags="TA",
                        keys="k%d" % i, properties={"DELAY": str(level), "UNIQ_KEY": f"U{level}{i}",
                                                    "color": "red"})
            r = store.put_message(m)
            assert r.status is PutMessageStatus.PUT_OK
            assert m.topic == "orders" and "REAL_TOPIC" not in m.properties   # the caller's copy
            sent.setdefault(level, []).append((m, r.append_result.store_timestamp,
                                               r.append_result.logics_offset))
    assert store.wait_for_dispatch()
    for level, items in sent.items():                    # stored in the schedule queue
        assert [o for _, _, o in items] == list(range(5))
        r = store.get_message("g", SCHEDULE_TOPIC, level - 1, 0, 32)
        assert [m.body for m in r.messages] == [m.body for m, _, _ in items]
        assert r.messages[0].properties["REAL_TOPIC"] == "orders"
        assert r.messages[0].properties["REAL_QID"] == str(level % 2)
    assert store.get_message("g", "orders", 0, 0, 32).messages == []
    by_queue = {0: [], 1: []}
    for q in (0, 1):
        want = sum(1 for lv in sent if lv % 2 == q) * 5
        got, seen = _pull_all(store, "orders", q, want)
        by_queue[q] = list(zip(got, seen))
    for level, items in sent.items():
        delivered = [(m, t) for m, t in by_queue[level % 2] if m.body.startswith(b"L%d-" % level)]
        assert [m.body for m, _ in delivered] == [m.body for m, _, _ in items]    # in order
        for (m, seen), (orig, stored_at, _) in zip(delivered, items):
            due = stored_at + level * 1000
            assert m.store_timestamp >= due                       # never early
            assert seen - due < 1000 + 200                         # within a second (+ poll)
            assert m.topic == "orders" and m.queue_id == level % 2
            assert m.tags == "TA" and m.keys == orig.keys
            assert m.properties["UNIQ_KEY"] == orig.properties["UNIQ_KEY"]
            assert m.properties["color"] == "red" and "DELAY" not in m.properties
            assert m.properties["REAL_TOPIC"] == "orders"
            found = store.query_message("orders", orig.properties["UNIQ_KEY"], 4, 0, 1 << 62)
            assert any(x.body == orig.body for x in found.messages)
    store.shutdown()
    table = json.load(open(os.path.join(store.config.config_dir, "delayOffset.json")))
    assert table == {"offsetTable": {"1": 5, "2": 5, "3": 5}}


def test_level_above_maximum_is_clamped_and_bad_levels(tiny_config, open_store):
    store = open_store(tiny_config(message_delay_level=LEVELS))
    r = store.put_message(Message("t", b"x", properties={"DELAY": "40"}))
    assert r.ok
    assert store.wait_for_dispatch()
    rs = store.get_message("g", SCHEDULE_TOPIC, 2, 0, 4)
    assert rs.messages[0].properties["DELAY"] == "3"
    assert store.put_message(Message("t", b"x", properties={"DELAY": "soon"})).status \
        is PutMessageStatus.MESSAGE_ILLEGAL
    for plain in ("0", "-2"):
        r = store.put_message(Message("t", b"p" + plain.encode(), properties={"DELAY": plain}))
        assert r.ok
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "t", 0, 0, 8).messages] == [b"p0", b"p-2"]
    batch = [Message("t", b"b", properties={"DELAY": "1"})] * 2
    assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL


@pytest.mark.parametrize("damage", ["missing", "torn"])
def test_offsets_file_lost_or_torn_delivers_again_without_loss(tiny_config, open_store, damage):
    cfg = tiny_config(message_delay_level=LEVELS)
    store = open_store(cfg)
    for i in range(6):
        assert store.put_message(Message("t", b"m%d" % i, properties={"DELAY": "1"})).ok
    got, _ = _pull_all(store, "t", 0, 6)
    assert len(got) == 6
    store.shutdown()
    path = os.path.join(cfg.config_dir, "delayOffset.json")
    if damage == "missing":
        os.remove(path)
    else:
        data = open(path, "rb").read()
        open(path, "wb").write(data[:len(data) // 2])
    store = open_store(cfg)
    for i in range(6, 9):
        assert store.put_message(Message("t", b"m%d" % i, properties={"DELAY": "1"})).ok
    got, _ = _pull_all(store, "t", 0, 6 + 9)
    bodies = [m.body for m in got]
    assert sorted(set(bodies)) == sorted(b"m%d" % i for i in range(9))    # none lost
    duplicates = len(bodies) - len(set(bodies))
    assert duplicates == 6                                   # the first six, once more
    if damage == "torn":
        assert os.path.exists(path + ".corrupt")


def test_delivery_after_restart_when_due_in_the_past(tiny_config, open_store):
    cfg = tiny_config(message_delay_level="1s 2s")
    store = open_store(cfg)
    for i in range(4):
        assert store.put_message(Message("t", b"p%d" % i, properties={"DELAY": "2"})).ok
    store.shutdown()                                 # down while they come due
    time.sleep(2.2)
    t0 = time.time() * 1000
    store = open_store(cfg)
    got, seen = _pull_all(store, "t", 0, 4)
    assert [m.body for m in got] == [b"p%d" % i for i in range(4)]
    assert max(seen) - t0 < 1000                          # at once, in order


def test_slave_does_not_deliver(tiny_config, open_store):
    cfg = tiny_config(message_delay_level=LEVELS)
    store = open_store(cfg)
    assert store.put_message(Message("t", b"s", properties={"DELAY": "1"})).ok
    store.shutdown()
    slave = open_store(cfg.replace(broker_role="SLAVE"))
    assert slave.schedule_service is None


def test_sync_flush_deliveries_are_flushed_once_per_batch(tiny_config, open_store):
    store = open_store(tiny_config(message_delay_level="1s", flush_disk_type="SYNC_FLUSH"))
    for i in range(40):
        assert store.put_message(Message("t", b"s%d" % i, properties={"DELAY": "1"})).ok
    got, _ = _pull_all(store, "t", 0, 40)
    assert [m.body for m in got] == [b"s%d" % i for i in range(40)]
    assert all(m.properties["WAIT"] == "false" for m in got)       # as RocketMQ delivers them
    assert store.commitlog.queue.flushed_where >= got[-1].commit_log_offset + got[-1].store_size


def test_rocketmq_fastjson_offsets_file_is_read(tmp_path):
    from core.delay.offsets import DelayOffsetStore
    d = tmp_path / "config"
    d.mkdir()
    (d / "delayOffset.json").write_text('{\n\t"offsetTable":{1:3,2:0,18:12}\n}')
    store = DelayOffsetStore(str(d))
    assert store.load() == {1: 3, 2: 0, 18: 12} and store.found and not store.dirty
    store.set(2, 5)
    store.persist()
    assert json.load(open(d / "delayOffset.json")) == {"offsetTable": {"1": 3, "2": 5, "18": 12}}
    (d / "delayOffset.json").write_text('{"offsetTable":{"1":-4}}')
    assert DelayOffsetStore(str(d)).load() == {}                  # refused: as missing
    assert (d / "delayOffset.json.corrupt").exists()


def test_batch_groups_split_where_a_batch_may_not_go():
    from core.delay.schedule import batch_groups
    m = lambda topic="a", q=0, body=b"x", flag=0, host=("127.0.0.1", 1): Message(  # noqa: E731
        topic, body, q, born_host=host, sys_flag=flag)
    msgs = [m(), m(q=1), m(), m(q=1, flag=0x8), m(q=1), m("b"), m("b", host=("10.0.0.1", 2)),
            m("b", body=b"y" * 10), m("b", body=b"y" * 10)]
    assert batch_groups(msgs, 12) == [[0, 2], [1], [3], [4], [5, 7], [6], [8]]
    assert batch_groups(msgs[:3], 100) == [[0, 2], [1]] and batch_groups([], 10) == []


PAIR = st.tuples(st.sampled_from(["DELAY", "x", "DELAYx", "xDELAY", "TAGS"]),
                 st.sampled_from(["", "1", "3", "-1", "0", "40", "a", "2 "]))


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(PAIR, max_size=6), trailing=st.booleans(),
       levels=st.sampled_from([(1000, 2000, 3000), (5000,)]))
def test_schedule_tag_code_reads_delay_as_the_property_map_does(pairs, trailing, levels):
    """The dispatcher's byte search for DELAY (core.record.codec.schedule_tag_code) against the
    property map every other reader builds (string_to_properties: the last non-empty value)."""
    from core.record.codec import schedule_tag_code
    from core.record.message import string_to_properties
    raw = "\x02".join(f"{k}\x01{v}" for k, v in pairs) + ("\x02" if trailing and pairs else "")
    level = string_to_properties(raw).get("DELAY")
    try:
        n = min(int(level), len(levels)) if level is not None else 0
    except ValueError:
        n = 0
    want = 1_000_000 + levels[n - 1] if n > 0 else 77
    assert schedule_tag_code(raw.encode(), 1_000_000, 77, levels) == want


def test_a_body_over_a_lowered_size_limit_is_skipped_not_delivered(tiny_config, open_store):
    """max_message_size lowered while messages wait (a runtime key): the one whose body is now
    over it is refused for good (skipped, counted) as a put of it would be; the others go."""
    store = open_store(tiny_config(message_delay_level="1s"))
    for body in (b"small", b"L" * 600, b"tiny"):
        assert store.put_message(Message("t", body, properties={"DELAY": "1"})).ok
    store.config = store.config.replace(max_message_size=512)
    got, _ = _pull_all(store, "t", 0, 2)
    assert [m.body for m in got] == [b"small", b"tiny"]
    job = store.schedule_service.job
    deadline = time.monotonic() + 5
    while job.skipped < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.skipped == 1 and job.delivered == 2
