"""A memoryview body of items wider than a byte (memoryview(array("i", ...))) was answered
PUT_OK by the single put: its length counted items, its copy wrote all its bytes, so
TOTALSIZE was short of the record and the next record was lost. Such a body (and a
non-contiguous view) is refused as MESSAGE_ILLEGAL now, single or in a batch; a view of
single bytes is still a body."""
from array import array

from core import fsck
from core.record.message import Message
from core.status import PutMessageStatus

ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL


def test_wide_or_strided_views_are_refused_and_the_log_stays_whole(tiny_config, open_store):
    cfg = tiny_config()
    store = open_store(cfg)
    wide = memoryview(array("i", [1, 2, 3]))
    strided = memoryview(b"abcdefgh")[::2]
    for body in (wide, strided):
        assert store.put_message(Message("T", body)).status is ILLEGAL
        batch = [Message("T", b"ok", properties={"UNIQ_KEY": "%032X" % i}) for i in range(3)]
        batch[1].body = body
        assert store.put_messages(batch).status is ILLEGAL
    assert store.put_message(Message("T", memoryview(b"bytes view"))).ok
    assert store.put_message(Message("T", b"after")).ok
    store.wait_for_dispatch()
    got = store.get_message("g", "T", 0, 0, 10)
    assert [bytes(m.body) for m in got.messages] == [b"bytes view", b"after"]
    store.shutdown()
    assert fsck.check(cfg.store_path_root_dir).ok
