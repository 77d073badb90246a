"""A Consumer's membership of its group (docs/PROTOCOL.md, "Consumer groups"): it joins, sends
heartbeats from `poll`, takes up the queues the reader gives it and lets go of those it loses,
and leaves at close. The request fields and the reading of answers are
ipc.group_member.GroupMembership's; this module is the steps around them (ipc/steps.py), which
the blocking and the asyncio consumer both run.

Letting go of a queue, in order: its pulls are abandoned and its buffered messages dropped;
with auto commit, its position (the offset after the last message `poll` handed out) is
committed while this member still owns it; it is removed from the consumer; and a heartbeat
that no longer holds it goes out at once, so that the reader can give it to its new owner,
who starts from that commit. Messages handed out after the last commit are read again by the
new owner (at least once).

A reader that predates the group operations (UNKNOWN_OP) makes the consumer read every queue,
as before.
"""
from __future__ import annotations

import logging
import time

from ipc.client_common import MQError
from ipc.group_member import GroupMembership
from ipc.protocol import ErrorCode
from ipc.steps import Call

log = logging.getLogger("mqstore.consumer")

RETRY_S = 1.0
LEAVE_TIMEOUT_S = 2.0


class Rebalancer:
    def __init__(self, consumer, member: GroupMembership):
        self.consumer = consumer
        self.member = member

    def fields(self) -> dict:
        return self.member.commit_fields() if self.member.joined else {}

    def beat_steps(self):
        """Join or heartbeat now and apply the answer (steps, ipc/steps.py); when the next
        beat is due."""
        c, m = self.consumer, self.member
        for _ in range(3):                         # a release is followed by a beat at once
            held = [st.queue_id for st in c._order]
            try:
                if m.joined:
                    env = yield Call("reader", "heartbeat", m.heartbeat_fields(held))
                else:
                    env = yield Call("reader", "join_group", m.join_fields())
            except MQError as e:
                if e.code == ErrorCode.UNKNOWN_MEMBER:
                    log.info("%s is no longer a member of %s: joining again", m.member_id, m.group)
                    m.forget()
                    continue
                if e.code == ErrorCode.UNKNOWN_OP:     # an older reader: every queue, as before
                    log.warning("the reader has no consumer groups: reading every queue")
                    c._group = None
                    yield from c._discover_steps()
                    return c._next_discover
                c.last_error = f"group {m.group}: {e}"
                return time.monotonic() + RETRY_S
            except (TimeoutError, ConnectionError) as e:
                c.last_error = f"group {m.group}: {e}"
                return time.monotonic() + RETRY_S
            gained, lost = m.take(env, held, time.monotonic())
            if gained:
                yield from c._add_queue_steps(gained)
            c._discovered = True        # queues gained from now on are new to this consumer:
                                        # `start="latest"` skips only what was there at its start
            if not lost:
                break
            yield from self._let_go_steps(lost)
        return m.next_beat

    def _let_go_steps(self, lost: list):
        c = self.consumer
        cursors = [c._states[q] for q in lost if q in c._states]
        for st in cursors:
            c._pulls.drop(st)
        if c.auto_commit:
            try:
                yield from c._commit_steps(cursors)
            except (MQError, TimeoutError, ConnectionError) as e:
                c.last_error = f"commit of released queues {lost}: {e}"
                log.info("%s", c.last_error)
        for st in cursors:
            del c._states[st.queue_id]
            c._order.remove(st)

    def leave_steps(self):
        m = self.member
        if not m.joined:
            return
        try:
            yield Call("reader", "leave_group", m.leave_fields(), LEAVE_TIMEOUT_S)
        except (MQError, TimeoutError, ConnectionError) as e:
            log.info("leave_group of %s failed: %s", m.member_id, e)
        m.forget()
