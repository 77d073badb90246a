"""RocketMQ's DefaultMessageStoreCleanFilesTest set-up (reference 13.14) on the embedded store:
128-byte CommitLog files holding one 120-byte message and an 8-byte blank each, a 128-byte
consume-queue size that RocketMQ rounds up to 140 (7 entries a file) and 7 keys an index file."""
from __future__ import annotations

import os
import time

from core.record.message import Message


def test_one_message_a_file_then_expired_files_go_ten_a_run(tiny_config, open_store):
    cfg = tiny_config(mapped_file_size_commitlog=128, mapped_file_size_consume_queue=128, max_index_num=8,
                      max_hash_slot_num=100, flush_disk_type="SYNC_FLUSH", file_reserved_time=1,
                      enabled_append_prop_crc=False)   # RocketMQ's record sizes: 120 bytes
    assert cfg.mapped_file_size_consume_queue == 140
    store = open_store(cfg)
    for _ in range(55):
        r = store.put_message(Message(topic="test", body=b"y" * 14, keys="hello"))
        assert (r.status, r.append_result.wrote_bytes) == ("PUT_OK", 120)
    assert store.wait_for_dispatch()
    cq_dir = os.path.join(cfg.consumequeue_dir, "test", "0")
    files = lambda d: sum(n.isdigit() for n in os.listdir(d))    # not a *.deleted.tmp still going
    counts = lambda: (len(store.commitlog.queue.files), files(cq_dir), files(cfg.index_dir))
    assert counts() == (55, 8, 8)
    assert store.get_max_phy_offset() == 54 * 128 + 120
    assert len(store.query_message("test", "hello", 100, 0, 2**62).messages) == 55
    two_hours_ago = time.time() - 7200
    for mf in store.commitlog.queue.files[:15]:
        os.utime(mf.path, (two_hours_ago, two_hours_ago))
    assert store.delete_expired_files() == 10            # at most 10 files a run
    assert counts() == (45, 7, 7)                        # CQ and index files: floor(deleted / 7)
    assert store.delete_expired_files() == 5
    assert counts() == (40, 6, 6)
    got = store.get_message("g", "test", 0, 0, 100)
    assert (got.status, got.next_begin_offset) == ("OFFSET_TOO_SMALL", 15)   # the first message left
