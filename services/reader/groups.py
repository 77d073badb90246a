"""The reader's consumer-group operations (docs/PROTOCOL.md, "Consumer groups"): `join_group`,
`heartbeat`, `leave_group` and `groups`, over core.meta.consumer_groups.ConsumerGroups, which holds
the members, the allocation and the handover rules. The reader also asks it, through
`check_commit`, whether an offset commit that names a member may be taken, and, through
`describe`, who owns each queue for `consumer_lag`.
"""
from __future__ import annotations

import time

from core.meta.consumer_groups import MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, DEFAULT_SESSION_TIMEOUT_MS, \
    ConsumerGroups, UnknownMember
from ipc.protocol import OK, ErrorCode, ProtocolError, field, reply

MAX_QUEUES = 1 << 16


class GroupOps:
    """Handlers for the group ops. `names(env, key, code)` checks a group or topic name as the
    other reader ops do; `queue_count(topic)` is the topic's queue count (0: not known yet)."""

    def __init__(self, names, queue_count, clock=time.monotonic):
        self.groups = ConsumerGroups()
        self._name = names
        self._queue_count = queue_count
        self._clock = clock

    def register(self, handlers) -> None:
        for name in ("join_group", "heartbeat", "leave_group", "groups"):
            handlers.op(name)(getattr(self, "op_" + name))

    def _target(self, env: dict) -> tuple[str, str]:
        return self._name(env, "group", ErrorCode.BAD_FIELD), self._name(env, "topic", ErrorCode.BAD_TOPIC)

    @staticmethod
    def _member_id(env: dict, default=...) -> str:
        member = field(env, "member_id", str, default)
        if member is not None and not 0 < len(member) <= 255:
            raise ProtocolError(ErrorCode.BAD_FIELD, "field 'member_id' must be 1..255 characters")
        return member

    @staticmethod
    def _assigned(rid, a, queue_count: int) -> list:
        return reply(rid, OK, {"member_id": a.member_id, "generation": a.generation,
                               "queues": list(a.queues), "queue_count": queue_count,
                               "session_timeout_ms": a.session_timeout_ms})

    def op_join_group(self, env, frames, peer):
        group, topic = self._target(env)
        member = self._member_id(env, None)
        session = field(env, "session_timeout_ms", int, DEFAULT_SESSION_TIMEOUT_MS,
                        minimum=MIN_SESSION_TIMEOUT_MS, maximum=MAX_SESSION_TIMEOUT_MS)
        client = field(env, "client", str, "")[:255]
        count = min(self._queue_count(topic), MAX_QUEUES)
        a = self.groups.join(group, topic, count, self._clock(), member, session, client)
        return self._assigned(env.get("rid", 0), a, count)

    def op_heartbeat(self, env, frames, peer):
        group, topic = self._target(env)
        member = self._member_id(env)
        holding = field(env, "holding", list, None)
        if holding is not None and not all(type(q) is int for q in holding):
            raise ProtocolError(ErrorCode.BAD_FIELD, "field 'holding' must be a list of queue ids")
        count = min(self._queue_count(topic), MAX_QUEUES)
        try:
            a = self.groups.heartbeat(group, topic, member, count, self._clock(), holding)
        except UnknownMember:
            raise ProtocolError(ErrorCode.UNKNOWN_MEMBER, f"{member!r} is not a member of group "
                                f"{group!r} on {topic!r} (its session ended or it left): join again") from None
        return self._assigned(env.get("rid", 0), a, count)

    def op_leave_group(self, env, frames, peer):
        group, topic = self._target(env)
        left = self.groups.leave(group, topic, self._member_id(env), self._clock())
        return reply(env.get("rid", 0), OK, {"left": left})

    def op_groups(self, env, frames, peer):
        now = self._clock()
        out = []
        for group, topic in self.groups.groups(now):
            d = self.groups.describe(group, topic, now)
            if d is not None:
                out.append({"group": group, "topic": topic, **d})
        return reply(env.get("rid", 0), OK, {"groups": out})

    # -- asked by the other reader ops --------------------------------------------------------
    def check_commit(self, env: dict, group: str, topic: str, queue_id: int) -> None:
        """ProtocolError unless a commit naming `member_id` comes from the queue's owner (a
        commit without one, from an operator or a consumer of explicit queues, is taken)."""
        member = self._member_id(env, None)
        if member is None:
            return
        now = self._clock()
        if self.groups.may_commit(group, topic, member, queue_id, now):
            return
        d = self.groups.describe(group, topic, now)
        if d is None or all(m["member_id"] != member for m in d["members"]):
            raise ProtocolError(ErrorCode.UNKNOWN_MEMBER, f"{member!r} is not a member of group "
                                f"{group!r} on {topic!r}: its commit of queue {queue_id} is refused")
        raise ProtocolError(ErrorCode.NOT_QUEUE_OWNER, f"queue {queue_id} of {topic!r} is not owned by "
                            f"{member!r} in generation {d['generation']}: its commit is refused")

    def describe(self, group: str, topic: str) -> dict | None:
        return self.groups.describe(group, topic, self._clock())
