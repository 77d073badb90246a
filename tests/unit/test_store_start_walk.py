"""A store's start goes over its consume queues once (issue 27): each queue is listed, its
last files read once for both the damage check and the recovery, and the topic-queue table
built in the same pass as the queues' starts are corrected; the progress bar counts queues."""
from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from core import Message
from core.files.fileops import FileOps
from core.log.consume_queue import BLANK_SIZE, ENTRY, UNIT_SIZE
from core.log.queue_check import FEW_ENTRIES, _first_damaged_each, _first_damaged_numpy
from core.log.consume_queue_store import ConsumeQueueStore

QUEUES = 24


class CountingOps(FileOps):
    def __init__(self):
        self.reads: dict[str, int] = {}

    def open_reader(self, path):
        self.reads[path] = self.reads.get(path, 0) + 1
        return super().open_reader(path)


def _fill(store, queues=QUEUES, per_queue=3):
    for _ in range(per_queue):
        for q in range(queues):
            assert store.put_message(Message(f"W{q % 6}", b"body-%d" % q, queue_id=q // 6)).ok
    assert store.wait_for_dispatch()


def test_a_restart_reads_each_queue_file_once_and_counts_queues(tiny_config, open_store):
    cfg = tiny_config()
    st_ = open_store(cfg)
    _fill(st_)
    st_.shutdown()
    ops = CountingOps()
    seen = []

    def progress(done, total):
        """The bytes of the CommitLog scan."""

    progress.queues = lambda done, total: seen.append((done, total))
    again = open_store(cfg, fileops=ops, progress=progress)
    cq_reads = {p: n for p, n in ops.reads.items() if os.sep + "consumequeue" + os.sep in p}
    assert len(cq_reads) == QUEUES and set(cq_reads.values()) == {1}
    assert seen[-1] == (QUEUES, QUEUES)
    for q in range(QUEUES):
        r = again.get_message("g", f"W{q % 6}", q // 6, 0, 32)
        assert [m.body for m in r.messages] == [b"body-%d" % q] * 3


def test_a_damaged_entry_found_in_the_one_walk_rewrites_its_queue(tiny_config, open_store):
    cfg = tiny_config()
    st_ = open_store(cfg)
    _fill(st_)
    st_.shutdown()
    path = os.path.join(cfg.consumequeue_dir, "W1", "0", "0" * 20)
    with open(path, "r+b") as f:                        # entry 1: a record past the log's end
        f.seek(UNIT_SIZE)
        f.write(struct.pack(">q", 1 << 40))
    again = open_store(cfg)
    assert again.recovery_report.queues_rewritten == [("W1", 0)]
    r = again.get_message("g", "W1", 0, 0, 32)
    assert [m.body for m in r.messages] == [b"body-1"] * 3


def test_recover_loads_a_store_not_loaded_in_the_same_walk(tmp_path):
    ops = CountingOps()
    cqs = ConsumeQueueStore(str(tmp_path / "cq"), 50 * UNIT_SIZE, ops)
    cqs.load()
    for q in range(5):
        cqs.put_entries("T", q, 0, ENTRY.pack(100 * q, 10, 0) + ENTRY.pack(100 * q + 10, 10, 0), 0)
    cqs.flush(0)
    cqs.shutdown()
    fresh = ConsumeQueueStore(str(tmp_path / "cq"), 50 * UNIT_SIZE, ops)
    calls = []
    assert fresh.recover(lambda d, t: calls.append((d, t)), log_limit=1000) == {}
    assert calls == [(5, 5)]
    assert {k: cq.get_max_offset_in_queue() for k, cq in fresh.queues.items()} == \
        {("T", q): 2 for q in range(5)}
    assert fresh.topic_queue_table(0) == {("T", q): 2 for q in range(5)}
    fresh.shutdown()


_entry = st.tuples(st.integers(-3, 3000), st.sampled_from([-1, 0, 1, 7, 50, BLANK_SIZE]),
                   st.integers(-2**63, 2**63 - 1))


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(_entry, max_size=FEW_ENTRIES + 20), limit=st.integers(0, 4000))
def test_the_entry_at_a_time_check_matches_numpy(entries, limit):
    data = b"".join(ENTRY.pack(*e) for e in entries)
    assert _first_damaged_each(data, limit) == _first_damaged_numpy(data, limit)


def test_first_nonzero_reads_past_holes_and_chunk_edges(tmp_path):
    from types import SimpleNamespace

    from core.files.fileops import REAL_FILE_OPS
    from core.log.quarantine import _first_nonzero
    path = tmp_path / "seg"
    with open(path, "wb") as f:
        f.truncate(1 << 20)
        f.seek(300_000)
        f.write(bytes(5000))                     # zeros written: data, not a hole
        f.seek(700_001)
        f.write(b"\7")
    queue, mf = SimpleNamespace(fileops=REAL_FILE_OPS), SimpleNamespace(path=str(path))
    for step in (4096, 1000, 1 << 22):
        assert _first_nonzero(queue, mf, 0, 1 << 20, step) == 700_001
        assert _first_nonzero(queue, mf, 700_001, 1 << 20, step) == 700_001
        assert _first_nonzero(queue, mf, 700_002, 1 << 20, step) is None


def test_a_normal_start_does_not_fault_the_log_s_zero_tail_into_memory(tiny_config, open_store):
    """The rest of the last CommitLog segment after the log's end is checked for records
    (damage is not the end of the log) and for zeros (the cut): both with pread, so that the
    64 MiB of zeros do not become resident through the mapping (1 GiB with RocketMQ's segments:
    an embedded store over the issue's 1 GB after every restart)."""
    import psutil
    seg = 64 << 20
    cfg = tiny_config(mapped_file_size_commitlog=seg)
    st_ = open_store(cfg)
    _fill(st_, queues=6, per_queue=1)
    st_.shutdown()
    first = os.path.join(cfg.commitlog_dir, "0" * 20)
    end = 4096
    with open(first, "r+b") as f:                # the tail written as zeros: data, not holes
        for at in range(end, seg, 1 << 22):
            f.seek(at)
            f.write(bytes(min(1 << 22, seg - at)))
    me = psutil.Process()
    before = me.memory_info().rss
    again = open_store(cfg, start=False)
    assert again.recovery_report.quarantined == []
    assert me.memory_info().rss - before < 32 << 20
