"""Consumer-group membership, allocation and handover (core/meta/consumer_groups.py), driven with
no reader and no clock: RocketMQ's average allocation, generations, the rule that a queue
leaves a live owner only when it lets go (or its session or the handover times out), and the
refusal of commits from members that do not own the queue."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from core.meta.consumer_groups import ConsumerGroups, UnknownMember, allocate_averagely

import pytest


def test_allocate_averagely_as_rocketmq():
    qs = list(range(8))
    assert [allocate_averagely(qs, ["a", "b", "c"], m) for m in "abc"] == \
        [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [allocate_averagely(list(range(3)), list("abcde"), m) for m in "abcde"] == \
        [[0], [1], [2], [], []]
    assert allocate_averagely(qs, ["c", "a", "b"], "c") == [6, 7]      # sorted ids
    assert allocate_averagely(qs, ["a"], "z") == []


@given(st.integers(0, 40), st.sets(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=12))
def test_allocation_covers_every_queue_once(q, members):
    members = list(members)
    shares = [allocate_averagely(list(range(q)), members, m) for m in members]
    flat = sorted(x for s in shares for x in s)
    assert flat == list(range(q))
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1


def test_a_queue_moves_only_after_its_owner_lets_go():
    g = ConsumerGroups()
    a = g.join("G", "T", 4, 0.0, "a", 10_000)
    assert a.queues == (0, 1, 2, 3)
    b = g.join("G", "T", 4, 0.1, "b", 10_000)
    assert b.queues == () and b.generation > a.generation            # a still owns them all
    assert g.may_commit("G", "T", "a", 3, 0.2) and not g.may_commit("G", "T", "b", 3, 0.2)
    a = g.heartbeat("G", "T", "a", 4, 0.3)                           # told to let go of 2, 3
    assert a.queues == (0, 1)
    assert g.heartbeat("G", "T", "b", 4, 0.35).queues == ()          # not before a does
    assert g.may_commit("G", "T", "a", 3, 0.35)                     # a's last commit is taken
    a = g.heartbeat("G", "T", "a", 4, 0.4, holding=[0, 1])           # committed, lets go
    assert a.queues == (0, 1)
    assert g.heartbeat("G", "T", "b", 4, 0.5).queues == (2, 3)
    assert not g.may_commit("G", "T", "a", 3, 0.6)                  # a stale owner's commit
    assert g.leave("G", "T", "b", 0.7)
    assert g.heartbeat("G", "T", "a", 4, 0.8, holding=[0, 1]).queues == (0, 1, 2, 3)


def test_a_dead_member_s_queues_move_after_its_session():
    g = ConsumerGroups()
    g.join("G", "T", 8, 0.0, "a", 2000)
    g.join("G", "T", 8, 0.0, "b", 2000)
    g.heartbeat("G", "T", "a", 8, 0.1, holding=[0, 1, 2, 3])
    assert g.heartbeat("G", "T", "b", 8, 0.2).queues == (4, 5, 6, 7)
    for t in (1.0, 1.9):
        assert g.heartbeat("G", "T", "b", 8, t).queues == (4, 5, 6, 7)   # a is silent
    assert g.heartbeat("G", "T", "b", 8, 2.15).queues == tuple(range(8))
    with pytest.raises(UnknownMember):
        g.heartbeat("G", "T", "a", 8, 2.2)
    assert not g.may_commit("G", "T", "a", 0, 2.2)


def test_an_owner_that_never_lets_go_loses_the_queue_after_the_session_timeout():
    g = ConsumerGroups()
    g.join("G", "T", 2, 0.0, "a", 1000)
    g.join("G", "T", 2, 0.0, "b", 1000)
    g.heartbeat("G", "T", "a", 2, 0.5)
    assert g.heartbeat("G", "T", "b", 2, 0.5).queues == ()
    g.heartbeat("G", "T", "a", 2, 1.0)
    assert g.heartbeat("G", "T", "b", 2, 1.1).queues == (1,)


def test_generation_moves_with_members_and_queue_count():
    g = ConsumerGroups()
    g0 = g.join("G", "T", 4, 0.0, "a").generation
    assert g.heartbeat("G", "T", "a", 4, 0.1).generation == g0
    assert g.heartbeat("G", "T", "a", 6, 0.2).generation > g0
    assert g.heartbeat("G", "T", "a", 6, 0.3).queues == tuple(range(6))
    d = g.describe("G", "T", 0.3)
    assert d["members"][0]["member_id"] == "a" and d["members"][0]["queues"] == list(range(6))
    assert g.groups(0.3) == [("G", "T")]


ops = st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "release", "wait"]),
                         st.sampled_from("abcd"), st.floats(0.0, 1.5)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 9))
def test_owners_change_only_by_release_leave_or_timeout(script, queues):
    """Through any sequence of joins, leaves, heartbeats and silences: every owner is a live
    member, a queue leaves a live owner only when that owner let it go, left, or the session
    timeout (1 s here) passed, and when everyone cooperates every queue is owned by its
    target."""
    g = ConsumerGroups()
    now = 0.0
    alive: dict = {}                       # member -> last heartbeat time
    owners: dict = {}
    target_since: dict = {}
    for op, m, dt in script:
        now += dt
        alive = {x: t for x, t in alive.items() if t + 1.0 > now}   # sessions of 1 s
        was_alive = set(alive)                 # before this step's op (a rejoin is a new member)
        released = set()
        if op == "join":
            g.join("G", "T", queues, now, m, 1000)
            alive[m] = now
        elif op == "leave":
            g.leave("G", "T", m, now)
            alive.pop(m, None)
        elif op in ("beat", "release") and m in alive:
            holding = None
            if op == "release":
                d = g.describe("G", "T", now)
                mine = next(x["queues"] for x in d["members"] if x["member_id"] == m)
                ids = sorted(alive)
                share = set(allocate_averagely(list(range(queues)), ids, m))
                holding = [q for q in mine if q in share]
                released = {q for q in mine if q not in share}
            g.heartbeat("G", "T", m, queues, now, holding)
            alive[m] = now
        d = g.describe("G", "T", now)
        now_owners = {q: x["member_id"] for x in (d["members"] if d else ()) for q in x["queues"]}
        for q, owner in now_owners.items():
            assert owner in alive
            assert g.may_commit("G", "T", owner, q, now)
        for q, old in owners.items():
            new = now_owners.get(q)
            if new != old and old in was_alive and old in alive and not (op == "leave" and m == old):
                timed_out = now - target_since.get(q, now) >= 1.0 - 1e-9
                assert q in released or timed_out, (q, old, new, op, m)
        ids = sorted(alive)
        for q in range(queues):
            tgt = next((x for x in ids if q in allocate_averagely(list(range(queues)), ids, x)), None)
            if now_owners.get(q) == tgt or owners.get(q) != now_owners.get(q):
                target_since.pop(q, None)
            else:
                target_since.setdefault(q, now - dt)
        owners = now_owners
