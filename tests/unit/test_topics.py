"""core.meta.topics: topic names, queue counts, topics.json written atomically in RocketMQ's shape,
auto-creation, and readers picking up the writer's changes."""
from __future__ import annotations

import json
import os

import pytest

from core.meta.topics import (
    FILE_NAME, TopicTable, TopicTableError, queue_count_problem, topic_name_problem,
)


@pytest.mark.parametrize("name", ["T", "Topic_A-1", "%RETRY%group", "a|b", "x" * 127])
def test_legal_names(name):
    assert topic_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "x" * 128, "a b", "a/b", "é", "a.b", None, 5])
def test_illegal_names(name):
    assert topic_name_problem(name)


@pytest.mark.parametrize("queues, ok", [(1, True), (1024, True), (0, False), (1025, False),
                                        (True, False), ("4", False)])
def test_queue_counts(queues, ok):
    assert (queue_count_problem(queues) is None) is ok


def test_missing_file_is_an_empty_table(tmp_path):
    table = TopicTable.load(str(tmp_path / "config"))
    assert len(table) == 0 and table.get("T") is None
    assert not table.reload_if_changed()


def test_save_and_reload_in_rocketmq_shape(tmp_path):
    cfg = str(tmp_path / "config")
    table = TopicTable.load(cfg)
    assert table.set_queues("Orders", 8)
    assert not table.set_queues("Orders", 8)
    assert table.ensure("Auto", 4) == 4
    assert table.ensure("Orders", 4) == 8
    doc = json.loads(open(os.path.join(cfg, FILE_NAME)).read())
    assert doc["topicConfigTable"]["Orders"] == {"topicName": "Orders", "readQueueNums": 8,
                                                 "writeQueueNums": 8, "perm": 6}
    assert doc["dataVersion"]["counter"] == 2
    assert not os.path.exists(os.path.join(cfg, FILE_NAME + ".tmp"))
    again = TopicTable.load(cfg)
    assert again.as_list() == [{"topic": "Auto", "queues": 4}, {"topic": "Orders", "queues": 8}]
    assert again.counter == 2


def test_reader_sees_the_writers_changes(tmp_path):
    cfg = str(tmp_path / "config")
    writer = TopicTable.load(cfg)
    reader = TopicTable.load(cfg)
    writer.set_queues("A", 2)
    assert reader.reload_if_changed() and reader.get("A") == 2
    assert not reader.reload_if_changed()
    writer.set_queues("A", 3)
    assert reader.reload_if_changed() and reader.get("A") == 3


def test_illegal_changes_are_refused(tmp_path):
    table = TopicTable.load(str(tmp_path))
    with pytest.raises(ValueError):
        table.set_queues("bad name", 4)
    with pytest.raises(ValueError):
        table.set_queues("Good", 0)
    assert len(table) == 0


def test_ensure_covers_grows_and_creates(tmp_path):
    table = TopicTable.load(str(tmp_path))
    table.set_queues("A", 2)
    assert table.ensure_covers([("A", 5), ("B", 0), ("B", 1), ("bad topic", 0)], 4)
    assert table.get("A") == 6 and table.get("B") == 4 and "bad topic" not in table
    assert not table.ensure_covers([("A", 1), ("B", 3)], 4)
    assert TopicTable.load(str(tmp_path)).get("A") == 6


@pytest.mark.parametrize("content", [b"not json", b"[]", b'{"topicConfigTable": []}',
                                     b'{"topicConfigTable": {"a b": {"writeQueueNums": 4}}}',
                                     b'{"topicConfigTable": {"A": {"writeQueueNums": 0}}}'])
def test_damaged_file_is_reported(tmp_path, content):
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(TopicTableError):
        TopicTable.load(str(tmp_path))
