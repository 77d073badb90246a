"""The supervisor daemon (docs/SERVICES.md): one `Supervisor` per running store.

Start: take the store lock for the supervisor's lifetime (and write run/supervisor.pid), check
that the ports are free, kill service processes a dead supervisor left behind, recover with
`core.MessageStore.load()` (normal, or abnormal when `abort` exists; progress goes to the
`progress` callable), prepare `run/` and the control block from the recovered store
(`supervisor.run_dir.prepare_run`; unless `store_host_configured`, the run's config, which
becomes `Supervisor.config`, stamps records with the store's own address and port), shut
that MessageStore down, bind the front door (ROUTER, tcp) and the events socket (PULL, ipc),
create the abort file, start the services (spawned together, waited for in order until each
is RUNNING), then write `run/address` and print `mqstore ready at tcp://HOST:PORT`. A service
that does not start stops the start: the others are stopped and the reason (with the tail of
its output) is reported.

Run: a loop that answers the front door, passes lifecycle events to the subscribers (the
restart policy, the metrics), reaps dead services and restarts them when the policy says so,
SIGKILLs a service the policy calls hung, samples RSS/CPU once a second, and deletes expired
CommitLog segments (`supervisor.retention`). A flusher exit code 3 (a failed flush, never
retried) stops every service, runs the abnormal recovery in a thread (the front door keeps
answering), seeds the control block again and starts the services again
(`supervisor.recovery_cycle`).

Stop (SIGTERM, Ctrl-C, the `stop` op): DRAINING = 1, WRITABLE = 0, SIGTERM each service in
STOP_ORDER and wait its grace period (then SIGKILL; a second Ctrl-C kills at once), write the
final checkpoint from the control block, remove the abort file only when FLUSHED == WROTE,
DISPATCHED_DURABLE == CONFIRM and FLUSH_FAILED == 0, remove run/address, close and unlink the
control block and the pool, release the lock.

Services never outlive the supervisor: each is started with PR_SET_PDEATHSIG (SIGKILL), so a
killed supervisor leaves the abort file and no process that could write beside the next one.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time

import zmq

from core.config import ConfigError
from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file_queue import StoreLoadError
from core.files.store_files import AbortFile, StoreLock, StoreLockedError
from ipc.control_block import ServiceState, Word
from ipc.protocol import unpack
from ipc.access import AccessGuard
from ipc.curve import ServerSecurity
from ipc.keyring import KeyDirectory
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from supervisor import status_report
from supervisor.delayed_report import DelayedReport
from supervisor.front_door import FrontDoor
from supervisor.processes import ServiceProcess
from supervisor.recovery_cycle import RecoveryCycle, recover_store
from supervisor.replication import Replication
from supervisor.restart_policy import RestartPolicy
from supervisor.retention import Retention
from supervisor.cli import SupervisorError
from supervisor.control_seed import write_final_checkpoint
from supervisor.ports import check_ports
from supervisor.run_dir import clear_run, prepare_run, write_address, write_pid_file
from supervisor.spawn import STOP_GRACE_S, STOP_ORDER, kill_leftovers, raise_fd_limit

log = logging.getLogger("mqstore.supervisor")

FLUSH_FAILED_EXIT = 3
SAMPLE_INTERVAL_S = 1.0


class Interrupted(Exception):
    """SIGINT/SIGTERM during the supervisor's own recovery."""


class Supervisor:
    def __init__(self, config, host: str = "127.0.0.1", port: int = 10911, metrics=None,
                 progress=None, out=None, policy: RestartPolicy | None = None,
                 store_host_configured: bool = False, ha_port: int | None = None):
        self.config = config
        self.host, self.port = host, port
        self.ha_port = ha_port                   # configured ha_listen_port; None: port + 1
        self.store_host_configured = store_host_configured
        self.metrics = metrics                   # supervisor.metrics.Metrics or None
        self.progress = progress                 # callable(done, total) [and finish()]: recovery
        self.out = out or sys.stdout
        self.policy = policy or RestartPolicy()
        self.delayed = DelayedReport()           # the scheduler's stats (status, metrics)
        self.replication = Replication(self)
        self.subscribers = ([self.policy, self.delayed, self.replication]
                            + ([metrics] if metrics is not None else []))
        self.lock = StoreLock(config.lock_path)
        self.abort = AbortFile(config.abort_path, REAL_FILE_OPS)
        self.run_ctx = None
        self.services: dict[str, ServiceProcess] = {}
        self.ctx = zmq.Context()
        self.front_sock = self.events_sock = self.front = None
        self.security: ServerSecurity | None = None
        self.poller = zmq.Poller()
        self.phase = "starting"
        self.stop_requested = self.force = self._interruptible = False
        self.errors: list[str] = []
        self.fatal: str | None = None
        self.recovery_mode = ""
        self.cycle: RecoveryCycle | None = None
        self.retention: Retention | None = None
        self.started = time.monotonic()

    # -- signals -------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_signal)     # the terminal closed: stop cleanly

    def _on_signal(self, signum, frame) -> None:
        if self.stop_requested:
            self.force = True
            log.warning("second stop signal: killing the services now (the abort file stays)")
        else:
            log.info("%s: stopping cleanly (send it again to kill the services at once)",
                     signal.Signals(signum).name)
        self.request_stop()
        if self._interruptible:
            raise Interrupted()

    def request_stop(self) -> None:
        self.stop_requested = True

    # -- the whole life ------------------------------------------------------------------
    def run(self) -> int:
        """Start, serve until asked to stop, stop. Returns the process exit code."""
        try:
            try:
                os.makedirs(self.config.store_path_root_dir, exist_ok=True)
                self.lock.acquire()
                write_pid_file(self.config)
            except StoreLockedError as e:
                raise SupervisorError(str(e), exit_code=2) from None
            except OSError as e:
                raise SupervisorError(f"cannot use the store directory "
                                      f"{self.config.store_path_root_dir}: {e}") from None
            try:
                self._check_ports()
                return self._run_locked()
            finally:
                self._close()
        except SupervisorError as e:
            log.error("%s", e)
            return e.exit_code

    def _run_locked(self) -> int:
        raise_fd_limit()
        leftovers = kill_leftovers(self.config)
        if leftovers:
            log.warning("killed service processes left by a supervisor that died: %s", leftovers)
        self.phase = "recovering"
        self._interruptible = True
        try:
            store = recover_store(self.config, self.lock, self.progress)
            if hasattr(self.progress, "finish"):
                self.progress.finish()
        except Interrupted:
            log.warning("interrupted during recovery; nothing was started (recovery runs again "
                        "at the next start)")
            return 130
        except ConfigError as e:            # e.g. format parameters the store was not made with
            raise SupervisorError(f"cannot open the store: {e}", exit_code=2) from None
        except StoreLoadError as e:
            raise SupervisorError(f"cannot open the store: {e}") from None
        finally:
            self._interruptible = False
        try:
            self.recovery_mode = "abnormal" if store.recovery_report.abnormal else "normal"
            self.run_ctx = prepare_run(self.config, store, self.host, self.port,
                                       own_store_host=not self.store_host_configured,
                                       ha_port=self.ha_port)
            self.config = self.run_ctx.config
            log.info("%s recovery done: the log spans [%d, %d)", self.recovery_mode,
                     max(store.get_min_phy_offset(), 0), store.get_max_phy_offset())
        finally:
            store.shutdown()
        self._bind()
        self.abort.create()
        self.services = {n: ServiceProcess(n, self.config, self.run_ctx.cb)
                         for n in self.run_ctx.services()}
        self.retention = Retention(self.config, self.run_ctx.cb)
        self.phase = "starting"
        if self.stop_requested:
            self._stop()
            return 0
        failed = self.start_services()
        if failed:
            self._stop()
            raise SupervisorError(self.services[failed].start_failure())
        if not self.stop_requested:
            self._announce_ready()
            self.phase = "running"
            self._loop()
        self._stop()
        return 1 if self.fatal else 0

    # -- start ---------------------------------------------------------------------------
    def _check_ports(self) -> None:
        """Fail before the recovery, not after it, when a port is taken; start the metrics."""
        check_ports(self.host, self.port, self.ha_port)
        if self.metrics is not None:
            try:
                self.metrics.start()
            except OSError as e:
                raise SupervisorError(f"cannot serve metrics on {self.metrics.host}:"
                                      f"{self.metrics.port}: {e.strerror or e}; choose another "
                                      "--metrics-port", exit_code=2) from None

    def _bind(self) -> None:
        eps = self.run_ctx.endpoints
        curve = self._secure() if self.config.security == "curve" else None
        self.front_sock = make_socket(self.ctx, zmq.ROUTER, curve=curve)
        try:
            self.front_sock.bind(eps["front"])
        except zmq.ZMQError as e:
            raise SupervisorError(f"cannot listen on {eps['front']}: {e}; choose another "
                                  "--port") from None
        self.events_sock = make_socket(self.ctx, zmq.PULL)
        bind_ipc(self.events_sock, ipc_endpoint(self.config.run_dir, "events"))
        self.front = FrontDoor(self, self.front_sock)
        if self.security is not None:
            self.front.handlers.guard = AccessGuard(self.security.keys, logging.getLogger("mqstore.supervisor.access"))
        self.poller.register(self.front_sock, zmq.POLLIN)
        self.poller.register(self.events_sock, zmq.POLLIN)

    def _secure(self):
        """Secure mode: the store's server pair (made at the first secure start), run/ for the
        store's user only, and this process's ZAP handler; the front door's server keys."""
        keys = KeyDirectory(self.config.store_path_root_dir)
        if keys.ensure_server_pair():
            log.info("made the store's server key pair: give clients %s", keys.server_public_path)
        os.chmod(self.config.run_dir, 0o700)
        self.security = ServerSecurity(self.ctx, self.config.store_path_root_dir, log).start()
        return self.security.curve

    def start_services(self, restart: bool = False, keep_going: bool = False) -> str | None:
        """Start every service and wait for each, in order, until it is RUNNING. Returns the
        name of the first that failed to start (None when all run, or when a stop was asked
        for). Without `keep_going` the first failure ends the start; with it the others go on
        and the restart loop takes care of the failed one.

        The processes are spawned together and only waited for in order: most of a start is
        the interpreter loading its modules, and a service does not need its peers to get to
        RUNNING (requests to a peer that is not bound yet wait in ZeroMQ's queue)."""
        for name, svc in self.services.items():
            pid = svc.spawn(restart=restart)
            self.publish({"service": name, "event": "spawned", "pid": pid})
            log.info("started %s (pid %d)", name, pid)
        failed = None
        for name, svc in self.services.items():
            if not self._wait_running(svc) and not self.stop_requested:
                failed = failed or name
                if not keep_going:
                    return failed
        return None if self.stop_requested else failed

    def _wait_running(self, svc: ServiceProcess) -> bool:
        while not self.stop_requested:
            if svc.state == ServiceState.RUNNING:
                return True
            if not svc.alive:
                return False
            if self._kill_if_hung(svc):
                return False
            self.step(20)
        return False

    def _announce_ready(self) -> None:
        address = self.run_ctx.endpoints["front"]
        write_address(self.config, address)
        print(f"mqstore ready at {address}", file=self.out, flush=True)

    # -- the loop ------------------------------------------------------------------------
    @property
    def endpoints(self) -> dict:
        return self.run_ctx.endpoints

    def publish(self, event: dict) -> None:
        for sub in self.subscribers:
            try:
                sub.handle(event)
            except Exception:
                log.exception("event subscriber %r failed on %r", sub, event)

    def step(self, timeout_ms: int) -> None:
        """Wait up to `timeout_ms` for a request or an event, and handle what came."""
        try:
            ready = dict(self.poller.poll(timeout_ms))
        except zmq.ZMQError as e:
            if e.errno != zmq.EINTR:
                raise
            return
        if self.front_sock in ready:
            self.front.serve()
        if self.events_sock in ready:
            self._take_events()

    def _take_events(self) -> None:
        while True:
            try:
                data = self.events_sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                event = unpack(data)
            except Exception:
                continue
            if isinstance(event, dict):
                self.publish(event)

    def _loop(self) -> None:
        next_sample = 0.0
        while not self.stop_requested:
            self.step(100)
            self._reap()
            self._kill_hung()
            self._restart_due()
            if self.cycle is not None:
                self.cycle.poll()
            self.replication.poll()
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + SAMPLE_INTERVAL_S
                for svc in self.services.values():
                    svc.sample()
                if self.metrics is not None:
                    self.metrics.update(self)
                if self.cycle is None:
                    self.retention.tick()

    def _reap(self) -> None:
        for name, svc in self.services.items():
            pid = svc.pid
            code = svc.reap()
            if code is None:
                continue
            if svc.stop_requested or self.phase == "stopping":
                svc.set_down_state(ServiceState.STOPPED)
                self.publish({"service": name, "event": "stopped", "pid": pid, "code": code})
                continue
            self.publish({"service": name, "event": "exited", "pid": pid, "code": code})
            if self.policy.in_backoff(name):
                svc.set_down_state(ServiceState.BACKOFF)
                self.errors.append(self.policy.reason(name))
            else:
                svc.set_down_state(ServiceState.FAILED)
            if name == "flusher" and code == FLUSH_FAILED_EXIT and not self.stop_requested \
                    and self.phase != "stopping":
                self.cycle = RecoveryCycle(self)
                self.cycle.begin()

    def _kill_hung(self) -> None:
        for svc in self.services.values():
            if svc.alive:
                self._kill_if_hung(svc)

    def _kill_if_hung(self, svc: ServiceProcess) -> bool:
        state, silent = svc.state, svc.silent_s()
        if not self.policy.is_hung(state, silent):
            return False
        log.error("%s (pid %d) is %s and silent for %.1f s: killing it", svc.name, svc.pid,
                  state.name, silent)
        svc.kill()
        svc.proc.wait()
        return True

    def _restart_due(self) -> None:
        for name in self.policy.due():
            if self.cycle is not None and self.cycle.owns(name):
                continue
            svc = self.services[name]
            if svc.alive:
                continue
            pid = svc.spawn(restart=True)
            self.publish({"service": name, "event": "spawned", "pid": pid})
            log.info("restarted %s (pid %d, restart %d)", name, pid, svc.restarts)

    # -- stop ----------------------------------------------------------------------------
    def stop_services(self, names) -> None:
        """SIGTERM each live service of `names` in turn and wait its grace period, answering
        the front door meanwhile; SIGKILL when the grace runs out or on a forced stop."""
        for name in names:
            svc = self.services.get(name)
            self.policy.cancel(name)
            if svc is None or not svc.alive:
                continue
            exited = svc.exit_fd()               # wakes the wait below the moment it exits
            if exited is not None:
                self.poller.register(exited, zmq.POLLIN)
            try:
                svc.terminate()
                deadline = time.monotonic() + STOP_GRACE_S.get(name, 30.0)
                while svc.alive and time.monotonic() < deadline and not self.force:
                    self.step(20)
            finally:
                if exited is not None:
                    self.poller.unregister(exited)
                    os.close(exited)
            if svc.alive:
                log.warning("%s did not stop in time: killing it", name)
                svc.kill()
                svc.proc.wait()
            log.info("%s stopped (exit code %s)", name, svc.proc.returncode if svc.proc else "?")
            self._reap()

    def _stop(self) -> None:
        self.phase = "stopping"
        cb = self.run_ctx.cb
        cb.set(Word.DRAINING, 1)
        cb.set(Word.WRITABLE, 0)
        order = [n for n in STOP_ORDER if n in self.services]
        self.stop_services(order + [n for n in self.services if n not in order])
        recovered = self.cycle is not None and self.cycle.abandon()
        if not recovered:
            write_final_checkpoint(self.config, cb)
        if not recovered and status_report.clean_stop_possible(cb):
            self.abort.remove()
            log.info("stopped cleanly")
        else:
            log.warning("stopped abnormally (wrote %d, flushed %d, confirm %d, dispatched "
                        "durable %d, flush failed %d): the abort file stays and the next start "
                        "runs the abnormal recovery", cb.get(Word.WROTE), cb.get(Word.FLUSHED),
                        cb.get(Word.CONFIRM), cb.get(Word.DISPATCHED_DURABLE),
                        cb.get(Word.FLUSH_FAILED))

    def _close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        for sock in (self.front_sock, self.events_sock):
            if sock is not None:
                sock.close(0)
        if self.security is not None:
            self.security.stop()
            self.security = None
        for svc in self.services.values():       # only after a bug: never leave orphans
            if svc.alive:
                svc.kill()
                svc.proc.wait()
        if self.run_ctx is not None:            # unlinks the control block it created
            self.run_ctx.close()
            self.run_ctx = None
        clear_run(self.config)
        self.lock.release()
        self.ctx.term()

