"""Consumer groups with members, as RocketMQ's clustering consumption: who is in a group (per
group and topic), which queues each member reads, and whether a member may commit a queue's
offset. No sockets and no clock of its own (every call takes `now`, in seconds): the reader
service hosts it (services/reader/groups.py) and the tests drive it directly.

Membership. A member joins with an id (the client's, or one made here), stays while it
heartbeats within its session timeout, and leaves (or is dropped when its session ends). The
*generation* of a group goes up whenever its member set or the topic's queue count changes.

Allocation. A member's *target* is RocketMQ's AllocateMessageQueueAveragely over the sorted
member ids: with Q queues and M members, member i of the sorted list gets a contiguous run of
Q // M queues, one more for the first Q % M members (at most one queue each when Q <= M;
members past Q get none).

Handover. A queue has at most one *owner*, who alone reads it and may commit its offset. When
its target changes, the queue stays with its owner until that owner releases it (a heartbeat
whose `holding` list leaves it out, sent after the owner committed its offset) or its session
ends, or `session_timeout` passes since the target changed (an owner that never lets go); only
then does the new target get it, and reads from the committed offset. Nothing is skipped; what
the old owner read after its last commit is read again (at least once). A commit from a member
that does not own the queue (an old generation's, an evicted member's) is refused.

The state lives in memory: a restarted reader has no members, every client's next heartbeat is
answered UNKNOWN_MEMBER and it joins again (offsets are kept in consumer_offsets.json).
"""
from __future__ import annotations

import dataclasses
import itertools
import os

DEFAULT_SESSION_TIMEOUT_MS = 10_000      # Kafka's session.timeout.ms before 3.0 (now 45 s)
MIN_SESSION_TIMEOUT_MS = 100
MAX_SESSION_TIMEOUT_MS = 600_000


class UnknownMember(Exception):
    """The member is not in the group (its session ended, it left, or it never joined)."""


def allocate_averagely(queues: list, members: list, member: str) -> list:
    """`member`'s share of `queues` (in their order) among `members` (sorted here), as
    RocketMQ's AllocateMessageQueueAveragely; [] when it is not a member."""
    ordered = sorted(members)
    if member not in ordered or not queues:
        return []
    index, q, m = ordered.index(member), len(queues), len(ordered)
    mod = q % m
    size = 1 if q <= m else (q // m + 1 if index < mod else q // m)
    start = index * size if index < mod else index * size + mod
    return [queues[(start + i) % q] for i in range(max(0, min(size, q - start)))]


@dataclasses.dataclass
class Member:
    member_id: str
    session_s: float
    expires: float
    client: str = ""


@dataclasses.dataclass(frozen=True)
class Assignment:
    """What a member is told: the generation, the queues it owns and keeps (it reads them; a
    queue it reads and that is not listed it must commit and let go of) and the session
    timeout it must heartbeat within."""
    member_id: str
    generation: int
    queues: tuple
    session_timeout_ms: int


class Group:
    """One group's members and queue owners on one topic."""

    def __init__(self):
        self.members: dict = {}            # member id -> Member
        self.owners: dict = {}             # queue id -> owner's member id
        self.moving: dict = {}             # queue id -> when its target left its owner
        self.queue_count = 0
        self.generation = 0

    def targets(self) -> dict:
        """queue id -> the member it is allocated to."""
        ids = list(self.members)
        queues = list(range(self.queue_count))
        return {q: m for m in ids for q in allocate_averagely(queues, ids, m)}

    def settle(self, now: float, timeout_s: float) -> None:
        """Give every free queue to its target; free a queue whose owner is gone, or whose
        handover waited longer than `timeout_s`."""
        for q in [q for q in self.owners if q >= self.queue_count]:
            del self.owners[q]
            self.moving.pop(q, None)
        targets = self.targets()
        for q in range(self.queue_count):
            owner, target = self.owners.get(q), targets.get(q)
            if owner == target:
                self.moving.pop(q, None)
                continue
            if owner is not None and owner in self.members:
                since = self.moving.setdefault(q, now)
                if now - since < timeout_s:
                    continue                     # the owner has not let go yet
            self.moving.pop(q, None)
            if target is None:
                self.owners.pop(q, None)
            else:
                self.owners[q] = target

    def owned(self, member_id: str) -> tuple:
        return tuple(sorted(q for q, m in self.owners.items() if m == member_id))


class ConsumerGroups:
    """Every group and topic with members (module docstring)."""

    def __init__(self):
        self._groups: dict = {}           # (group, topic) -> Group
        self._ids = itertools.count(1)

    def _group(self, group: str, topic: str, queue_count: int, now: float) -> Group:
        g = self._groups.get((group, topic))
        if g is None:
            g = self._groups[(group, topic)] = Group()
        self._expire(g, now)
        if queue_count != g.queue_count:
            g.queue_count = queue_count
            g.generation += 1
        return g

    @staticmethod
    def _expire(g: Group, now: float) -> None:
        gone = [m for m, member in g.members.items() if member.expires <= now]
        for m in gone:
            del g.members[m]
        if gone:
            g.generation += 1
            for q in [q for q, m in g.owners.items() if m not in g.members]:
                del g.owners[q]                  # its session ended: the queue is free

    @staticmethod
    def _timeout(g: Group) -> float:
        return max((m.session_s for m in g.members.values()), default=DEFAULT_SESSION_TIMEOUT_MS / 1000)

    def _answer(self, g: Group, member: Member, now: float) -> Assignment:
        """The queues the member owns and keeps: one it owns that is allocated to another is
        left out, which tells the member to commit and let go of it."""
        g.settle(now, self._timeout(g))
        targets = g.targets()
        keep = tuple(q for q in g.owned(member.member_id) if targets.get(q) == member.member_id)
        return Assignment(member.member_id, g.generation, keep, round(member.session_s * 1000))

    def join(self, group: str, topic: str, queue_count: int, now: float, member_id: str | None = None,
             session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, client: str = "") -> Assignment:
        """Add a member (or renew one that joins again with its id); its assignment."""
        g = self._group(group, topic, queue_count, now)
        if not member_id:
            member_id = f"{client or 'member'}-{os.getpid()}-{next(self._ids)}"
        session_s = session_timeout_ms / 1000
        member = g.members.get(member_id)
        if member is None:
            member = g.members[member_id] = Member(member_id, session_s, now + session_s, client)
            g.generation += 1
        member.session_s, member.expires = session_s, now + session_s
        return self._answer(g, member, now)

    def heartbeat(self, group: str, topic: str, member_id: str, queue_count: int, now: float,
                  holding=None) -> Assignment:
        """Renew a member's session; `holding` (None: unchanged) lists the queues it still
        reads: a queue it owns, is not allocated to it and is not in the list is released.
        UnknownMember when it is not in the group."""
        g = self._group(group, topic, queue_count, now)
        member = g.members.get(member_id)
        if member is None:
            raise UnknownMember(member_id)
        member.expires = now + member.session_s
        if holding is not None:
            keep, targets = set(holding), g.targets()
            for q in g.owned(member_id):
                if q not in keep and targets.get(q) != member_id:
                    del g.owners[q]
                    g.moving.pop(q, None)
        return self._answer(g, member, now)

    def leave(self, group: str, topic: str, member_id: str, now: float) -> bool:
        """Remove a member (its queues go to the others); False when it was not there."""
        g = self._groups.get((group, topic))
        if g is None or g.members.pop(member_id, None) is None:
            return False
        g.generation += 1
        for q in g.owned(member_id):
            del g.owners[q]
        g.settle(now, self._timeout(g))
        return True

    def may_commit(self, group: str, topic: str, member_id: str, queue_id: int, now: float) -> bool:
        """Whether `member_id` owns the queue now (its commit is taken)."""
        g = self._groups.get((group, topic))
        if g is None:
            return False
        self._expire(g, now)
        g.settle(now, self._timeout(g))
        return member_id in g.members and g.owners.get(queue_id) == member_id

    def describe(self, group: str, topic: str, now: float) -> dict | None:
        """{"generation", "members": [{"member_id", "client", "queues", "expires_in_ms"}]},
        None when the group has no members on the topic."""
        g = self._groups.get((group, topic))
        if g is None:
            return None
        self._expire(g, now)
        g.settle(now, self._timeout(g))
        if not g.members:
            return None
        return {"generation": g.generation, "members": [
            {"member_id": m.member_id, "client": m.client, "queues": list(g.owned(m.member_id)),
             "expires_in_ms": max(0, round((m.expires - now) * 1000))}
            for m in sorted(g.members.values(), key=lambda m: m.member_id)]}

    def groups(self, now: float) -> list:
        """[(group, topic)] of every group with members."""
        out = []
        for (group, topic), g in list(self._groups.items()):
            self._expire(g, now)
            if g.members:
                out.append((group, topic))
            else:
                del self._groups[(group, topic)]
        return sorted(out)
