"""`page_cache_window_commitlog` on a running store (core/files/cache_window.py): once what the
producers wrote is flushed and dispatched, the CommitLog's pages more than the window behind
hold no page cache (read with mincore), the window does, and every message still reads back
byte-identical, from the disk. Segments are larger than the flusher's retry range, so pages
are dropped only if every process that wrote or read them (appender or committer with the
transient store pool, reput) let go of its mapping of them."""
from __future__ import annotations

import os

import pytest

from ipc import Admin, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore
from tests.integration.test_end_to_end import consume_topic
from tests.unit.test_cache_window import resident_pages

MiB = 1 << 20
SEGMENT = 64 * MiB
WINDOW = 8 * MiB
BATCHES, BATCH, BODY = 400, 100, 1024            # ~42 MiB of records in the first segment


@pytest.mark.parametrize("pool", [False, True], ids=["mapped", "transient_pool"])
def test_pages_behind_the_window_leave_the_page_cache_and_read_back(tmp_path, pool):
    s = SupervisedStore(tmp_path, mapped_file_size_commitlog=SEGMENT, transient_store_pool_enable=pool,
                        transient_store_pool_size=2, mapped_file_size_consume_queue=20 * 50_000,
                        max_hash_slot_num=8192, max_index_num=100_000,
                        page_cache_window_commitlog=WINDOW).start()
    try:
        with Admin(s.address) as admin:
            admin.create_topic("W", 1)
        sent = []
        with Producer(s.address) as p:
            for b in range(BATCHES):
                bodies = [b.to_bytes(4, "big") + i.to_bytes(4, "big") + os.urandom(BODY - 8)
                          for i in range(BATCH)]
                assert p.send_batch("W", bodies, queue_id=0).status == "PUT_OK"
                sent.extend(bodies)
        wrote = s.status()["positions"]["wrote"]
        assert 40 * MiB < wrote < SEGMENT
        first = os.path.join(s.root, "commitlog", "00000000000000000000")
        gone = wrote - 2 * WINDOW - wrote % WINDOW        # below it, dropped once all is flushed
        assert wait_for(lambda: resident_pages(first, 0, gone) == 0, timeout=20), \
            f"{resident_pages(first, 0, gone)} of {gone // 4096} pages still cached"
        kept = wrote - wrote % 4096
        assert resident_pages(first, kept - WINDOW, kept) == WINDOW // 4096    # the window
        got = consume_topic(s.address, "W", len(sent))
        assert [m.body for m in got] == sent
    finally:
        s.ensure_stopped()
