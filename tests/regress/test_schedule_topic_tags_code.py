"""Regression: a record of RocketMQ's delay topic `SCHEDULE_TOPIC_XXXX` with a DELAY level got
the hash of its TAGS as consume-queue tag code, where RocketMQ's store puts the delivery time
there: store timestamp + the level's delay from messageDelayLevel "1s 5s 10s 30s 1m 2m 3m 4m 5m
6m 7m 8m 9m 10m 20m 30m 1h 2h", a level above 18 taken as 18 (reference 2.13). So a delay
queue written here was not RocketMQ's, and one RocketMQ wrote was reported by `check` as
cq_tags and rewritten by a re-dispatch."""
import os
import shutil
import struct

import pytest

from core import Message, MessageStore, fsck
from core.record.codec import SCHEDULE_TOPIC
from core.record.hashing import java_hash

DELAYS = {1: 1000, 3: 10000, 18: 7200000, 40: 7200000}


def _entries(cfg, queue_id):
    d = os.path.join(cfg.consumequeue_dir, SCHEDULE_TOPIC, str(queue_id))
    out = []
    for name in sorted(os.listdir(d)):
        data = open(os.path.join(d, name), "rb").read()
        out += [struct.unpack_from(">qiq", data, k) for k in range(0, len(data), 20)
                if data[k:k + 20] != bytes(20)]
    return out


def _open(cfg):
    store = MessageStore(cfg)
    store.load()
    return store


@pytest.mark.parametrize("count", [1, 40])
def test_delay_queue_tag_code_is_the_delivery_time(tiny_config, count):
    cfg = tiny_config()
    store = _open(cfg)
    store.start()
    expected = {}
    try:
        for level in DELAYS:
            msgs = [Message(SCHEDULE_TOPIC, b"d%d" % i, queue_id=min(level, 18) - 1, tags="T",
                            properties={"DELAY": str(level), "REAL_TOPIC": "R", "REAL_QID": "0"})
                    for i in range(count)]
            for m in msgs:
                r = store.put_message(m)
                assert r.status.ok
                expected.setdefault(m.queue_id, []).append(
                    (r.append_result.wrote_offset, r.append_result.wrote_bytes,
                     r.append_result.store_timestamp + DELAYS[level]))
        # (A DELAY put to another topic is stored in the schedule topic (codec.SCHEDULE_TOPIC) now: core.delay.put.)
        plain = store.put_message(Message("PLAIN", b"p", tags="T", properties={"DELAY": "0"}))
        assert plain.status.ok
        assert store.wait_for_dispatch()
    finally:
        store.shutdown()
    for queue_id, entries in expected.items():
        assert _entries(cfg, queue_id) == entries
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert report.ok, report.format_text()

    shutil.rmtree(cfg.consumequeue_dir)                  # rebuilt from the log, as recovery does
    open(cfg.abort_path, "w").close()
    store = _open(cfg)
    try:
        assert store.recovery_report.abnormal
    finally:
        store.shutdown()
    for queue_id, entries in expected.items():
        assert _entries(cfg, queue_id) == entries
    plain_cq = open(os.path.join(cfg.consumequeue_dir, "PLAIN", "0", f"{0:020d}"), "rb").read(20)
    assert struct.unpack(">qiq", plain_cq)[2] == java_hash("T")      # other topics: the hash
