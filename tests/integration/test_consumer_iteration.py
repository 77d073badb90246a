"""Iterating an ipc.Consumer hands out one message at a time: stopping the loop early gives the
rest of the poll back, so that what the group commits, and what the loop or the next poll
sees, starts right after the last message the loop got (it skipped the rest of the poll)."""
from __future__ import annotations

import pytest

from ipc import Admin, Consumer, Producer
from tests.integration.supervised import SupervisedStore

pytestmark = pytest.mark.timeout(60)        # a lost message would leave a loop waiting for it


@pytest.fixture(scope="module")
def address(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("iteration")).start()
    with Producer(s.address) as p:
        for q in range(2):
            assert p.send_batch("It", [b"%d-%03d" % (q, i) for i in range(100)], queue_id=q).ok
    yield s.address
    s.ensure_stopped()


def loop_until(consumer: Consumer, n: int) -> list:
    got = []
    for m in consumer:
        got.append((m.queue_id, m.queue_offset))
        if len(got) == n:
            break
    return got


def committed(address: str, group: str) -> dict:
    with Admin(address) as admin:
        return {q["queue_id"]: q["consumer_offset"] for q in admin.consumer_lag(group, "It")["queues"]
                if q["queue_id"] in (0, 1)}


def test_a_loop_stopped_early_commits_only_what_it_got(address):
    with Consumer(address, "early", "It", queues=[0, 1]) as c:
        got = loop_until(c, 7)
        assert c.positions() == {q: 1 + max([o for qq, o in got if qq == q], default=-1) for q in (0, 1)}
    assert committed(address, "early") == {q: 1 + max([o for qq, o in got if qq == q], default=-1)
                                           for q in (0, 1)}
    with Consumer(address, "early", "It", queues=[0, 1]) as again:              # the group goes on from there
        rest = loop_until(again, 200 - 7)
    assert sorted(got + rest) == [(q, i) for q in (0, 1) for i in range(100)]


def test_after_a_break_the_next_poll_and_loop_get_the_rest_in_order(address):
    with Consumer(address, "resume", "It", queues=[0, 1], auto_commit=False) as c:
        first = loop_until(c, 5)
        second = [(m.queue_id, m.queue_offset) for m in c.poll(5000, max_records=3)]
        third = loop_until(c, 200 - 8)
        seen = first + second + third
        assert sorted(seen) == [(q, i) for q in (0, 1) for i in range(100)]
        for q in (0, 1):                                          # each queue in order, no repeat
            offsets = [o for qq, o in seen if qq == q]
            assert offsets == list(range(100))
        assert c.commit() == {0: 100, 1: 100}


def after_last_got(got: list) -> dict:
    return {q: 1 + max([o for qq, o in got if qq == q], default=-1) for q in (0, 1)}


def test_a_commit_inside_the_loop_stores_only_what_the_loop_got(address):
    got = []
    with Consumer(address, "inloop", "It", queues=[0, 1]) as c:
        for m in c:
            got.append((m.queue_id, m.queue_offset))
            if len(got) == 4:
                assert c.commit() == after_last_got(got)      # not the end of the poll's batch
                assert c.positions() == after_last_got(got)
                break
    assert committed(address, "inloop") == after_last_got(got)


def test_closing_while_an_iterator_is_held_commits_only_what_it_yielded(address):
    c = Consumer(address, "held", "It", queues=[0, 1])
    it = iter(c)
    got = [(m.queue_id, m.queue_offset) for m in (next(it) for _ in range(6))]
    c.close()                                      # the iterator still holds the rest of its batch
    assert committed(address, "held") == after_last_got(got)
