"""`core.read.store_reader`: pulls copy records out of the CommitLog segment by segment (across segment
ends, looking at a segment's read position each time it is taken), `.messages`
are lazily decoded MessageExt equal to a full decode of `.buffers`, and a lookup by offset
never returns a record whose topic is not UTF-8."""
from __future__ import annotations

import os

from core.record.codec import encode_message
from core.record.decode import LazyMessageExt
from core.log.commitlog import CommitLog
from core.config import StoreConfig
from core.files.fileops import REAL_FILE_OPS
from core.record.message import Message
from core.read.store_reader import copy_runs
from core.status import GetMessageStatus
from ipc.received import split_records


def put_n(store, n, body=lambda i: b"m%04d" % i * 40):
    results = [store.put_message(Message("T", body(i), tags="TagA", keys=f"k{i}")) for i in range(n)]
    assert all(r.ok for r in results)
    assert store.wait_for_dispatch()
    return [r.append_result for r in results]


def test_pulls_cross_segment_ends_and_decode_lazily(store):
    put_n(store, 100)                                  # 205-byte records, 16 KiB segments
    assert len(store.commitlog.queue.files) > 1
    got, offset = [], 0
    while True:
        r = store.get_message("g", "T", 0, offset, 32)
        if r.status is not GetMessageStatus.FOUND:
            break
        assert all(type(m) is LazyMessageExt for m in r.messages)
        assert [m.queue_offset for m in r.messages] == r.queue_offsets
        assert [m.store_size for m in r.messages] == [len(b) for b in r.buffers]
        got += r.messages
        offset = r.next_begin_offset
    assert [m.body for m in got] == [b"m%04d" % i * 40 for i in range(100)]
    assert [m.keys for m in got] == [f"k{i}" for i in range(100)]
    assert offset == 100


def test_a_record_past_the_held_read_position_is_read_after_looking_again(tmp_path):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commitlog=4096)
    os.makedirs(cfg.commitlog_dir)
    log = CommitLog(cfg, REAL_FILE_OPS)
    log.queue.load()
    first = log.append(log.prepare(Message("T", b"first")))
    refs = log.queue.files[0].refs                       # the appender's own hold
    run = (first.wrote_offset, first.next_offset, 1)
    chunks, lost = copy_runs(log.queue, [run])
    assert (len(chunks), lost) == (1, 0) and len(chunks[0]) == first.wrote_bytes
    second = log.append(log.prepare(Message("T", b"second")))
    both = (first.wrote_offset, second.next_offset, 2)
    chunks, lost = copy_runs(log.queue, [both])
    assert lost == 0 and len(chunks[0]) == first.wrote_bytes + second.wrote_bytes
    past = (second.next_offset, second.next_offset + 100, 1)   # nothing written there yet
    chunks, lost = copy_runs(log.queue, [run, past], places=True)
    assert lost == 1 and chunks[1] is None
    assert log.queue.files[0].refs == refs


def corrupt_topic(store, res) -> None:
    """Overwrite the first topic byte of the record at `res` with 0xFF (not UTF-8)."""
    mf = store.commitlog.queue.find_mapped_file_by_offset(res.wrote_offset)
    buf = store.commitlog.queue.hold(mf)
    try:
        pos = res.wrote_offset - mf.file_from_offset
        body_len = int.from_bytes(buf[pos + 84:pos + 88], "big")
        buf[pos + 88 + body_len + 1] = 0xFF
    finally:
        mf.release()


def test_a_lookup_never_returns_a_record_whose_topic_is_not_utf8(store):
    res = put_n(store, 3)
    corrupt_topic(store, res[1])
    assert store.look_message_by_offset(res[0].wrote_offset).keys == "k0"
    assert store.look_message_by_offset(res[1].wrote_offset) is None
    assert store.look_message_by_offset(res[1].wrote_offset, res[1].wrote_bytes) is None
    r = store.get_message("g", "T", 0, 0, 32)             # a pull stops before it
    assert r.status is GetMessageStatus.FOUND and [m.keys for m in r.messages] == ["k0"]
    assert r.next_begin_offset == 1
    r = store.get_message("g", "T", 0, 1, 32)             # and, started at it, says so
    assert r.status is GetMessageStatus.MESSAGE_DAMAGED and r.next_begin_offset == 2
    assert "topic b'\\xff'" in r.reason and not r.buffers
    assert [m.keys for m in store.get_message("g", "T", 0, 2, 32).messages] == ["k2"]
    assert store.reader.damage.count >= 2


def test_pulled_messages_equal_a_full_decode(store):
    put_n(store, 5)
    r = store.get_message("g", "T", 0, 0, 32)
    assert len(r.messages) == 5
    for m, rec in zip(r.messages, r.buffers):
        assert m == split_records(rec)[0].to_message_ext()       # the client's decoder
        again = Message(m.topic, m.body, tags=m.tags, keys=m.keys, properties=m.properties,
                        born_timestamp=m.born_timestamp, born_host=m.born_host,
                        store_host=m.store_host)
        assert encode_message(again, m.queue_offset, m.commit_log_offset, m.store_timestamp,
                              prop_crc=True) == rec
