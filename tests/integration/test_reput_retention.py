"""When retention removes CommitLog segments (MIN_PHY rises), the reput process deletes the
consume-queue and index files that point only below it, as RocketMQ's CleanConsumeQueueService
does, and the reader goes on serving what is left. Real reput and reader processes
(tests/integration/harness.py); this test process writes the CommitLog and plays the
supervisor's retention (unlink the segments, raise MIN_PHY)."""
from __future__ import annotations

import os

import pytest

from ipc.control_block import Word
from tests.integration.harness import RawClient, ServiceHarness, wait_for
from tests.integration.test_read_services import CQ_FILE, SEG, LogWriter, make_config, pull


@pytest.fixture
def harness(tmp_path):
    h = ServiceHarness(make_config(tmp_path, clean_resource_interval=100), ["reput", "reader"])
    h.__enter__()
    yield h
    h.__exit__(None, None, None)


def files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.isdigit())


def test_consume_queue_and_index_files_below_the_log_start_are_deleted(harness):
    h, w = harness, LogWriter(harness)
    client = RawClient(h.endpoint("reader"))
    w.put(600, size=300, keys=lambda i: f"key-{i}")       # ~6 segments, 6 CQ files, 3 index files
    w.put(300, queue_id=1, size=300)
    w.wait_dispatched()
    cq0 = os.path.join(h.config.consumequeue_dir, "T", "0")
    assert len(files(cq0)) == 6 and len(files(h.config.index_dir)) >= 3
    # Retention: the first half of the log goes.
    segments = files(h.config.commitlog_dir)
    first_kept = int(segments[len(segments) // 2])
    for name in segments[:len(segments) // 2]:
        os.unlink(os.path.join(h.config.commitlog_dir, name))
    h.cb.set(Word.MIN_PHY, first_kept)
    kept = [i for i, r in enumerate(w.records["T", 0]) if r.wrote_offset >= first_kept]

    def cq_files_left():
        return [int(n) for n in files(cq0)]

    # Every CQ file whose last entry points below MIN_PHY is gone; the one holding the first
    # kept message stays.
    first_file = kept[0] * 20 // CQ_FILE * CQ_FILE
    assert wait_for(lambda: cq_files_left()[0] == first_file, 30), cq_files_left()
    assert wait_for(lambda: len(files(h.config.index_dir)) < 3, 30)
    rep, _ = pull(client, offset=0)
    assert (rep["status"], rep["next_begin_offset"]) == ("OFFSET_TOO_SMALL", kept[0])
    rep, frames = pull(client, offset=kept[0], max_msgs=5)
    assert rep["status"] == "FOUND" and rep["next_begin_offset"] == kept[0] + 5
    # The kept messages are still found by key; the removed ones are not.
    rep, _ = client.call("query_by_key", topic="T", key=f"key-{kept[-1]}", max_num=4)
    assert rep["status"] == "OK" and len(rep["messages"]) == 1
    rep, _ = client.call("query_by_key", topic="T", key="key-0", max_num=4)
    assert rep.get("messages", []) == []
