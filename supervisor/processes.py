"""`ServiceProcess`: the supervisor's handle on one service process (circus's Process): spawn
it, reap it, signal it, and describe it for `status` and the metrics (pid, state, uptime,
restarts, RSS, CPU, open file descriptors: every mmap holds one on Python 3.11). While a
service runs, `run/<service>.pid` holds its pid (DESIGN.md section 2), as
`run/supervisor.pid` holds the supervisor's.

The state a live process reports is the one in its control-block slot, once the slot carries
its pid; before that it is STARTING. A dead process has the state the supervisor gave it:
STOPPED after a requested stop, FAILED while its restart is pending, BACKOFF once the
restart policy gave up on it. Since no process writes the slot of a dead service, the
supervisor records those states (and the exit code) there too.
"""
from __future__ import annotations

import os
import signal
import subprocess

import psutil

from ipc.control_block import ControlBlock, ServiceState, Slot, now_ms
from supervisor.run_dir import remove_service_pid, write_service_pid
from supervisor.spawn import mark_started, spawn_service


class ServiceProcess:
    def __init__(self, name: str, config, cb: ControlBlock):
        self.name = name
        self.config = config
        self.cb = cb
        self.proc: subprocess.Popen | None = None
        self._ps: psutil.Process | None = None
        self.down_state = ServiceState.STOPPED
        self.exit_code: int | None = None
        self.stop_requested = False
        self.rss, self.cpu, self.fds = 0, 0.0, 0

    # -- lifecycle -----------------------------------------------------------------------
    def spawn(self, restart: bool = False) -> int:
        """Start the process; a restart counts in the slot's RESTARTS. Returns the pid."""
        if restart:
            self.cb.slot_set(self.name, Slot.RESTARTS, self.cb.slot_get(self.name, Slot.RESTARTS) + 1)
        self.cb.slot_set(self.name, Slot.STATE, int(ServiceState.STARTING))
        self.cb.slot_set(self.name, Slot.PROGRESS_DONE, 0)
        self.cb.slot_set(self.name, Slot.PROGRESS_TOTAL, 0)
        mark_started(self.cb, self.name)
        self.stop_requested = False
        self.exit_code = None
        self.proc = spawn_service(self.config, self.name)
        write_service_pid(self.config, self.name, self.proc.pid)
        try:
            self._ps = psutil.Process(self.proc.pid)
            self._ps.cpu_percent(None)               # the first call only sets the baseline
        except psutil.Error:
            self._ps = None
        return self.proc.pid

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def reap(self) -> int | None:
        """The exit code of a process that ended since the last call (negative: killed by that
        signal), else None. The process is forgotten once reaped."""
        if self.proc is None or self.proc.poll() is None:
            return None
        code = self.proc.returncode
        remove_service_pid(self.config, self.name, self.proc.pid)
        self.proc, self._ps, self.exit_code = None, None, code
        self.cb.slot_set(self.name, Slot.EXIT_CODE, code)
        return code

    def set_down_state(self, state: ServiceState) -> None:
        """The state of a process that is not running (STOPPED, FAILED, BACKOFF)."""
        self.down_state = state
        if not self.alive:
            self.cb.slot_set(self.name, Slot.STATE, int(state))

    def signal(self, signum: int) -> None:
        if self.alive:
            try:
                os.kill(self.proc.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.stop_requested = True
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def exit_fd(self) -> int | None:
        """A file descriptor that polls readable once the process has ended (a Linux pidfd),
        for the supervisor's poller; None where there is none. The caller closes it."""
        if not self.alive:
            return None
        try:
            return os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            return None

    # -- observation ---------------------------------------------------------------------
    @property
    def state(self) -> ServiceState:
        if not self.alive:
            return self.down_state
        if self.cb.slot_get(self.name, Slot.PID) != self.proc.pid:
            return ServiceState.STARTING
        try:
            return ServiceState(self.cb.slot_get(self.name, Slot.STATE))
        except ValueError:
            return ServiceState.STARTING

    def silent_s(self) -> float:
        """Seconds since the later of the last heartbeat and this process's start."""
        last = max(self.cb.slot_get(self.name, Slot.HEARTBEAT_MS),
                   self.cb.slot_get(self.name, Slot.STARTED_MS))
        return max(0.0, (now_ms() - last) / 1000.0)

    @property
    def restarts(self) -> int:
        return self.cb.slot_get(self.name, Slot.RESTARTS)

    def uptime_s(self) -> float:
        if not self.alive:
            return 0.0
        return max(0.0, (now_ms() - self.cb.slot_get(self.name, Slot.STARTED_MS)) / 1000.0)

    def sample(self) -> None:
        """Measure RSS and CPU (percent of one core since the previous sample); the supervisor
        calls this about once a second, `describe` and the metrics report the last sample."""
        self.rss, self.cpu, self.fds = 0, 0.0, 0
        if self._ps is None or not self.alive:
            return
        try:
            with self._ps.oneshot():
                self.rss, self.cpu = self._ps.memory_info().rss, self._ps.cpu_percent(None)
                self.fds = self._ps.num_fds()
        except psutil.Error:
            pass

    def output_tail(self, lines: int = 15) -> str:
        """The last lines the process wrote to logs/<name>.out (tracebacks land there)."""
        try:
            with open(os.path.join(self.config.logs_dir, f"{self.name}.out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8192))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def start_failure(self) -> str:
        """Why the service did not start, for the operator: exit code, log, last output."""
        code = self.exit_code if self.exit_code is not None else self.reap()
        tail = self.output_tail()
        return (f"{self.name} did not start (exit code {code}); see {self.config.logs_dir}/"
                f"{self.name}.log" + (f"; last output:\n{tail}" if tail else ""))

    def describe(self) -> dict:
        """The service's entry in the front door's `status` reply."""
        if self.alive and not self.rss:
            self.sample()                         # started since the last round of samples
        rss, cpu = (self.rss, self.cpu) if self.alive else (0, 0.0)
        info = {"name": self.name, "pid": self.pid, "state": self.state.name,
                "uptime_s": round(self.uptime_s(), 3), "restarts": self.restarts,
                "rss": rss, "cpu": round(cpu, 1), "fds": self.fds if self.alive else 0,
                "exit_code": self.exit_code}
        if self.state == ServiceState.RECOVERING:
            info["progress"] = [self.cb.slot_get(self.name, Slot.PROGRESS_DONE),
                                self.cb.slot_get(self.name, Slot.PROGRESS_TOTAL)]
        return info
