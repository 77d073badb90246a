"""A real supervisor for tests: `python -m supervisor.cli start --store DIR --port 0 --config
FILE` as a subprocess, its address read from the `mqstore ready at tcp://...` line, and
helpers to ask its front door, to poll its status with a deadline, and to stop or kill it.

Every store here uses tiny segments (the same sizes as tests/conftest.py) through a TOML
file, so that segments roll and blank records appear within a few hundred messages, and
flushes whatever is dirty every 100 ms, so that tests waiting for FLUSHED wait little.
"""
from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from ipc.control_block import read_control_name
from supervisor.ports import free_port
from tests.integration.harness import RawClient, wait_exit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_TOML = {
    "mapped_file_size_commitlog": 4096 * 4,
    "mapped_file_size_consume_queue": 20 * 50,
    "max_hash_slot_num": 64,
    "max_index_num": 512,
    "flush_interval_commitlog": 10,
    "flush_commitlog_thorough_interval": 100,
    "commit_interval_commitlog": 10,
    "flush_interval_consume_queue": 10,
    "flush_consume_queue_thorough_interval": 50,
}
READY = "mqstore ready at "


def free_port_block() -> int:
    """A port P with P, P+2 and P+3 free (the front door, appender and reader), for a store
    that must come back on the same ports; picked as `--port 0` picks (below the ephemeral range)."""
    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
        return True
    for _ in range(100):
        port = free_port("127.0.0.1")
        if port + 3 <= 65535 and free(port + 2) and free(port + 3):
            return port
    raise AssertionError("no block of free ports")


def write_toml(path: str, values: dict) -> str:
    def text(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v) if isinstance(v, int) else f'"{v}"'
    with open(path, "w") as f:
        f.writelines(f"{k} = {text(v)}\n" for k, v in values.items())
    return path


def cli(*args, timeout: float = 60.0, env=None) -> subprocess.CompletedProcess:
    """Run `python -m supervisor.cli ARGS` to completion."""
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


class SupervisedStore:
    def __init__(self, tmp_path, name: str = "store", env: dict | None = None,
                 root: str | None = None, **config):
        self.root = root or str(tmp_path / name)
        self.toml = write_toml(str(tmp_path / f"{name}.toml"), {**TINY_TOML, **config})
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.terminated: subprocess.Popen | None = None      # the process sent SIGTERM by terminate()
        self.address: str | None = None
        self.lines: queue.Queue = queue.Queue()
        self.stdout: list[str] = []
        self.err_path = str(tmp_path / f"{name}.stderr")

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, *extra, timeout: float = 60.0, wait_ready: bool = True) -> "SupervisedStore":
        err = open(self.err_path, "a")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "start", "--store", self.root,
                 "--port", "0", "--config", self.toml, *extra],
                cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=err, text=True)
        finally:
            err.close()
        self.lines = queue.Queue()
        threading.Thread(target=self._read_stdout, args=(self.proc, self.lines), daemon=True).start()
        if wait_ready:
            self.address = self.wait_ready(timeout)
        return self

    @staticmethod
    def _read_stdout(proc, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def wait_ready(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no ready line within {timeout}s; stderr:\n{self.stderr()}")
            if line is None:
                raise AssertionError(f"supervisor exited with {self.proc.wait(10)} before ready; "
                                     f"stderr:\n{self.stderr()}")
            self.stdout.append(line)
            if line.startswith(READY):
                return line[len(READY):].strip()

    def stderr(self) -> str:
        try:
            with open(self.err_path) as f:
                return f.read()
        except OSError:
            return ""

    def wait_exit(self, timeout: float = 60.0) -> int:
        return wait_exit(self.proc, timeout)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        wait_exit(self.proc, 10)

    def kill_tree(self) -> None:
        """SIGKILL the supervisor and every process under it at once (the services and Python's
        resource tracker: what a `kill -9` of the process group does), and wait until all are
        gone. Its control block stays in /dev/shm until the next start removes it."""
        tree = [self.proc.pid] + [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_exit(self.proc, 10)
        deadline = time.monotonic() + 10
        while not all(pid_gone(p) for p in tree):
            assert time.monotonic() < deadline, "processes outlived SIGKILL"
            time.sleep(0.02)

    def stop(self, timeout: float = 60.0) -> int:
        """The `stop` op, then wait for the supervisor to exit; its exit code."""
        reply, _ = self.call("stop")
        assert reply["status"] == "OK", reply
        return self.wait_exit(timeout)

    def terminate(self) -> None:
        """SIGTERM (a clean stop) without waiting for it; `ensure_stopped` waits. A second
        SIGTERM would kill the services at once, so it is sent once."""
        if self.proc is not None and self.proc.poll() is None and self.terminated is not self.proc:
            self.proc.send_signal(signal.SIGTERM)
            self.terminated = self.proc

    def ensure_stopped(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.terminate()
            try:
                wait_exit(self.proc, 60)
            except subprocess.TimeoutExpired:
                self.kill()

    # -- talking to it -------------------------------------------------------------------
    def call(self, op: str, frames=(), timeout: float = 10.0, endpoint: str | None = None, **fields):
        client = RawClient(endpoint or self.address)
        try:
            return client.call(op, frames, timeout=timeout, **fields)
        finally:
            client.close()

    def status(self) -> dict:
        reply, _ = self.call("status")
        assert reply["status"] == "OK", reply
        return reply

    def service(self, name: str) -> dict:
        return next(s for s in self.status()["services"] if s["name"] == name)

    def wait_service(self, name: str, state: str, timeout: float = 30.0, **fields) -> dict:
        """Poll `status` until service `name` is in `state` with `fields`; its entry."""
        deadline = time.monotonic() + timeout
        entry = None
        while time.monotonic() < deadline:
            entry = self.service(name)
            if entry["state"] == state and all(entry.get(k) == v for k, v in fields.items()):
                return entry
            time.sleep(0.05)
        raise AssertionError(f"{name} not {state} {fields} within {timeout}s: {entry}")

    def put(self, topic: str, body: bytes, **fields) -> dict:
        hello, _ = self.call("hello")
        reply, _ = self.call("put", [body], endpoint=hello["appender"], topic=topic, **fields)
        return reply

    # -- what it leaves on disk ----------------------------------------------------------
    def path(self, *names: str) -> str:
        return os.path.join(self.root, *names)

    def control_name(self) -> str:
        return read_control_name(self.path("run"))


def stop_all(stores) -> None:
    """Stop every store of `stores` cleanly, all at once (SIGTERM to each, then wait for each)."""
    for s in stores:
        s.terminate()
    for s in stores:
        s.ensure_stopped()


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(name="store")
def supervised_stores(tmp_path):
    """`store(name="store", **config)`: a SupervisedStore under tmp_path (not started); every
    one made is stopped at teardown. Import it into a test module to use it as `store`."""
    stores = []

    def make(name: str = "store", **config) -> SupervisedStore:
        s = SupervisedStore(tmp_path, name, **config)
        stores.append(s)
        return s
    yield make
    stop_all(stores)
