"""Where an ipc.Consumer of a group without committed offsets starts, against a real store:
`start="latest"` skips what was stored before it started, and nothing stored after."""
from __future__ import annotations

import time

import pytest

from ipc import Admin, Consumer, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("start")).start()
    yield s.address
    s.ensure_stopped()


def bodies_within(consumer: Consumer, n: int, seconds: float = 15.0) -> list:
    got, deadline = [], time.monotonic() + seconds
    while len(got) < n and time.monotonic() < deadline:
        got += [bytes(m.body) for m in consumer.poll(200)]
    return got


def test_latest_skips_what_was_there_at_the_start(address):
    with Producer(address) as p:
        assert p.send_batch("Old", [b"before-%d" % i for i in range(5)], queue_id=1).ok
        with Admin(address) as admin:                        # dispatched: the queue's end is 5
            assert wait_for(lambda: admin.queue_offsets("Old", 1)[0]["max_offset"] == 5, 10)
        with Consumer(address, "late", "Old", start="latest") as c:
            assert c.poll(300) == []
            assert p.send("Old", b"after", queue_id=1).ok
            assert bodies_within(c, 1) == [b"after"]


def test_latest_reads_a_topic_created_after_the_start_from_its_first_message(address):
    with Consumer(address, "late", "Born", start="latest") as c:
        assert c.poll(100) == []                                 # no such topic yet
        with Producer(address) as p:
            for i in range(4):
                assert p.send("Born", b"new-%d" % i, queue_id=i).ok
        assert sorted(bodies_within(c, 4)) == [b"new-%d" % i for i in range(4)]


def test_a_queue_the_topic_does_not_have_is_refused_at_construction(address):
    with Producer(address) as p:
        assert p.send("Four", b"x", queue_id=0).ok                   # 4 queues by default
    with pytest.raises(ValueError, match=r"queues=\[9\]: topic 'Four' has 4 queues"):
        Consumer(address, "g", "Four", queues=[0, 9])


def test_closing_on_a_topic_that_does_not_exist_commits_nothing_and_warns_nothing(address, caplog):
    with Consumer(address, "g", "Nowhere", queues=[0]) as c:
        assert c.poll(300) == []
    assert c.committed() == {0: -1}
    assert not [r for r in caplog.records if "final commit" in r.getMessage()]
