"""The restart policy: when a dead service is started again, when it is given up on (BACKOFF),
and when a hung one is killed. It is a subscriber of lifecycle events (STYLE.md, after
circus's flapping plugin): the supervisor publishes `spawned`, `exited` and `stopped` for the
processes it manages, the services publish `running`, `recovering`, ... over the events
socket, and every event goes through `handle()`. The policy decides; the supervisor acts.

Rules (docs/SERVICES.md):
- After a death the service is restarted after a delay that doubles with each consecutive
  death: 1, 2, 4, 8, 16, 30, 30 ... seconds. The count of consecutive deaths starts over once
  the service has stayed RUNNING for `stable_s` (60 s).
- A service that died `max_deaths` (5) times within `window_s` (60 s) is left in BACKOFF: it is
  not restarted again by this supervisor, and the reason is logged at error level and reported
  by `mqstore status`. (systemd's start limit and circus's flapping `max_retry` do the same; a
  service that cannot stay up needs an operator, not a tight loop.)
- A RUNNING service whose heartbeat is older than `heartbeat_timeout_s` (10 s) is hung: the
  supervisor SIGKILLs it and the death counts like any other. A RECOVERING service is never
  killed for being slow (recovery time grows with the log; rocketmq#9587). A service still
  STARTING (opening files and sockets, before it reports RECOVERING or RUNNING) is given
  `starting_timeout_s` (120 s) of silence.

Exits the supervisor asked for (`stopped`) are not deaths. An exit with code 0 that nobody
asked for is a death: a service must run until it is told to stop.

Time comes from `clock` (monotonic seconds) so that tests drive it by hand.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from ipc.control_block import ServiceState

log = logging.getLogger("mqstore.supervisor.restart")

BASE_DELAY_S = 1.0
MAX_DELAY_S = 30.0
MAX_DEATHS = 5
WINDOW_S = 60.0
STABLE_S = 60.0
HEARTBEAT_TIMEOUT_S = 10.0
STARTING_TIMEOUT_S = 120.0


@dataclass
class ServiceRecord:
    """What the policy remembers about one service."""
    deaths: deque = field(default_factory=deque)     # clock times of deaths inside the window
    streak: int = 0                                  # consecutive deaths without a stable run
    running_since: float | None = None
    restart_at: float | None = None
    backoff: bool = False
    reason: str = ""
    last_exit_code: int | None = None


class RestartPolicy:
    def __init__(self, base_delay_s: float = BASE_DELAY_S, max_delay_s: float = MAX_DELAY_S,
                 max_deaths: int = MAX_DEATHS, window_s: float = WINDOW_S,
                 stable_s: float = STABLE_S, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
                 starting_timeout_s: float = STARTING_TIMEOUT_S, clock=time.monotonic):
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.max_deaths = max_deaths
        self.window_s = window_s
        self.stable_s = stable_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.starting_timeout_s = starting_timeout_s
        self.clock = clock
        self._records: dict[str, ServiceRecord] = {}

    def record(self, service: str) -> ServiceRecord:
        rec = self._records.get(service)
        if rec is None:
            rec = self._records[service] = ServiceRecord()
        return rec

    # -- the subscriber ------------------------------------------------------------------
    def handle(self, event: dict) -> None:
        """Take one lifecycle event: `{"service": name, "event": kind, ...}`."""
        name, kind = event.get("service"), event.get("event")
        if not isinstance(name, str):
            return
        rec = self.record(name)
        now = self.clock()
        if kind == "spawned":
            rec.restart_at = None
            rec.running_since = None
        elif kind == "running":
            rec.running_since = now
        elif kind in ("draining", "stopped"):
            rec.running_since = None
        elif kind == "exited":
            self._on_death(name, rec, event.get("code"), now)

    def _on_death(self, name: str, rec: ServiceRecord, code, now: float) -> None:
        if rec.running_since is not None and now - rec.running_since >= self.stable_s:
            rec.streak = 0
        rec.running_since = None
        rec.streak += 1
        rec.last_exit_code = code
        rec.deaths.append(now)
        while rec.deaths and now - rec.deaths[0] > self.window_s:
            rec.deaths.popleft()
        if len(rec.deaths) >= self.max_deaths:
            rec.backoff = True
            rec.restart_at = None
            rec.reason = (f"{name} died {len(rec.deaths)} times within {self.window_s:g} s "
                          f"(last exit code {code}); left in BACKOFF, not restarted again")
            log.error("%s", rec.reason)
            return
        delay = self.delay_for(rec.streak)
        rec.restart_at = now + delay
        log.warning("%s exited with code %s; restarting in %g s", name, code, delay)

    # -- decisions -----------------------------------------------------------------------
    def delay_for(self, streak: int) -> float:
        """The wait before restarting after the `streak`-th consecutive death (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2 ** max(0, streak - 1))

    def due(self) -> list[str]:
        """Services whose restart time has come (each returned until it is `spawned`)."""
        now = self.clock()
        return [name for name, rec in self._records.items()
                if rec.restart_at is not None and rec.restart_at <= now and not rec.backoff]

    def restart_in(self, service: str) -> float | None:
        """Seconds until the pending restart of `service`, None when none is pending."""
        rec = self._records.get(service)
        if rec is None or rec.restart_at is None:
            return None
        return max(0.0, rec.restart_at - self.clock())

    def in_backoff(self, service: str) -> bool:
        rec = self._records.get(service)
        return rec is not None and rec.backoff

    def reason(self, service: str) -> str:
        rec = self._records.get(service)
        return rec.reason if rec is not None else ""

    def is_hung(self, state: int, silent_s: float) -> bool:
        """True when a service in `state` that has not heartbeaten for `silent_s` seconds (or
        not since it was started) must be killed; never a RECOVERING one."""
        if state == ServiceState.RUNNING:
            return silent_s > self.heartbeat_timeout_s
        if state == ServiceState.STARTING:
            return silent_s > self.starting_timeout_s
        return False

    def cancel(self, service: str) -> None:
        """Forget a pending restart (the store is stopping)."""
        rec = self._records.get(service)
        if rec is not None:
            rec.restart_at = None
