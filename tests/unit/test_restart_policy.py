"""The supervisor's restart policy, driven by lifecycle events and a hand-moved clock."""
from __future__ import annotations

import pytest

from ipc.control_block import ServiceState
from supervisor.restart_policy import RestartPolicy


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def policy(clock):
    return RestartPolicy(clock=clock)


def ev(service, event, **fields):
    return {"service": service, "event": event, **fields}


def die(policy, clock, name="appender", code=-9, ran_for=0.5):
    """Spawn, run for `ran_for` seconds, die; return the restart delay chosen."""
    policy.handle(ev(name, "spawned"))
    policy.handle(ev(name, "running"))
    clock.advance(ran_for)
    policy.handle(ev(name, "exited", code=code))
    return policy.restart_in(name)


def test_first_death_restarts_after_one_second(policy, clock):
    assert die(policy, clock) == 1.0
    assert policy.due() == []
    clock.advance(0.99)
    assert policy.due() == []
    clock.advance(0.02)
    assert policy.due() == ["appender"]
    policy.handle(ev("appender", "spawned"))
    assert policy.due() == []
    assert policy.restart_in("appender") is None


def test_delays_double_up_to_thirty_seconds(policy, clock):
    delays = []
    for _ in range(8):
        delays.append(die(policy, clock, ran_for=20.0))   # too rare for BACKOFF, never stable
        clock.advance(delays[-1])
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
    assert not policy.in_backoff("appender")


def test_stable_run_resets_the_streak(policy, clock):
    assert die(policy, clock, ran_for=1) == 1
    clock.advance(1)
    assert die(policy, clock, ran_for=1) == 2
    clock.advance(2)
    assert die(policy, clock, ran_for=61) == 1             # it ran 61 s: the streak starts over


def test_five_deaths_in_a_minute_is_backoff(policy, clock):
    for i in range(4):
        delay = die(policy, clock, ran_for=0.5)
        assert delay is not None
        clock.advance(delay)
    assert not policy.in_backoff("appender")
    assert die(policy, clock, ran_for=0.5) is None
    assert policy.in_backoff("appender")
    assert "5 times" in policy.reason("appender")
    clock.advance(3600)
    assert policy.due() == []                              # left in BACKOFF


def test_deaths_outside_the_window_do_not_count(policy, clock):
    for _ in range(4):
        die(policy, clock, ran_for=0.1)
        clock.advance(16)                                  # 4 deaths spread over 64 s
    die(policy, clock, ran_for=0.1)
    assert not policy.in_backoff("appender")


def test_services_are_independent(policy, clock):
    for _ in range(5):
        die(policy, clock, name="reput", ran_for=0.1)
    assert policy.in_backoff("reput")
    assert die(policy, clock, name="reader") == 1.0
    assert not policy.in_backoff("reader")


def test_requested_stop_is_not_a_death(policy, clock):
    policy.handle(ev("flusher", "spawned"))
    policy.handle(ev("flusher", "running"))
    policy.handle(ev("flusher", "draining"))
    policy.handle(ev("flusher", "stopped"))
    assert policy.due() == [] and policy.restart_in("flusher") is None


def test_clean_exit_nobody_asked_for_is_a_death(policy, clock):
    assert die(policy, clock, name="reader", code=0) == 1.0


def test_cancel_forgets_a_pending_restart(policy, clock):
    die(policy, clock)
    policy.cancel("appender")
    clock.advance(5)
    assert policy.due() == []


def test_events_without_a_service_are_ignored(policy):
    policy.handle({"event": "stats", "puts": {}})
    policy.handle({"service": 7, "event": "exited"})
    assert policy.due() == []


@pytest.mark.parametrize("state, age, hung", [
    (ServiceState.RUNNING, 10.5, True),
    (ServiceState.RUNNING, 9.5, False),
    (ServiceState.RECOVERING, 6000.0, False),
    (ServiceState.STARTING, 60.0, False),
    (ServiceState.STARTING, 121.0, True),
    (ServiceState.DRAINING, 6000.0, False),
    (ServiceState.STOPPED, 6000.0, False),
])
def test_hung_means_running_and_silent_or_never_done_starting(policy, state, age, hung):
    assert policy.is_hung(int(state), age) is hung
