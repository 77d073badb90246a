"""Starts real service processes around a recovered store without the supervisor daemon, for
integration tests of single services: recovery in this process (it holds the store lock, as
the supervisor does), `run/` and the control block prepared, the named services spawned in
order without waiting (as the supervisor starts them) and then waited for until RUNNING, in
the same order. Leaving the `with` block stops them (SIGTERM, then SIGKILL) and closes the
control block."""
from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import subprocess
import time

import pytest
import zmq

from core import MessageStore
from core.files.store_files import StoreLock
from ipc.control_block import ServiceState
from ipc.protocol import pack, unpack
from ipc.sockets import make_socket
from supervisor.run_dir import prepare_run
from supervisor.spawn import STOP_ORDER, mark_started, spawn_service, stop_service, wait_state


class ServiceHarness:
    def __init__(self, config, services, start_timeout: float = 30.0):
        self.config = config
        self.names = list(services)
        self.start_timeout = start_timeout
        self.procs = {}
        self.lock = StoreLock(config.lock_path)
        self.run = None
        self.store = None

    def __enter__(self) -> "ServiceHarness":
        self.lock.acquire()
        self.store = MessageStore(self.config, lock=self.lock)
        self.store.load()
        self.run = prepare_run(self.config, self.store)
        self.store.shutdown()
        try:
            for name in self.names:
                self.spawn(name)
            for name in self.names:
                self.wait_running(name)
        except BaseException:
            self.__exit__(None, None, None)          # no service left behind
            raise
        return self

    def start(self, name: str):
        """Start one service (again) and wait until it is RUNNING."""
        self.spawn(name)
        return self.wait_running(name)

    def spawn(self, name: str):
        mark_started(self.run.cb, name)
        proc = spawn_service(self.config, name)
        self.procs[name] = proc
        return proc

    def wait_running(self, name: str):
        proc = self.procs[name]
        if not wait_state(self.run.cb, name, proc, [ServiceState.RUNNING], self.start_timeout):
            raise RuntimeError(f"{name} did not reach RUNNING (exit code {proc.poll()}); "
                               f"see {self.config.logs_dir}/{name}.log and {name}.out")
        return proc

    def stop(self, name: str, grace: float = 30.0) -> int:
        """runtime.stop_service (SIGTERM, `grace` seconds, then SIGKILL; the exit code), woken
        the moment the process ends."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                wait_exit(proc, grace)
            except subprocess.TimeoutExpired:
                pass                                # stop_service kills it
        return stop_service(proc, 0)

    def __exit__(self, *exc) -> None:
        for name in [n for n in STOP_ORDER if n in self.procs] + list(self.procs):
            if name in self.procs:
                self.stop(name)
        self.run.close()
        self.lock.release()

    @property
    def cb(self):
        return self.run.cb

    def endpoint(self, name: str) -> str:
        return self.run.endpoints[name]


class RawClient:
    """A bare DEALER speaking the envelope of docs/PROTOCOL.md, for tests."""

    def __init__(self, endpoint: str):
        self.sock = make_socket(zmq.Context.instance(), zmq.DEALER)
        self.sock.connect(endpoint)
        self.rid = 0

    def call(self, op: str, frames=(), timeout: float = 10.0, **fields):
        self.rid += 1
        self.sock.send_multipart([pack({"op": op, "rid": self.rid, **fields}), *frames])
        if not self.sock.poll(timeout * 1000):
            raise TimeoutError(f"no reply to {op} within {timeout}s")
        reply = self.sock.recv_multipart()
        return unpack(reply[0]), reply[1:]

    def close(self) -> None:
        self.sock.close(0)


def wait_exit(proc: subprocess.Popen, timeout: float | None = None) -> int:
    """`proc.wait(timeout)`, woken the moment the process ends (a Linux pidfd) instead of
    Popen.wait's sleeps of up to 50 ms between looks; subprocess.TimeoutExpired after `timeout`."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return proc.wait(timeout)
    try:
        poller = select.poll()                  # select() refuses descriptors past 1023
        poller.register(fd, select.POLLIN)
        if not poller.poll(None if timeout is None else timeout * 1000):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@contextlib.contextmanager
def small_tmpfs(parent, size: str):
    """A tmpfs of `size` (mount's size=, e.g. "8m") mounted under `parent`, unmounted after;
    the test is skipped where it cannot be mounted (not root, no mount permission)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = parent / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def fill_disk(mnt):
    """Write `mnt`/filler until its file system is full (ENOSPC); the filler's path, to
    unlink when the test gives the space back."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return filler
