"""A Hypothesis state machine over `MessageStore` (either flush mode, with or without the
transient store pool): puts, batches, pulls, clean and abnormal restarts and segment expiry in
any order, checked against a model of every queue (the queue offsets, the bodies, and which
records the expired segments took)."""
from __future__ import annotations

import shutil
import tempfile
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine, initialize, invariant, precondition, rule,
)

from core.config import StoreConfig
from core.record.message import Message
from core.status import GetMessageStatus
from core.store import MessageStore

G = GetMessageStatus
QUEUES = [("A", 0), ("A", 1), ("B", 0)]
TINY = dict(mapped_file_size_commitlog=4096 * 4, mapped_file_size_consume_queue=20 * 50,
            max_hash_slot_num=64, max_index_num=512, flush_interval_commitlog=10,
            commit_interval_commitlog=5, commit_commitlog_thorough_interval=20,
            flush_interval_consume_queue=10, flush_consume_queue_thorough_interval=50)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="mqstore-model-")
        self.store = None
        self.queues = {q: [] for q in QUEUES}        # per queue: (phys, body), by queue offset
        self.n = 0
        self.end = 0                                  # end of the newest record put

    @initialize(flush=st.sampled_from(["ASYNC_FLUSH", "SYNC_FLUSH"]), pool=st.booleans())
    def open(self, flush, pool):
        self.config = StoreConfig(store_path_root_dir=self.root, flush_disk_type=flush,
                                  transient_store_pool_enable=pool, **TINY)
        self.store = self._open()

    def _open(self) -> MessageStore:
        st_ = MessageStore(self.config)
        st_.load()
        st_.start()
        return st_

    def _body(self, size: int) -> bytes:
        self.n += 1
        head = b"%06d:" % self.n
        return head + b"m" * max(0, size - len(head))

    @rule(q=st.sampled_from(QUEUES), size=st.integers(0, 3000), keyed=st.booleans())
    def put(self, q, size, keyed):
        body = self._body(size)
        r = self.store.put_message(Message(q[0], body, queue_id=q[1],
                                           keys="k%d" % self.n if keyed else None))
        assert r.ok
        assert r.append_result.logics_offset == len(self.queues[q])
        self.queues[q].append((r.append_result.wrote_offset, body))
        self.end = r.append_result.next_offset

    @rule(q=st.sampled_from(QUEUES), sizes=st.lists(st.integers(0, 900), min_size=1, max_size=6))
    def put_batch(self, q, sizes):
        bodies = [self._body(s) for s in sizes]
        r = self.store.put_messages([Message(q[0], b, queue_id=q[1]) for b in bodies])
        assert r.ok
        assert r.append_result.logics_offset == len(self.queues[q])
        phys = r.append_result.wrote_offset
        self.end = r.append_result.next_offset
        for b in bodies:
            self.queues[q].append((phys, b))
            phys += self.store.commitlog.prepare(Message(q[0], b, queue_id=q[1])).size

    @rule(q=st.sampled_from(QUEUES), pick=st.floats(0, 1, exclude_max=True),
          max_msgs=st.integers(1, 40))
    def pull(self, q, pick, max_msgs):
        self.settle()
        entries = self.queues[q]
        lo = self._min_offset(q)
        if not entries:
            r = self.store.get_message("g", q[0], q[1], 0, max_msgs)
            assert r.status in (G.NO_MATCHED_LOGIC_QUEUE, G.NO_MESSAGE_IN_QUEUE)
            return
        offset = int(pick * (len(entries) + 1))
        r = self.store.get_message("g", q[0], q[1], offset, max_msgs)
        if offset == len(entries):
            assert r.status is G.OFFSET_OVERFLOW_ONE
        elif offset < lo:
            assert (r.status, r.next_begin_offset) == (G.OFFSET_TOO_SMALL, lo)
        else:
            assert r.status is G.FOUND
            assert 1 <= r.message_count <= max_msgs
            assert r.queue_offsets == list(range(offset, offset + r.message_count))
            for qo, m in zip(r.queue_offsets, r.messages):
                assert (m.commit_log_offset, m.body) == entries[qo]

    def settle(self) -> None:
        """Wait until every put is visible: committed (with the pool) and dispatched."""
        st_ = self.store
        deadline = time.monotonic() + 10
        while st_.commitlog.pool is not None and st_.commitlog.queue.committed_where < self.end:
            assert time.monotonic() < deadline, "commit did not catch up"
            time.sleep(0.001)
        assert st_.wait_for_dispatch()

    def _min_offset(self, q) -> int:
        min_phys = self.store.get_min_phy_offset()
        entries = self.queues[q]
        return next((i for i, (phys, _) in enumerate(entries) if phys >= min_phys), len(entries))

    @rule(abnormal=st.booleans())
    def restart(self, abnormal):
        self.store.shutdown()
        if abnormal:
            open(self.config.abort_path, "w").close()
        self.store = self._open()
        assert self.store.recovery_report.abnormal is abnormal

    @precondition(lambda self: len(self.store.commitlog.queue.files) > 2)
    @rule()
    def expire(self):
        self.settle()
        assert self.store.delete_expired_files(clean_immediately=True) > 0

    @invariant()
    def offsets_match_the_model(self):
        if self.store is None:
            return
        self.settle()
        for q, entries in self.queues.items():
            assert self.store.get_max_offset_in_queue(*q) == len(entries)
            if entries:
                assert self.store.get_min_offset_in_queue(*q) == self._min_offset(q)
        last = max((e[-1][0] for e in self.queues.values() if e), default=-1)
        if last >= 0:
            assert self.store.look_message_by_offset(last) is not None

    def teardown(self):
        if self.store is not None:
            self.store.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_store_model = StoreMachine.TestCase


class SlowStoreMachine(StoreMachine):
    pass


SlowStoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_store_model_many = pytest.mark.slow(SlowStoreMachine.TestCase)
