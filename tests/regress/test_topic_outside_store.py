"""A topic is a directory name under consumequeue/: the embedded store took `..`, `.` and names
with a `/`, and `..` wrote its consume queue outside consumequeue/ (into <root>/<queue id>/),
while `a/b` made a nested directory that a restart did not load back. Such topics are refused
(MESSAGE_ILLEGAL), single and batched, and nothing is written for them."""
import os

import pytest

from core import Message, MessageStore, PutMessageStatus, StoreConfig


@pytest.fixture
def store(tmp_path):
    s = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commitlog=4096))
    s.load()
    s.start()
    yield s
    s.shutdown()


@pytest.mark.parametrize("topic", ["..", ".", "a/b", "/abs", "x/../../y"])
def test_path_like_topics_are_refused(store, tmp_path, topic):
    assert store.put_message(Message(topic, b"x")).status is PutMessageStatus.MESSAGE_ILLEGAL
    batch = [Message(topic, b"x"), Message(topic, b"y")]
    assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.get_max_phy_offset() == 0
    store.wait_for_dispatch()
    assert sorted(os.listdir(tmp_path)) == sorted(n for n in os.listdir(tmp_path)
                                                 if n in ("commitlog", "consumequeue", "index", "config",
                                                          "checkpoint", "abort", "lock", "store.json"))
    assert os.listdir(tmp_path / "consumequeue") == []


def test_dots_inside_a_name_are_fine(store):
    assert store.put_message(Message("a..b.c", b"x")).status is PutMessageStatus.PUT_OK
