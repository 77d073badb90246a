"""Regression: with the first file of a consume queue gone (a bad disk, a stray rm), its
records are still in the CommitLog but no longer served (get_message answers OFFSET_TOO_SMALL
from the next file's first offset), yet `core.fsck.check` reported the store clean and
`check --fix` did nothing: records below the queue's first remaining entry were never looked
for. A consume-queue file is deleted only when every entry in it points below the CommitLog's
min offset, so every record still in the log must have its entry."""
import os

from core import MessageStore, fsck


def test_a_lost_first_consume_queue_file_is_reported_and_fixed(tiny_config, written_store):
    cfg = tiny_config(mapped_file_size_commitlog=4096, mapped_file_size_consume_queue=200,
                      max_index_num=64)
    written_store(cfg, 40, topics=("T0", "T1"))
    os.unlink(os.path.join(cfg.consumequeue_dir, "T1", "0", f"{0:020d}"))   # queue offsets 0..9

    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert set(report.counts) == {"cq_missing"}, report.format_text()
    [problem] = report.problems
    assert problem.offset == 0 and "queue offsets 0 to 9" in problem.detail

    fixed = fsck.check(cfg.store_path_root_dir, fix=True, config=cfg)
    assert fixed.ok, fixed.format_text()
    store = MessageStore(cfg)
    store.load()
    store.start()
    try:
        result = store.get_message("g", "T1", 0, 0, 32)          # one consume-queue file a pull
        assert result.min_offset == 0
        assert [m.keys for m in result.messages] == [f"k{i}" for i in range(1, 20, 2)]
    finally:
        store.shutdown()
