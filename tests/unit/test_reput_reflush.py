"""`services.reput.reflush_from`: a restarted reput makes durable again what a dead one may
have left only in the page cache (consume-queue entries of records past DISPATCHED_DURABLE,
which `ConsumeQueue.recover` counts as flushed)."""
from __future__ import annotations

from core.log.consume_queue_store import ConsumeQueueStore
from core.files.fileops import REAL_FILE_OPS
from services.reput import reflush_from

FILE = 20 * 10


class CountingFileOps(type(REAL_FILE_OPS)):
    """The real file operations, counting the flushes of each file."""

    def __init__(self):
        self.flushes: dict[str, int] = {}

    def map_file(self, path, size, writable=True):
        mapping = super().map_file(path, size, writable)
        real = mapping.flush

        def flush(lo=0, hi=None):
            self.flushes[path] = self.flushes.get(path, 0) + 1
            real(lo, hi)
        mapping.flush = flush
        return mapping


def test_flushed_positions_move_back_to_the_first_entry_past_durable(tmp_path):
    root = str(tmp_path / "cq")
    writer = ConsumeQueueStore(root, FILE, REAL_FILE_OPS)
    writer.load()
    for i in range(35):                               # 3.5 files; records of 100 bytes
        writer.find_or_create("T", 0).put_message_position_info(i * 100, 100, 0, i)
    writer.find_or_create("T", 1).put_message_position_info(50, 10, 0, 0)
    writer.shutdown()

    ops = CountingFileOps()
    store = ConsumeQueueStore(root, FILE, ops)
    store.load()
    store.recover()
    queue = store.find("T", 0).queue
    assert queue.flushed_where == 35 * 20            # recovery counts everything as flushed
    reflush_from(store, durable=1200)                # records from 1200 on: entries 12..34
    assert queue.flushed_where == 12 * 20
    assert [mf.flushed_position for mf in queue.files] == [200, 40, 0, 0]
    assert store.find("T", 1).queue.flushed_where == 20       # wholly below durable: unchanged
    store.flush(0)
    assert queue.flushed_where == 35 * 20
    flushed = sorted(int(p.rsplit("/", 1)[1]) for p in ops.flushes if "/T/0/" in p)
    assert flushed == [200, 400, 600]                # the files holding entries 12..34
    reflush_from(store, durable=10 ** 9)             # nothing past it: no change
    assert queue.flushed_where == 35 * 20
