"""Two inputs the clients took silently, found in an audit against a real store:

- `Producer.send_batch("T", "abc")`, a str given where the list of bodies belongs, was sent
  as a batch of three one-character messages (the list is of bodies, a str is one body).
- `Consumer.seek(q, -5)` was taken: every pull of the queue was then refused BAD_FIELD and
  the queue delivered nothing until the next seek. RocketMQ's seek refuses an illegal offset.
"""
import time

import pytest

from core.record.message import Message
from ipc import Consumer, Producer
from tests.integration.supervised import SupervisedStore


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("checks")).start()
    yield s
    s.ensure_stopped()


def test_one_str_is_no_batch(store):
    with Producer(store.address) as p:
        with pytest.raises(TypeError):
            p.send_batch("batchT", "abc", queue_id=0)
        r = p.send_batch("batchT", [Message(topic="batchT", body=b"a"), b"b"], queue_id=0)
        assert r.ok and r.queue_offset == 0 and r.count == 2   # nothing was stored before


def test_seek_to_a_negative_offset_is_refused(store):
    with Producer(store.address) as p:
        for i in range(3):
            assert p.send("seekT", b"m%d" % i, queue_id=0).ok
    with Consumer(store.address, "g", "seekT", queues=[0], auto_commit=False) as c:
        with pytest.raises(ValueError):
            c.seek(0, -5)
        assert c.positions() == {0: 0}
        got, deadline = [], time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            got += c.poll(200)
        assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
        assert c.last_error is None
