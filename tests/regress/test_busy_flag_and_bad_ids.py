"""Regressions: an exception while appending must not leave the store answering
OS_PAGECACHE_BUSY forever (the lock timestamp is cleared in a finally), and looking up a
message id that is not a string answers None instead of raising."""
from core import Message, PutMessageStatus


class ExplodingBody(bytes):
    """A body whose copy into the segment fails inside the append lock."""

    def __len__(self):
        return 5

    def __getitem__(self, item):
        raise RuntimeError("copy failed")


def test_failed_append_does_not_leave_store_busy(store):
    store.put_message(Message(topic="T", body=b"warm"))         # map the segment
    rec = store.commitlog.prepare(Message(topic="T", body=b"12345"))
    rec.body = memoryview(b"1234")                                # wrong length: the copy raises
    try:
        store.commitlog.append(rec)
    except (ValueError, IndexError, TypeError):
        pass
    assert store.commitlog.begin_time_in_lock == 0
    assert store.put_message(Message(topic="T", body=b"after")).status is PutMessageStatus.PUT_OK


def test_view_message_by_id_with_non_string(store):
    assert store.view_message_by_id(None) is None
    assert store.view_message_by_id(12345) is None
