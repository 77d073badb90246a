"""Consumer groups with members against a real `mqstore start` store: three member processes
share 8 queues, a fourth joins, one is closed and one is killed with SIGKILL while messages
keep coming; every message is read (at least once, no gap in any queue) and the killed
member's queues are taken up within its session timeout. A member's commit for a queue it no
longer owns is refused; broadcasting consumers each read everything and commit nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ipc import Admin, Consumer, Producer
from ipc.connection import Connection, MQError
from ipc.protocol import ErrorCode
from tests.integration.harness import wait_for
from tests.integration.supervised import REPO, SupervisedStore

QUEUES = 8
SESSION_MS = 2000
HEARTBEAT_MS = 200
PER_STEP = 800


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("groups"), mapped_file_size_commitlog=4 * 1024 * 1024).start()
    yield s
    s.ensure_stopped()


class Member:
    def __init__(self, store, group: str, topic: str, out: str):
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_member_proc", store.address, group, topic,
             out, str(SESSION_MS), str(HEARTBEAT_MS)], cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "joined"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(30) == 0


def shares(admin: Admin, group: str, topic: str) -> list:
    """Each member's queues, as the reader reports them (sorted by member id)."""
    lag = admin.consumer_lag(group, topic)
    return [m["queues"] for m in lag.get("members", ())]


def balanced(admin: Admin, group: str, topic: str, members: int) -> bool:
    got = shares(admin, group, topic)
    sizes = sorted(len(s) for s in got)
    base = QUEUES // members
    return len(got) == members and sorted(q for s in got for q in s) == list(range(QUEUES)) \
        and sizes == [base] * (members - QUEUES % members) + [base + 1] * (QUEUES % members)


def produce(p: Producer, topic: str, start: int, n: int, queues: int = QUEUES) -> None:
    futs = [p.send_async(topic, b"m%d" % i, queue_id=i % queues) for i in range(start, start + n)]
    assert p.flush(60) and all(f.result(0).ok for f in futs)


@pytest.mark.slow
def test_members_share_the_queues_through_join_close_and_kill(store, tmp_path):
    topic, group = "shared", "g-shared"
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, QUEUES)
        members = [Member(store, group, topic, str(tmp_path / f"m{i}.txt")) for i in range(3)]
        try:
            assert wait_for(lambda: balanced(admin, group, topic, 3), 15)
            produce(p, topic, 0, PER_STEP)
            members.append(Member(store, group, topic, str(tmp_path / "m3.txt")))
            assert wait_for(lambda: balanced(admin, group, topic, 4), 15)
            produce(p, topic, PER_STEP, PER_STEP)
            members[0].stop()                                   # closed: leaves at once
            assert wait_for(lambda: balanced(admin, group, topic, 3), 15)
            produce(p, topic, 2 * PER_STEP, PER_STEP)
            members[1].proc.kill()                              # SIGKILL: no more heartbeats
            killed = time.monotonic()
            members[1].proc.wait(10)
            assert wait_for(lambda: balanced(admin, group, topic, 2), 15)
            taken_up = time.monotonic() - killed
            assert taken_up < SESSION_MS / 1000 + 2.0, taken_up   # the session plus a few beats
            produce(p, topic, 3 * PER_STEP, PER_STEP)
            assert wait_for(lambda: admin.consumer_lag(group, topic)["total_lag"] == 0, 60)
        finally:
            for m in members:
                if m.proc.poll() is None:
                    m.stop()
    total = 4 * PER_STEP
    seen: dict = {}
    for m in members:
        with open(m.out) as f:
            for line in f:
                q, off, body = line.split()
                seen.setdefault(int(q), set()).add((int(off), body))
    for q in range(QUEUES):
        offsets = sorted({o for o, _ in seen.get(q, ())})
        assert offsets == list(range(total // QUEUES)), f"queue {q} has a gap"   # none skipped
        assert {b for _, b in seen[q]} == {f"m{i}" for i in range(q, total, QUEUES)}


def test_a_stale_member_s_commit_is_refused(store):
    topic, group = "stale", "g-stale"
    with Admin(store.address) as admin, Connection(store.address) as conn:
        admin.create_topic(topic, 4)
        a = conn.call("reader", "join_group", group=group, topic=topic, member_id="a",
                      session_timeout_ms=1000)
        assert a["queues"] == [0, 1, 2, 3]
        b = conn.call("reader", "join_group", group=group, topic=topic, member_id="b",
                      session_timeout_ms=1000)
        assert b["queues"] == [] and b["generation"] > a["generation"]
        told = conn.call("reader", "heartbeat", group=group, topic=topic, member_id="a", holding=[0, 1, 2, 3])
        assert told["queues"] == [0, 1]                            # let go of 2 and 3
        conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=3, offset=7,
                  member_id="a", generation=told["generation"])  # its last commit: taken
        conn.call("reader", "heartbeat", group=group, topic=topic, member_id="a", holding=[0, 1])
        b = conn.call("reader", "heartbeat", group=group, topic=topic, member_id="b", holding=[])
        assert b["queues"] == [2, 3]
        with pytest.raises(MQError) as e:
            conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=3, offset=2,
                      member_id="a", generation=a["generation"])
        assert e.value.code is ErrorCode.NOT_QUEUE_OWNER
        assert admin.fetch_offset(group, topic, 3) == 7          # not moved back
        conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=3, offset=9,
                  member_id="b", generation=b["generation"])
        assert admin.fetch_offset(group, topic, 3) == 9
        # a falls silent: after its session it is no member, its commits are refused

        def only_b() -> bool:
            conn.call("reader", "heartbeat", group=group, topic=topic, member_id="b")   # b lives on
            return [m["member_id"] for m in admin.consumer_lag(group, topic)["members"]] == ["b"]
        assert wait_for(only_b, 5, 0.1)
        with pytest.raises(MQError) as e:
            conn.call("reader", "commit_offset", group=group, topic=topic, queue_id=0, offset=1,
                      member_id="a")
        assert e.value.code is ErrorCode.UNKNOWN_MEMBER
        with pytest.raises(MQError) as e:
            conn.call("reader", "heartbeat", group=group, topic=topic, member_id="a")
        assert e.value.code is ErrorCode.UNKNOWN_MEMBER
        assert conn.call("reader", "leave_group", group=group, topic=topic, member_id="b")["left"]


def test_a_consumer_whose_queue_moved_cannot_commit_it(store):
    topic, group = "moved", "g-moved"
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, 2)
        produce_two = [p.send(topic, b"x", queue_id=q) for q in (0, 1)]
        assert all(r.ok for r in produce_two)
        c1 = Consumer(store.address, group, topic, session_timeout_ms=500, heartbeat_interval_ms=100,
                      max_poll_interval_ms=200, auto_commit=False)     # stuck after 200 ms
        assert c1.assignment() == [0, 1]
        assert len(c1.poll(2000)) >= 1
        with Consumer(store.address, group, topic, session_timeout_ms=500, heartbeat_interval_ms=100,
                      auto_commit=False) as c2:
            # c1 does not poll: taken to be stuck, its session ends and c2 takes both queues
            deadline = time.monotonic() + 10
            while c2.assignment() != [0, 1] and time.monotonic() < deadline:
                c2.poll(100)
            assert c2.assignment() == [0, 1]
            with pytest.raises(MQError) as e:
                c1.commit()
            assert e.value.code in (ErrorCode.UNKNOWN_MEMBER, ErrorCode.NOT_QUEUE_OWNER)
            assert admin.fetch_offset(group, topic, 0) == -1
        c1.close()


IDLE_SESSION_MS = 600


def members_of(admin: Admin, group: str, topic: str) -> list:
    return [(m["member_id"], m["queues"]) for m in admin.consumer_lag(group, topic).get("members", ())]


def test_a_member_busy_for_longer_than_its_session_keeps_its_queues(store):
    """Heartbeats between polls (ipc/keepalive.py): the member does not poll for three
    sessions (it is busy with a batch), stays in the group with its queues, and its next poll
    goes on without joining again."""
    topic, group = "busy", "g-busy"
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, 4)
        assert all(p.send(topic, b"x%d" % q, queue_id=q).ok for q in range(4))
        with Consumer(store.address, group, topic, session_timeout_ms=IDLE_SESSION_MS,
                      heartbeat_interval_ms=100) as c:
            me = c._group.member.member_id
            generation = c._group.member.generation
            assert len(c.poll(2000)) >= 1 and c.assignment() == [0, 1, 2, 3]
            time.sleep(3 * IDLE_SESSION_MS / 1000)          # busy: no poll for three sessions
            assert members_of(admin, group, topic) == [(me, [0, 1, 2, 3])]
            assert c._keepalive.sent >= 3
            c.poll(100)
            assert c._group.member.member_id == me and c._group.member.generation == generation
            assert c.assignment() == [0, 1, 2, 3]


def test_an_asyncio_member_busy_for_longer_than_its_session_keeps_its_queues(store):
    import asyncio
    from ipc import aio
    topic, group = "busy-aio", "g-busy-aio"
    with Admin(store.address) as admin:
        admin.create_topic(topic, 2)

        async def main():
            async with aio.Consumer(store.address, group, topic, session_timeout_ms=IDLE_SESSION_MS,
                                    heartbeat_interval_ms=100) as c:
                me = c._group.member.member_id
                assert c.assignment() == [0, 1]
                await asyncio.sleep(3 * IDLE_SESSION_MS / 1000)    # the loop runs, nothing polls
                assert members_of(admin, group, topic) == [(me, [0, 1])]
                assert c._keepalive.sent >= 3
                await c.poll(100)
                assert c.assignment() == [0, 1] and c._group.member.member_id == me
        asyncio.run(main())


def test_broadcasting_keeps_its_offsets_in_its_own_file(store, tmp_path):
    topic, group, path = "bcast-file", "g-bcast-file", str(tmp_path / "offsets.json")
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, 2)
        produce(p, topic, 0, 100, queues=2)
        with Consumer(store.address, group, topic, mode="broadcasting", offset_file=path) as c:
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                got += c.poll(200)
        assert len(got) == 100
        assert json.load(open(path))["offsets"] == {"0": 50, "1": 50}
        produce(p, topic, 100, 10, queues=2)
        with Consumer(store.address, group, topic, mode="broadcasting", offset_file=path) as c:
            assert c.committed() == {0: 50, 1: 50}
            rest = []
            deadline = time.monotonic() + 20
            while len(rest) < 10 and time.monotonic() < deadline:
                rest += c.poll(200)
        assert sorted(bytes(m.body) for m in rest) == sorted(b"m%d" % i for i in range(100, 110))
        assert admin.fetch_offset(group, topic, 0) == -1                # nothing in the store
        with pytest.raises(ValueError):
            Consumer(store.address, group, topic, offset_file=path)    # clustering: the store's


def test_broadcasting_consumers_each_read_everything(store):
    topic, group = "bcast", "g-bcast"
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, 4)
        produce(p, topic, 0, 400, queues=4)
        cs = [Consumer(store.address, group, topic, mode="broadcasting") for _ in range(2)]
        try:
            for c in cs:
                assert c.assignment() == [0, 1, 2, 3]
                got = []
                deadline = time.monotonic() + 20
                while len(got) < 400 and time.monotonic() < deadline:
                    got += c.poll(200)
                assert sorted(bytes(m.body) for m in got) == sorted(b"m%d" % i for i in range(400))
                assert c.commit() == {q: 100 for q in range(4)}       # kept by the client
        finally:
            for c in cs:
                c.close()
        assert [admin.fetch_offset(group, topic, q) for q in range(4)] == [-1] * 4
        assert "members" not in admin.consumer_lag(group, topic)


def test_members_join_again_after_the_reader_restarts(store):
    topic, group = "rejoin", "g-rejoin"
    with Admin(store.address) as admin, Producer(store.address) as p:
        admin.create_topic(topic, 2)
        produce(p, topic, 0, 100, queues=2)
        got = []
        with Consumer(store.address, group, topic, session_timeout_ms=2000, heartbeat_interval_ms=100,
                      auto_commit_interval_ms=100) as c:
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                got += c.poll(100)
            c.commit()
            old = store.service("reader")
            os.kill(old["pid"], signal.SIGKILL)             # members live in the reader's memory
            store.wait_service("reader", "RUNNING", restarts=old["restarts"] + 1)
            produce(p, topic, 100, 100, queues=2)
            deadline = time.monotonic() + 30
            while len(got) < 200 and time.monotonic() < deadline:
                got += c.poll(100)
            assert sorted(bytes(m.body) for m in got) == sorted(b"m%d" % i for i in range(200))
            assert c.assignment() == [0, 1]
            members = admin.consumer_lag(group, topic)["members"]
            assert [m["member_id"] for m in members] == [c._group.member.member_id]   # joined again
