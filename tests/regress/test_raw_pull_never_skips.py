"""Regression: the reader's raw pull counted a consume-queue entry whose record lay past its
view of the CommitLog as removed, skipped it and advanced next_begin_offset past it, so a
consumer tailing a queue under load lost messages. Now such a pull stops there."""
from core import GetMessageStatus, Message
from services.reader.pull import BatchStoreReader


class TrailingView:
    def __init__(self, commitlog, end):
        self.queue, self.file_size, self.end = commitlog.queue, commitlog.file_size, end
        self._log = commitlog

    def get_max_offset(self):
        return self.end

    def get_min_offset(self):
        return self._log.get_min_offset()


def test_raw_pull_stops_before_unreadable_records(store):
    results = [store.put_message(Message(topic="T", body=b"r%d" % i)) for i in range(8)]
    assert store.wait_for_dispatch()
    view = TrailingView(store.commitlog, results[3].append_result.wrote_offset)
    reader = BatchStoreReader(store.config, view, store.cq_store, store.index_service)
    batch = reader.get_message("g", "T", 0, 0, 32)
    assert batch.status is GetMessageStatus.FOUND
    assert batch.count == 3 and batch.next_begin_offset == 3
