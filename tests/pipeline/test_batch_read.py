"""The batch reader of the `mqstore` Spark source, without Spark: partitions() and read() as
Spark's workers call them, on stores written by core.MessageStore with tiny segments."""
from __future__ import annotations

import datetime
import os

import pytest
from hypothesis import given, settings, strategies as st
from pyspark.sql.datasource import CaseInsensitiveDict

from core.record.message import (
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_PREPARED, Message,
)
from pipeline.batch_read import CommitLogReader
from tests.pipeline.arrow_rows import rows_of


def read_all(root, **options) -> list[dict]:
    reader = CommitLogReader(CaseInsensitiveDict({"path": str(root), **options}))
    parts = reader.partitions()
    assert isinstance(parts, list)
    return rows_of(b for p in parts for b in reader.read(p))


def stored(store, topic, queues=range(4)) -> list:
    """Every message of `topic` as the store's get_message gives it, in queue order."""
    out = []
    for q in queues:
        res = store.get_message("g", topic, q, 0, 10_000)
        out += res.messages
    return out


def test_every_message_of_every_topic_with_its_fields(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)
    for i in range(300):
        msg = Message(f"T{i % 3}", os.urandom(1 + i % 200), queue_id=i % 4, tags=f"tag{i % 2}",
                      keys=[f"k{i}", f"j{i}"], properties={"p": str(i)}, flag=i % 5)
        assert store.put_message(msg).status.ok
    assert store.put_messages([Message("T0", b"batched %d" % i, queue_id=1) for i in range(20)]).status.ok
    assert store.wait_for_dispatch()
    rows = read_all(cfg.store_path_root_dir)
    assert len(CommitLogReader(CaseInsensitiveDict({"path": cfg.store_path_root_dir})).partitions()) >= 4
    assert len(rows) == 320
    assert [r["phys_offset"] for r in rows] == sorted(r["phys_offset"] for r in rows)
    by_id = {r["msg_id"]: r for r in rows}
    for topic in ("T0", "T1", "T2"):
        for m in stored(store, topic):
            r = by_id[m.msg_id]
            assert (r["topic"], r["queue_id"], r["queue_offset"], r["phys_offset"]) == \
                (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset)
            assert (r["body"], r["tags"], r["keys"], r["flag"], r["sys_flag"]) == \
                (m.body, m.tags, m.keys, m.flag, m.sys_flag)
            assert r["properties"] == m.properties
            assert "TAGS" not in r["properties"] and "KEYS" not in r["properties"]
            assert r["store_timestamp"] == datetime.datetime.fromtimestamp(
                m.store_timestamp / 1000, datetime.timezone.utc)
            assert r["born_host"].endswith(f":{m.born_host[1]}")


def test_topic_option_keeps_those_topics(tiny_config, written_store):
    cfg = tiny_config()
    written_store(cfg, 90, topics=("A", "B", "C"))
    assert {r["topic"] for r in read_all(cfg.store_path_root_dir, topic="A, C")} == {"A", "C"}
    assert len(read_all(cfg.store_path_root_dir, topic="B")) == 30


def test_prepared_transactions_are_not_read_and_committed_ones_are(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)
    for flag, body in ((SYSFLAG_TRANSACTION_PREPARED, b"half"), (SYSFLAG_TRANSACTION_COMMIT, b"done"),
                       (0, b"plain")):
        assert store.put_message(Message("T", body, sys_flag=flag)).status.ok
    assert store.wait_for_dispatch()
    assert [r["body"] for r in read_all(cfg.store_path_root_dir)] == [b"done", b"plain"]


BODYLEN_AT = 84          # BODYLENGTH's place in a record with IPv4 hosts


def _damage(cfg, end: int, at_tail: bool) -> None:
    """Give the newest segment's last record (or its first) a body longer than the record."""
    directory = cfg.commitlog_dir
    newest = sorted(os.listdir(directory))[-1]
    with open(os.path.join(directory, newest), "r+b") as f:
        data = f.read()
        pos, last = 0, 0
        while pos < end - int(newest):
            last, pos = pos, pos + int.from_bytes(data[pos:pos + 4], "big")
        f.seek((last if at_tail else 0) + BODYLEN_AT)
        f.write((1 << 30).to_bytes(4, "big"))


def test_a_torn_last_record_ends_the_log_but_damage_inside_it_fails_the_read(tiny_config, written_store):
    cfg = tiny_config()
    end = written_store(cfg, 100)
    _damage(cfg, end, at_tail=True)
    assert len(read_all(cfg.store_path_root_dir)) == 99
    ahead = int(sorted(os.listdir(cfg.commitlog_dir))[-1]) + cfg.mapped_file_size_commitlog
    with open(os.path.join(cfg.commitlog_dir, f"{ahead:020d}"), "wb") as f:
        f.truncate(cfg.mapped_file_size_commitlog)      # as a running store's allocator makes ahead
    assert len(read_all(cfg.store_path_root_dir)) == 99
    cfg2 = tiny_config(store_path_root_dir=cfg.store_path_root_dir + "2")
    end = written_store(cfg2, 100)
    _damage(cfg2, end, at_tail=False)
    with pytest.raises(ValueError, match="corrupt record at CommitLog offset"):
        read_all(cfg2.store_path_root_dir)


def test_a_record_at_the_end_whose_bytes_show_up_out_of_order_is_looked_at_again(tiny_config, written_store):
    """A copy into the map may make a record's later bytes (and the record after it) visible
    before its first ones: the reader looks again rather than failing on what is still moving."""
    import threading
    cfg = tiny_config()
    end = written_store(cfg, 100)
    newest = os.path.join(cfg.commitlog_dir, sorted(os.listdir(cfg.commitlog_dir))[-1])
    with open(newest, "r+b") as f:
        data = f.read()
    second = int.from_bytes(data[0:4], "big")           # the first record is half copied: its
    with open(newest, "r+b") as f:                      # body length is not there yet
        f.seek(BODYLEN_AT)
        f.write((1 << 30).to_bytes(4, "big"))

    def copy_finishes() -> None:
        with open(newest, "r+b") as f:
            f.seek(BODYLEN_AT)
            f.write(data[BODYLEN_AT:BODYLEN_AT + 4])
    late = threading.Timer(0.05, copy_finishes)
    late.start()
    try:
        assert second < end and len(read_all(cfg.store_path_root_dir)) == 100
    finally:
        late.join()


def test_check_crc_finds_a_changed_body(tiny_config, written_store):
    cfg = tiny_config()
    written_store(cfg, 10, body=b"abcdefgh" * 4)
    first = os.path.join(cfg.commitlog_dir, sorted(os.listdir(cfg.commitlog_dir))[0])
    with open(first, "r+b") as f:
        data = f.read()
        at = data.index(b"abcdefgh")
        f.seek(at)
        f.write(b"X")
    assert len(read_all(cfg.store_path_root_dir)) == 10            # not checked by default
    with pytest.raises(ValueError, match="corrupt record"):
        read_all(cfg.store_path_root_dir, checkCrc="true")


@pytest.mark.parametrize("options, error", [
    ({}, "option path is required"),
    ({"path": "/nonexistent/store"}, "no store at"),
    ({"topic": "a b"}, "option topic='a b'"),
    ({"checkCrc": "yes"}, "option checkCrc='yes': true or false"),
])
def test_bad_options_are_named(tmp_path, options, error):
    opts = {"path": str(tmp_path), **options} if "path" not in options and options else options
    with pytest.raises(Exception, match=error):
        CommitLogReader(CaseInsensitiveDict(opts)).partitions()


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40))
def test_any_bodies_come_back_byte_for_byte(tmp_path_factory, sizes):
    from core.config import StoreConfig
    from core.store import MessageStore
    from tests.conftest import TINY
    cfg = StoreConfig(**TINY, store_path_root_dir=str(tmp_path_factory.mktemp("s")))
    store = MessageStore(cfg)
    store.load()
    store.start()
    bodies = [os.urandom(n) for n in sizes]
    try:
        for b in bodies:
            assert store.put_message(Message("T", b)).status.ok
    finally:
        store.shutdown()
    assert [r["body"] for r in read_all(cfg.store_path_root_dir)] == bodies
