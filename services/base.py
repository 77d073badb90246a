"""`ServiceLoop`: the one shape of every service process (STYLE.md, from RocketMQ's
ServiceThread): wait on the poller for a message or the interval, do one unit of work,
heartbeat; on SIGTERM finish the batch, drain and exit 0.

`run_service(cls)` is the `__main__` of each module in services/: it reads the store's
effective config from `run/config.json` (written by the supervisor), attaches to the control
block named in `run/control`, logs to `logs/<service>.log`, and runs the loop.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import signal
import sys
import time

import zmq

from core.config import StoreConfig
from ipc.access import AccessGuard
from ipc.control_block import ControlBlock, ServiceState, Slot, read_control_name
from ipc.curve import CurveKeys, ServerSecurity
from ipc.keyring import KeyDirectory
from ipc.protocol import pack
from ipc.sockets import ipc_endpoint, make_socket
from services.heap import keep_freed_heap

log = logging.getLogger("mqstore.service")


def load_run_config(store_root: str) -> StoreConfig:
    with open(os.path.join(store_root, "run", "config.json")) as f:
        return StoreConfig(**json.load(f))


class ServiceLoop:
    name = "service"
    interval_ms = 10

    def __init__(self, config: StoreConfig, cb: ControlBlock):
        self.config = config
        self.cb = cb
        self.run_dir = config.run_dir
        self.stopped = False
        self.ctx = zmq.Context.instance()
        self.poller = zmq.Poller()
        self.ready: dict = {}
        self._signal_r = self._signal_w = None       # the signal pipe, from run()
        self._next_stats = 0.0
        self._security = None                        # secure mode: this process's ZAP handler
        self.events = make_socket(self.ctx, zmq.PUSH)
        self.events.setsockopt(zmq.SNDTIMEO, 0)
        self.events.connect(ipc_endpoint(self.run_dir, "events"))

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C goes to the supervisor
        self._watch_signals()
        self.cb.slot_set(self.name, Slot.PID, os.getpid())
        self.set_state(ServiceState.STARTING)
        self.setup()
        self.set_state(ServiceState.RUNNING)
        while not self.stopped:
            self.wait_for_running(self.interval_ms)
            self.run_once()
            self.cb.heartbeat(self.name)
        self.set_state(ServiceState.DRAINING)
        self.drain()
        self.set_state(ServiceState.STOPPED)
        self.close()
        return 0

    def _watch_signals(self) -> None:
        """A signal also writes a byte to a pipe that the poller watches (signal.set_wakeup_fd),
        so a SIGTERM ends a wait at once instead of at the end of the poll interval."""
        self._signal_r, self._signal_w = os.pipe()
        for fd in (self._signal_r, self._signal_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._signal_w, warn_on_full_buffer=False)
        self.poller.register(self._signal_r, zmq.POLLIN)

    def wait_for_running(self, timeout_ms: float) -> None:
        """Poll the service's sockets (and the signal pipe); a message is the wakeup. Ready
        sockets go to self.ready."""
        if not self.poller.sockets:                 # nothing to wake on: just wait the interval
            time.sleep(timeout_ms / 1000)
            self.ready = {}
            return
        try:
            self.ready = dict(self.poller.poll(timeout_ms))
        except zmq.ZMQError as e:
            if e.errno != zmq.EINTR:
                raise
            self.ready = {}
        if self.ready.get(self._signal_r):
            try:
                os.read(self._signal_r, 64)          # the signal's handler has run already
            except BlockingIOError:
                pass

    def _on_sigterm(self, signum, frame) -> None:
        self.stopped = True

    # -- hooks ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Open files and bind sockets (register them with self.poller)."""

    def run_once(self) -> None:
        """One unit of work."""

    def drain(self) -> None:
        """Final commit/flush/dispatch before exit 0."""

    def close(self) -> None:
        self.events.close(0)
        if self._security is not None:
            self._security.stop()
        if self._signal_r is not None:
            signal.set_wakeup_fd(-1)
            os.close(self._signal_r)
            os.close(self._signal_w)

    # -- secure mode (ipc/curve.py) --------------------------------------------------------
    @property
    def secure(self) -> bool:
        return self.config.security == "curve"

    def server_keys(self, handlers=None) -> CurveKeys | None:
        """The CURVE server keys for a tcp socket this process binds (None when not secure),
        with this process's ZAP handler started before the first; `handlers` get the
        permission guard."""
        if not self.secure:
            return None
        if self._security is None:
            self._security = ServerSecurity(self.ctx, self.config.store_path_root_dir, log).start()
        if handlers is not None:
            handlers.guard = AccessGuard(self._security.keys, logging.getLogger(f"mqstore.{self.name}.access"))
        return self._security.curve

    def internal_client_keys(self) -> CurveKeys | None:
        """The store's own pair for a client socket to one of its tcp sockets (None when not
        secure)."""
        if not self.secure:
            return None
        return CurveKeys.internal(KeyDirectory(self.config.store_path_root_dir))

    # -- helpers for loops ---------------------------------------------------------------
    @staticmethod
    def take_wakeups(sock) -> bool:
        """Read every waiting wakeup message on `sock`; whether there was any."""
        woken = False
        while True:
            try:
                sock.recv(zmq.NOBLOCK)
                woken = True
            except zmq.Again:
                return woken

    def emit_latency_every_second(self, field: str, histogram, now: float) -> None:
        """Send `histogram`'s counts as a `stats` event at most once a second (metrics)."""
        if now >= self._next_stats:
            self._next_stats = now + 1.0
            if histogram.total:
                self.emit("stats", **{field: histogram.take()})

    # -- lifecycle events ----------------------------------------------------------------
    def set_state(self, state: ServiceState, **fields) -> None:
        self.cb.heartbeat(self.name, state)
        self.emit(state.name.lower(), **fields)

    def report_progress(self, done: int, total: int) -> None:
        self.cb.slot_set(self.name, Slot.PROGRESS_DONE, done)
        self.cb.slot_set(self.name, Slot.PROGRESS_TOTAL, total)
        self.cb.heartbeat(self.name)

    def emit(self, event: str, **fields) -> None:
        """Publish a lifecycle event to the supervisor (never blocks; dropped if nobody listens)."""
        try:
            self.events.send(pack({"service": self.name, "event": event, "pid": os.getpid(), **fields}),
                             zmq.NOBLOCK)
        except zmq.ZMQError:
            pass


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):         # not Linux: the supervisor's kill_leftovers finds them
    _prctl = None


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when the supervisor that started it dies (Linux),
    so that services never outlive a killed supervisor and write beside the next one; if it
    died already (before this ran), die now."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


def run_service(cls, argv=None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m services.{cls.name}",
                                     description=f"mqstore {cls.name} service (started by the supervisor)")
    parser.add_argument("--store", required=True, help="store root directory")
    parser.add_argument("--parent-pid", type=int, help="the supervisor's pid: die with it")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        die_with_parent(args.parent_pid)
    keep_freed_heap()
    config = load_run_config(os.path.abspath(args.store))
    os.makedirs(config.logs_dir, exist_ok=True)
    logging.basicConfig(filename=os.path.join(config.logs_dir, f"{cls.name}.log"), level=logging.INFO,
                        format=f"%(asctime)s {cls.name}[%(process)d] %(levelname)s %(name)s: %(message)s")
    cb = ControlBlock(read_control_name(config.run_dir))
    try:
        code = cls(config, cb).run()
    except Exception:
        logging.getLogger(cls.name).exception("%s crashed", cls.name)
        cb.slot_set(cls.name, Slot.STATE, int(ServiceState.FAILED))
        code = 1
    finally:
        cb.close()
    _exit_now(code)


def _exit_now(code: int) -> None:
    """End the service process with `code` without the interpreter's teardown, which does
    nothing a service needs (the control block is closed, the logs are flushed here, mapped
    writes are the kernel's) and cost 30-40 ms a process: a store's stop waited for it eight
    times in a row. ZeroMQ's teardown is kept: a socket closed with a linger (the slave's `bye`)
    still has its last messages in the I/O thread, and os._exit alone would drop them; sockets
    left open are closed at linger 0, and the wait is bounded by the longest linger asked."""
    zmq.Context.instance().destroy(linger=0)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
