"""`MessageStore.commit_offset` / `fetch_offset` (DESIGN.md section 6: consumer group offsets,
commit and fetch, in the embedded store too): -1 before a commit, kept across a restart in
config/consumer_offsets.json (RocketMQ's consumerOffset.json shape, the reader's file), written
by `flush` and at shutdown, safe from several threads, and bad names or numbers refused."""
from __future__ import annotations

import json
import os
import threading

import pytest

from core.record.message import Message


def test_commit_then_fetch_and_the_file_after_a_restart(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)
    assert store.put_message(Message("T", b"x")).ok
    assert store.fetch_offset("g1", "T", 0) == -1
    store.commit_offset("g1", "T", 0, 1)
    store.commit_offset("g1", "T", 3, 7)
    store.commit_offset("g2", "T", 0, 0)
    assert (store.fetch_offset("g1", "T", 0), store.query_offset("g1", "T", 3)) == (1, 7)
    store.flush()
    path = os.path.join(cfg.config_dir, "consumer_offsets.json")
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@g1": {"0": 1, "3": 7}, "T@g2": {"0": 0}}}
    store.commit_offset("g1", "T", 0, 2)                      # after the flush: at shutdown
    store.shutdown()
    again = open_store(cfg)
    assert (again.fetch_offset("g1", "T", 0), again.fetch_offset("g2", "T", 0)) == (2, 0)
    assert again.fetch_offset("g1", "Other", 0) == -1


def test_commits_from_many_threads(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)

    def commit(q):
        for off in range(300):
            store.commit_offset("g", "T", q, off)
    threads = [threading.Thread(target=commit, args=(q,)) for q in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.shutdown()
    with open(os.path.join(cfg.config_dir, "consumer_offsets.json")) as f:
        assert json.load(f)["offsetTable"]["T@g"] == {str(q): 299 for q in range(8)}


@pytest.mark.parametrize("args, error", [
    (("bad group", "T", 0, 1), ValueError), (("g", "", 0, 1), ValueError),
    ((5, "T", 0, 1), TypeError), (("g", "T", -1, 1), ValueError), (("g", "T", "0", 1), TypeError),
    (("g", "T", 0, -1), ValueError), (("g", "T", 0, 1.0), TypeError), (("g", "T", True, 1), TypeError),
])
def test_bad_names_and_numbers_are_refused(store, args, error):
    with pytest.raises(error):
        store.commit_offset(*args)
    assert store.fetch_offset("g", "T", 0) == -1


def test_read_names_of_the_design(store):
    """DESIGN.md section 6 names the arguments `phys_offset` and `ts`."""
    r = store.put_message(Message("T", b"hello"))
    assert store.wait_for_dispatch()
    assert bytes(store.look_message_by_offset(phys_offset=r.append_result.wrote_offset).body) == b"hello"
    assert store.get_offset_in_queue_by_time("T", 0, ts=r.append_result.store_timestamp) == 0
