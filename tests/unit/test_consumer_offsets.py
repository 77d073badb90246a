"""`core.meta.consumer_offsets.ConsumerOffsetStore`: commit, fetch, atomic persistence at most every
`min_interval`, reload, and a damaged file kept aside."""
from __future__ import annotations

import json
import os

from core.meta.consumer_offsets import ConsumerOffsetStore


def test_commit_fetch_persist_and_reload(tmp_path):
    store = ConsumerOffsetStore(str(tmp_path / "config"), min_interval=0.1)
    store.load()
    assert store.fetch("g", "T", 0) == -1 and store.due_in() is None
    store.commit("g", "T", 0, 7)
    store.commit("g", "T", 3, 9)
    store.commit("h", "T", 0, 1)
    assert store.fetch("g", "T", 0) == 7 and store.group_offsets("g", "T") == {0: 7, 3: 9}
    assert store.persist_if_due(now=1e9)
    assert not store.dirty and store.due_in() is None
    doc = json.loads(open(tmp_path / "config" / "consumer_offsets.json").read())
    assert doc == {"offsetTable": {"T@g": {"0": 7, "3": 9}, "T@h": {"0": 1}}}
    store.commit("g", "T", 0, 8)
    assert 0 < store.due_in() <= 0.1
    assert not store.persist_if_due()                            # too soon after the last write
    again = ConsumerOffsetStore(str(tmp_path / "config"))
    again.load()
    assert again.fetch("g", "T", 0) == 7                         # not yet written
    store.persist()
    again.load()
    assert again.fetch("g", "T", 0) == 8 and again.fetch("g", "T", 3) == 9


def test_a_damaged_file_is_kept_aside(tmp_path):
    os.makedirs(tmp_path / "config")
    path = tmp_path / "config" / "consumer_offsets.json"
    path.write_bytes(b"{not json")
    store = ConsumerOffsetStore(str(tmp_path / "config"))
    store.load()
    assert store.fetch("g", "T", 0) == -1
    assert (tmp_path / "config" / "consumer_offsets.json.corrupt").read_bytes() == b"{not json"
    assert path.read_bytes() == b"{not json"                     # untouched until a commit
