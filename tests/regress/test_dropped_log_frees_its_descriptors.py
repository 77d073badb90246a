"""A CommitLog and consume queues dropped without shutdown() give back every descriptor once
collected. Before, the prefault thread held the segment queue for ever and a collected
`Mapping` never closed its descriptor: a test process (or a user's) that opened many stores
passed 1,024 descriptors, where select() fails ("filedescriptor out of range")."""
from __future__ import annotations

import gc
import os
import threading

from core import Message, StoreConfig
from core.files.fileops import REAL_FILE_OPS
from core.log.commitlog import CommitLog
from core.log.consume_queue_store import ConsumeQueueStore
from core.log.dispatch import Dispatcher

SEG = 64 << 10


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _write_and_drop(root) -> None:
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commitlog=SEG,
                      mapped_file_size_consume_queue=600)
    os.makedirs(cfg.commitlog_dir)
    log = CommitLog(cfg, REAL_FILE_OPS)
    log.queue.load()
    for i in range(400):
        log.append(log.prepare(Message("T", b"m%05d" % i * 40, queue_id=i % 3)))
    cqs = ConsumeQueueStore(cfg.consumequeue_dir, 600, REAL_FILE_OPS)
    cqs.load()
    Dispatcher(log, cqs).run(0, log.get_max_offset())


def test_a_dropped_log_closes_its_segments_and_ends_its_prefault_thread(tmp_path):
    gc.collect()
    before, threads = _open_fds(), threading.active_count()
    for n in range(3):
        _write_and_drop(tmp_path / str(n))
    gc.collect()
    for t in [t for t in threading.enumerate() if t.name == "prefault"]:
        t.join(5)
    assert _open_fds() == before
    assert threading.active_count() == threads
