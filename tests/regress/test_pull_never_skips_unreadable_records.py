"""Regression: a pull whose consume-queue entries point at records the reader cannot read yet
(its view of the CommitLog ends before them) treated them as removed, skipped them and moved
next_begin_offset past them, so a tailing consumer lost messages. Only records below the log's
min offset are removed; others stop the pull where they start."""
from core import GetMessageStatus, Message
from core.read.store_reader import StoreReader


class TrailingCommitLog:
    """The store's CommitLog seen through a view whose end trails the consume queues."""

    def __init__(self, commitlog, end):
        self._log = commitlog
        self.queue = commitlog.queue
        self.end = end

    def get_max_offset(self):
        return self.end

    def get_min_offset(self):
        return self._log.get_min_offset()

    def read(self, phys, size):
        return self._log.read(phys, size) if phys + size <= self.end else None


def test_pull_stops_at_a_record_beyond_the_readable_end(store):
    results = [store.put_message(Message(topic="T", body=b"m%d" % i)) for i in range(10)]
    assert store.wait_for_dispatch()
    visible_end = results[5].append_result.wrote_offset        # records 0..4 readable
    view = TrailingCommitLog(store.commitlog, visible_end)
    for mf in store.commitlog.queue.files:                      # make the segment agree
        if mf.file_from_offset <= visible_end < mf.file_from_offset + mf.file_size:
            saved = mf.wrote_position
            mf.wrote_position = visible_end - mf.file_from_offset
    try:
        reader = StoreReader(store.config, view, store.cq_store, store.index_service)
        got = reader.get_message("g", "T", 0, 0, 32)
    finally:
        mf.wrote_position = saved
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"m%d" % i for i in range(5)]
    assert got.next_begin_offset == 5
