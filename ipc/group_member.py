"""The client side of a consumer-group membership (docs/PROTOCOL.md, "Consumer groups"), with
no sockets: the fields of `join_group`, `heartbeat` and `leave_group`, what an answer changes
(the queues this member gained and lost), when the next heartbeat is due, and the member's
fields that its offset commits carry. The blocking Consumer drives it (and an asyncio one
would drive the same object).

A member id is made once per membership, `host@pid#n` (RocketMQ's client ids are `ip@pid`),
so that ids sort the same way whatever order members join in; joining again after an
UNKNOWN_MEMBER answer (the reader restarted, or this member's session ended while it was not
polling) keeps the id.
"""
from __future__ import annotations

import itertools
import os
import socket

CLUSTERING = "clustering"          # RocketMQ's MessageModel names
BROADCASTING = "broadcasting"
DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 1_000
_SEQ = itertools.count(1)


def new_member_id() -> str:
    return f"{socket.gethostname()}@{os.getpid()}#{next(_SEQ)}"


class GroupMembership:
    """One member's view of its group on one topic."""

    def __init__(self, group: str, topic: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS, member_id: str | None = None):
        if not 0 < heartbeat_interval_ms < session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be above 0 and "
                             f"below session_timeout_ms ({session_timeout_ms})")
        self.group = group
        self.topic = topic
        self.session_timeout_ms = session_timeout_ms
        self.interval_s = heartbeat_interval_ms / 1000
        self.member_id = member_id or new_member_id()
        self.joined = False
        self.generation = -1
        self.queues: frozenset = frozenset()
        self.next_beat = 0.0

    def join_fields(self) -> dict:
        return {"group": self.group, "topic": self.topic, "member_id": self.member_id,
                "session_timeout_ms": self.session_timeout_ms, "client": "mqstore-python"}

    def heartbeat_fields(self, holding) -> dict:
        """`holding`: the queues this member still reads (it let go of the others)."""
        return {"group": self.group, "topic": self.topic, "member_id": self.member_id,
                "holding": sorted(holding)}

    def leave_fields(self) -> dict:
        return {"group": self.group, "topic": self.topic, "member_id": self.member_id}

    def commit_fields(self) -> dict:
        """What a commit of this member adds, so that the reader takes it only from a queue's
        owner."""
        return {"member_id": self.member_id, "generation": self.generation}

    def due(self, now: float) -> bool:
        return now >= self.next_beat

    def take(self, env: dict, held, now: float) -> tuple[list, list]:
        """Apply a join or heartbeat answer; (queues gained, queues lost) against `held`, the
        queues the consumer reads now."""
        queues = env.get("queues")
        if not isinstance(queues, list) or not all(type(q) is int for q in queues):
            raise ValueError(f"a group answer without a list of queues: {env!r}")
        self.joined = True
        self.generation = env.get("generation", self.generation)
        self.queues = frozenset(queues)
        self.next_beat = now + self.interval_s
        held = set(held)
        return sorted(self.queues - held), sorted(held - self.queues)

    def forget(self) -> None:
        """The reader does not know this member (UNKNOWN_MEMBER): join again at once."""
        self.joined = False
        self.next_beat = 0.0
