"""The streaming reader and the writers of the `mqstore` Spark source, without Spark, against a
real store (`mqstore start` and its services): offsets, limits, partitions and reads as
Spark's driver and workers call them, and rows produced as a write task does."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from ipc import Admin, Producer
from pipeline.stream_read import QueueStreamReader, spread
from pipeline.write import ProducerStreamWriter, ProducerWriter, Produced
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore
from tests.pipeline.arrow_rows import record_batch, rows_of


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("spark"), mapped_file_size_commitlog=256 * 1024).start()
    yield s
    s.ensure_stopped()


def reader(store, **options) -> QueueStreamReader:
    return QueueStreamReader(CaseInsensitiveDict({"address": store.address, **options}))


def read_between(r: QueueStreamReader, start: dict, end: dict) -> list[dict]:
    return rows_of(b for p in r.partitions(start, end) for b in r.read(p))


def put(store, topic: str, n: int, tags=None, start: int = 0) -> None:
    with Producer(store.address) as p:
        for i in range(start, start + n, 10):
            res = p.send_batch(topic, [f"{topic}-{j}".encode() for j in range(i, min(i + 10, start + n))],
                               queue_id=(i // 10) % 4)
            assert res.ok
        if tags:
            for i, tag in enumerate(tags):
                assert p.send(topic, f"tagged-{i}".encode(), tags=tag, queue_id=i % 4).ok


def dispatched(store, topic: str, total: int) -> None:
    with Admin(store.address) as admin:
        assert wait_for(lambda: sum(q["max_offset"] for q in admin.queue_offsets(topic)) >= total)


def test_batches_cover_every_queue_once_and_resume_from_offsets(store):
    put(store, "S1", 200)
    dispatched(store, "S1", 200)
    r = reader(store, topic="S1")
    start = r.initialOffset()
    assert start == {"topic": "S1", "queues": {"0": 0, "1": 0, "2": 0, "3": 0}}
    end = r.latestOffset(start, ReadAllAvailable())
    assert sum(end["queues"].values()) == 200
    rows = read_between(r, start, end)
    assert sorted(r["body"] for r in rows) == sorted(f"S1-{j}".encode() for j in range(200))
    for q in range(4):
        offsets = [r["queue_offset"] for r in rows if r["queue_id"] == q]
        assert offsets == list(range(len(offsets)))
    assert read_between(r, start, end) == rows                     # a replayed batch: the same rows
    put(store, "S1", 40, start=200)
    dispatched(store, "S1", 240)
    later = r.latestOffset(end, ReadAllAvailable())
    more = read_between(reader(store, topic="S1"), end, later)       # a restarted query's reader
    assert sorted(r["body"] for r in more) == sorted(f"S1-{j}".encode() for j in range(200, 240))
    assert r.latestOffset(later, ReadAllAvailable()) == later


def test_max_messages_per_trigger_spreads_over_queues(store):
    put(store, "S2", 100)
    dispatched(store, "S2", 100)
    r = reader(store, topic="S2", maxMessagesPerTrigger="30")
    assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
    start, seen = r.initialOffset(), []
    for _ in range(4):
        end = r.latestOffset(start, r.getDefaultReadLimit())
        batch = read_between(r, start, end)
        assert len(batch) == min(30, 100 - len(seen))
        seen += batch
        start = end
    assert sorted(r["body"] for r in seen) == sorted(f"S2-{j}".encode() for j in range(100))


def test_starting_offsets_tag_filter_available_now_and_group(store):
    put(store, "S3", 40, tags=["a", "b", "a", "c"])
    dispatched(store, "S3", 44)
    r = reader(store, topic="S3", tagFilter="a || c", group="spark-g")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    put(store, "S3", 8, start=40)                                    # after the availableNow target
    end = r.latestOffset(start, ReadAllAvailable())
    assert sum(end["queues"].values()) == 44
    assert sorted(x["body"] for x in read_between(r, start, end)) == [b"tagged-0", b"tagged-2", b"tagged-3"]
    r.commit(end)
    with Admin(store.address) as admin:
        assert admin.fetch_offset("spark-g", "S3", 0) == end["queues"]["0"]
    latest = reader(store, topic="S3", startingOffsets="latest")
    dispatched(store, "S3", 52)
    assert sum(latest.initialOffset()["queues"].values()) == 52
    given = reader(store, topic="S3", startingOffsets='{"1": 5}').initialOffset()["queues"]
    assert given["1"] == 5 and given["0"] == 0


def test_a_topic_not_created_yet_starts_empty_and_its_queues_are_read_when_they_come(store):
    r = reader(store, topic="Later")
    start = r.initialOffset()
    assert start == {"topic": "Later", "queues": {}}
    assert r.partitions(start, r.latestOffset(start, ReadAllAvailable())) == []
    put(store, "Later", 20)
    dispatched(store, "Later", 20)
    end = r.latestOffset(start, ReadAllAvailable())
    assert len(read_between(r, start, end)) == 20


@pytest.mark.parametrize("options, error", [
    ({}, "option topic is required"),
    ({"topic": "T", "startingOffsets": "first"}, "option startingOffsets='first'"),
    ({"topic": "T", "startingOffsets": '{"0": -1}'}, "option startingOffsets=.{.0.: -1}.: earliest"),
    ({"topic": "T", "maxMessagesPerTrigger": "-1"}, "maxMessagesPerTrigger=-1: at least 0"),
])
def test_bad_stream_options_are_named(store, options, error):
    with pytest.raises(ValueError, match=error):
        reader(store, **options)


@given(available=st.dictionaries(st.sampled_from("0123456789"), st.integers(0, 500)),
       budget=st.integers(1, 2000))
def test_spread_takes_what_it_may_and_no_more(available, budget):
    take = spread(available, budget)
    assert all(0 <= take[q] <= available[q] for q in available)
    assert sum(take.values()) == min(budget, sum(available.values()))


def test_writer_produces_rows_with_their_columns(store):
    rows = [dict(topic="W1", body=f"w{i}".encode(), tags="t" if i % 2 else None, keys=[f"k{i}"],
                 properties={"origin": "spark"}, queue_id=i % 2) for i in range(250)]
    w = ProducerWriter(CaseInsensitiveDict({"address": store.address, "batchSize": "64"}), False)
    assert w.write(iter([record_batch(rows[:100]), record_batch(rows[100:])])) == \
        Produced(250, sum(len(r["body"]) for r in rows))
    dispatched(store, "W1", 250)
    r = reader(store, topic="W1")
    start = r.initialOffset()
    got = read_between(r, start, r.latestOffset(start, ReadAllAvailable()))
    assert sorted(x["body"] for x in got) == sorted(row["body"] for row in rows)
    one = next(x for x in got if x["body"] == b"w7")
    assert (one["queue_id"], one["tags"], one["keys"], one["properties"]["origin"]) == (1, "t", "k7", "spark")
    assert {x["queue_id"] for x in got} == {0, 1}


def test_stream_writer_takes_the_topic_option_and_string_bodies(store):
    w = ProducerStreamWriter(CaseInsensitiveDict({"address": store.address, "topic": "W2"}))
    assert w.write(iter([record_batch([dict(body=f"s{i}") for i in range(30)])])).messages == 30
    dispatched(store, "W2", 30)


@pytest.mark.parametrize("rows, error", [
    ([dict(value=b"x")], "no body column"),
    ([dict(topic="W3", body=b"x"), dict(topic="W3", body=None)], "null body"),
    ([dict(body=b"x")], "no topic"),
    ([dict(topic="W3", body=b"x" * (5 << 20))], "the store refused a batch of 'W3': MESSAGE_ILLEGAL"),
])
def test_rows_that_cannot_be_stored_fail_the_task_with_the_reason(store, rows, error):
    w = ProducerWriter(CaseInsensitiveDict({"address": store.address}), False)
    with pytest.raises((ValueError, RuntimeError), match=error):
        w.write(iter([record_batch(rows)]))


def test_overwrite_is_refused(store):
    with pytest.raises(ValueError, match='mode "overwrite"'):
        ProducerWriter(CaseInsensitiveDict({"address": store.address}), True)


@pytest.mark.slow
def test_path_follows_a_store_restarted_on_other_ports(tmp_path):
    s = SupervisedStore(tmp_path, "moving").start()
    try:
        w = ProducerWriter(CaseInsensitiveDict({"path": s.root, "topic": "M"}), False)
        assert w.write(iter([record_batch([dict(body=b"m%d" % i) for i in range(40)])])).messages == 40
        dispatched(s, "M", 40)
        r = QueueStreamReader(CaseInsensitiveDict({"path": s.root, "topic": "M"}))
        start = r.initialOffset()
        end = r.latestOffset(start, ReadAllAvailable())
        first = s.address
        assert s.stop() == 0
        s.start()
        assert s.address != first
        assert len(read_between(r, start, end)) == 40                  # planned before, read after
        assert w.write(iter([record_batch([dict(body=b"again")])])).messages == 1
    finally:
        s.ensure_stopped()
    with pytest.raises(ConnectionError, match="no running store"):
        QueueStreamReader(CaseInsensitiveDict({"path": s.root, "topic": "M"}))


def test_a_planned_range_the_store_does_not_have_fails_the_read(store, monkeypatch):
    import pipeline.stream_read as stream_read
    put(store, "Short", 10)
    dispatched(store, "Short", 10)
    monkeypatch.setattr(stream_read, "MISSING_WAIT_S", 0.3)
    part = stream_read.QueueRange(store.address, None, "Short", 0, 0, 50, None)
    with pytest.raises(ValueError, match="offsets up to 50 were planned but a pull at 10 answers"):
        list(stream_read.read_queue_range(part))


def test_the_topic_option_wins_over_a_topic_column(store):
    """A DataFrame read from one topic (it has a topic column) written with another named."""
    w = ProducerWriter(CaseInsensitiveDict({"address": store.address, "topic": "Renamed"}), False)
    rows = [dict(topic="Original", body=b"r%d" % i) for i in range(20)]
    assert w.write(iter([record_batch(rows)])).messages == 20
    dispatched(store, "Renamed", 20)
    with Admin(store.address) as admin:
        assert "Original" not in admin.topics()


def test_batch_reads_of_a_store_being_written_see_whole_messages(store):
    """The files read while a producer appends (and the allocator makes segments ahead)."""
    import threading
    from pipeline.batch_read import CommitLogReader
    stop, started = threading.Event(), threading.Event()

    def keep_writing() -> None:
        with Producer(store.address) as p:
            i = 0
            while not stop.is_set():
                assert p.send_batch("Live", [b"live-%06d" % (i + j) for j in range(50)]).ok
                started.set()
                i += 50
    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        assert started.wait(10)
        counts, deadline = [], time.monotonic() + 1.5
        while time.monotonic() < deadline:
            r = CommitLogReader(CaseInsensitiveDict({"path": store.root, "topic": "Live"}))
            rows = rows_of(b for p in r.partitions() for b in r.read(p))
            assert all(x["body"].startswith(b"live-") and len(x["body"]) == 11 for x in rows)
            counts.append(len(rows))
    finally:
        stop.set()
        writer.join()
    assert counts == sorted(counts) and counts[-1] > counts[0] > 0


def test_a_checkpoint_of_another_topic_is_refused(store):
    put(store, "OtherA", 10)
    dispatched(store, "OtherA", 10)
    start = reader(store, topic="OtherA").initialOffset()
    r = reader(store, topic="S1")
    with pytest.raises(ValueError, match="checkpoint holds offsets of topic 'OtherA'"):
        r.latestOffset(start, ReadAllAvailable())
    with pytest.raises(ValueError, match="checkpointLocation of its own"):
        r.partitions(start, start)


@pytest.mark.slow
def test_group_offsets_a_store_cannot_take_are_logged_not_raised(tmp_path, caplog):
    s = SupervisedStore(tmp_path, "gone").start()
    r = QueueStreamReader(CaseInsensitiveDict({"address": s.address, "topic": "G", "group": "g1"}))
    s.stop()
    with caplog.at_level("WARNING"):
        r.commit({"topic": "G", "queues": {"0": 5}})
    assert "offsets of G not committed" in caplog.text


def test_batches_stay_under_the_byte_cap(store, monkeypatch):
    """Bodies of one put_batch are capped (4 MiB, as RocketMQ's producer): here 200 KB, below
    the test store's 256 KiB segments, which one batch of all the rows would not fit."""
    import pipeline.write as write
    monkeypatch.setattr(write, "BATCH_BYTES", 200_000)
    w = ProducerWriter(CaseInsensitiveDict({"address": store.address, "topic": "Big"}), False)
    assert w.write(iter([record_batch([dict(body=bytes(10_000)) for _ in range(100)])])).messages == 100
    dispatched(store, "Big", 100)
