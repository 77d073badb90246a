"""The consumer's bookkeeping (ipc.consumer.Consumer) against a scripted reader on a real
ZeroMQ socket: where each queue starts, how every pull status moves the next offset and the
committed position, the client-side tag re-check, max_records, seeks and commits. Records
in pull replies are real CommitLog records made with core.record.codec."""
from __future__ import annotations

import threading

import pytest

from core.record.codec import encode_message
from core.record.message import Message
from core.read.subscription import subscription_tags as parse_tag_filter
from ipc.consumer import Consumer
from tests.unit.scripted_peer import Peer


def records(topic: str, queue_id: int, offsets, tags=None) -> bytes:
    return b"".join(encode_message(Message(topic, b"m%d" % o, queue_id=queue_id, tags=tags),
                                   queue_offset=o, phys_offset=1000 + o * 200) for o in offsets)


class Reader:
    """A scripted reader: one topic, `queues` queues, committed offsets, and a list of pull
    answers per queue (each a function of the pull request)."""

    def __init__(self, queues=1, committed=None, bounds=None):
        self.queues = queues
        self.committed = dict(committed or {})
        self.bounds = bounds or {q: (0, 100) for q in range(queues)}
        self.answers = {q: [] for q in range(queues)}
        self.by_offset = {}               # (queue_id, offset) -> answer, before `answers`
        self.pulls = []
        self.commits = []
        self.lock = threading.Lock()

    def __call__(self, env, frames):
        op = env["op"]
        if op == "topic_info":
            return {"status": "OK", "topic": env["topic"], "queues": self.queues}
        if op == "fetch_offset":
            return {"status": "OK", "offset": self.committed.get(env["queue_id"], -1)}
        if op == "queue_offsets":
            return {"status": "OK", "queues": [{"queue_id": q, "min_offset": lo, "max_offset": hi}
                                               for q, (lo, hi) in self.bounds.items()]}
        if op == "commit_offset":
            self.commits.append((env["queue_id"], env["offset"]))
            self.committed[env["queue_id"]] = env["offset"]
            return {"status": "OK"}
        if op == "offset_by_time":
            return {"status": "OK", "offset": 42}
        if op == "pull":
            with self.lock:
                self.pulls.append((env["queue_id"], env["offset"], env.get("tag_filter"), env["format"]))
                script = self.answers[env["queue_id"]]
                answer = self.by_offset.get((env["queue_id"], env["offset"]))
                if answer is None:
                    answer = script.pop(0) if script else None
            if answer is None:
                lo, hi = self.bounds[env["queue_id"]]
                return {"status": "NO_MESSAGE_IN_QUEUE", "next_begin_offset": env["offset"],
                        "min_offset": lo, "max_offset": hi, "count": 0, "_frames": [b""]}
            return answer(env)
        return {"status": "ERROR", "code": 2, "reason": op}


def found(offsets, nxt, hi=100, tags=None):
    def answer(env):
        return {"status": "FOUND", "next_begin_offset": nxt, "min_offset": 0, "max_offset": hi,
                "count": len(offsets), "_frames": [records("t", env["queue_id"], offsets, tags)]}
    return answer


def status(name, nxt, hi=100, lo=0):
    return lambda env: {"status": name, "next_begin_offset": nxt, "min_offset": lo, "max_offset": hi,
                        "count": 0, "_frames": [b""]}


@pytest.fixture
def reader():
    peers = []

    def make(**kw):
        script = Reader(**kw)
        peer = Peer(script)
        peers.append(peer)
        return script, peer.endpoint
    yield make
    for p in peers:
        p.close()


def poll_until(c: Consumer, n: int, **kw) -> list:
    out = []
    for _ in range(50):
        out += c.poll(100, **kw)
        if len(out) >= n:
            break
    return out


def test_starting_offsets(reader):
    script, ep = reader(queues=3, committed={1: 7}, bounds={0: (5, 50), 1: (0, 50), 2: (3, 9)})
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        assert c.positions() == {0: 5, 1: 7, 2: 3} and c.committed() == {0: -1, 1: 7, 2: -1}
    with Consumer(ep, "g", "t", start="latest", auto_commit=False, long_poll_ms=50) as c:
        assert c.positions() == {0: 50, 1: 7, 2: 9}
    with Consumer(ep, "g", "t", queues=[2], auto_commit=False) as c:
        assert c.assignment() == [2]


def test_found_messages_in_order_and_raw_format(reader):
    script, ep = reader()
    script.answers[0] = [found([0, 1, 2], 3), found([3, 4], 5)]
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        got = poll_until(c, 5)
        assert [m.body for m in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
        assert c.positions() == {0: 5}
    assert [p[1] for p in script.pulls[:2]] == [0, 3] and script.pulls[0][3] == "raw"


@pytest.mark.parametrize("name, nxt", [
    ("OFFSET_TOO_SMALL", 20), ("OFFSET_OVERFLOW_BADLY", 0), ("NO_MATCHED_MESSAGE", 9),
    ("OFFSET_FOUND_NULL", 9), ("MESSAGE_WAS_REMOVING", 9),
])
def test_statuses_follow_next_begin_offset(reader, name, nxt):
    script, ep = reader(committed={0: 5})
    script.answers[0] = [status(name, nxt), found([nxt], nxt + 1)]
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        got = poll_until(c, 1)
        assert [m.queue_offset for m in got] == [nxt]
        assert c.positions() == {0: nxt + 1}
        c.commit()
    assert script.pulls[0][1] == 5 and script.pulls[1][1] == nxt
    assert script.committed[0] == nxt + 1


def test_empty_answers_keep_the_offset_and_mark_caught_up(reader):
    script, ep = reader(bounds={0: (0, 3)}, committed={0: 3})
    script.answers[0] = [status("OFFSET_OVERFLOW_ONE", 3, hi=3)]
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        assert c.poll(200) == [] and c.caught_up and c.positions() == {0: 3}
    assert {p[1] for p in script.pulls} == {3}


def test_tags_are_rechecked_on_the_client(reader):
    script, ep = reader()
    collide = lambda env: {**found([0, 1], 2, tags="Other")(env)}        # hash matched, tag did not
    script.answers[0] = [collide, found([2], 3, tags="TagA")]
    with Consumer(ep, "g", "t", tag_filter="TagA || TagB", auto_commit=False, long_poll_ms=50) as c:
        got = poll_until(c, 1)
        assert [m.queue_offset for m in got] == [2] and c.positions() == {0: 3}
    assert script.pulls[0][2] == "TagA || TagB"


def test_max_records_moves_the_position_per_message(reader):
    script, ep = reader()
    script.answers[0] = [found([0, 1, 2, 3], 4)]
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        first = poll_until(c, 1, max_records=3)
        assert [m.queue_offset for m in first] == [0, 1, 2] and c.positions() == {0: 3}
        assert [m.queue_offset for m in c.poll(100)] == [3] and c.positions() == {0: 4}


def test_seek_drops_buffered_messages_and_answers_of_older_pulls(reader):
    script, ep = reader()
    # By offset: the consumer pulls ahead (the pull at 3 goes out before poll returns), and
    # its answer must be dropped by the seek like the buffered messages 1 and 2.
    script.by_offset = {(0, 0): found([0, 1, 2], 3), (0, 3): found([3, 4], 5),
                        (0, 10): found([10, 11], 12)}
    with Consumer(ep, "g", "t", auto_commit=False, long_poll_ms=50) as c:
        first = poll_until(c, 1, max_records=1)
        assert [m.queue_offset for m in first] == [0]
        c.seek(0, 10)
        got = poll_until(c, 2)
        assert [m.queue_offset for m in got] == [10, 11] and c.positions() == {0: 12}
        assert c.seek_to_timestamp(123) == {0: 42}


def test_close_commits_and_auto_commit(reader):
    script, ep = reader()
    script.answers[0] = [found([0, 1], 2)]
    with Consumer(ep, "g", "t", auto_commit_interval_ms=0, long_poll_ms=50) as c:
        poll_until(c, 2)
        c.poll(50)                                  # the next poll commits what was handed out
        assert (0, 2) in script.commits
    assert script.committed == {0: 2}


def test_unknown_topic_and_bad_arguments(reader):
    script, ep = reader(queues=0)
    with Consumer(ep, "g", "t", long_poll_ms=50) as c:
        assert c.assignment() == [] and c.poll(50) == [] and c.caught_up
    with pytest.raises(ValueError):
        Consumer(ep, "g", "t", start="middle")
    with pytest.raises(ValueError):
        Consumer(ep, "", "t")


def test_parse_tag_filter():
    assert parse_tag_filter(None) is None and parse_tag_filter("*") is None and parse_tag_filter(" ") is None
    assert parse_tag_filter("A || B ||C") == {"A", "B", "C"} and parse_tag_filter("A || *") == {"A", "*"}
