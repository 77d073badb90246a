"""The client side of a group membership (ipc/group_member.py), with no reader: the fields a
member sends, what an answer gains and loses it, and joining again with the same id."""
import pytest

from ipc.group_member import GroupMembership


def test_answers_give_gains_and_losses_and_the_next_beat():
    m = GroupMembership("G", "T", session_timeout_ms=3000, heartbeat_interval_ms=500)
    assert m.join_fields()["member_id"] == m.member_id and "@" in m.member_id
    assert m.commit_fields()["member_id"] == m.member_id
    gained, lost = m.take({"queues": [0, 1, 2], "generation": 4}, [], now=10.0)
    assert (gained, lost, m.generation, m.next_beat, m.joined) == ([0, 1, 2], [], 4, 10.5, True)
    assert m.heartbeat_fields([2, 0, 1])["holding"] == [0, 1, 2]
    gained, lost = m.take({"queues": [0, 3], "generation": 5}, [0, 1, 2], now=11.0)
    assert (gained, lost) == ([3], [1, 2])
    same = m.member_id
    m.forget()
    assert not m.joined and m.due(0.0) and m.join_fields()["member_id"] == same


def test_bad_answers_and_intervals_are_refused():
    m = GroupMembership("G", "T")
    with pytest.raises(ValueError):
        m.take({"queues": "0,1"}, [], 0.0)
    with pytest.raises(ValueError):
        GroupMembership("G", "T", session_timeout_ms=1000, heartbeat_interval_ms=1000)
