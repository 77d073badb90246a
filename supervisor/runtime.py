"""What the supervisor sets up around the service processes (docs/SERVICES.md): the `run/`
directory (config.json, endpoints.json, control), the control block seeded from the recovered
store, the transient pool buffers, and starting and stopping one service process.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory

from ipc.control_block import POOL_BUFFERS, ControlBlock, ServiceState, Slot, Word, now_ms

SERVICE_ORDER = ("allocator", "flusher", "committer", "reput", "appender", "reader")
STOP_ORDER = ("appender", "committer", "flusher", "reput", "allocator", "reader")


@dataclass
class RunContext:
    config: object
    cb: ControlBlock
    endpoints: dict
    pool: list = field(default_factory=list)

    def services(self) -> list[str]:
        return [s for s in SERVICE_ORDER if s != "committer" or self.config.use_transient_store_pool]

    def close(self) -> None:
        for shm in self.pool:
            shm.close()
            try:
                shm.unlink()
            except FileNotFoundError:
                pass
        self.pool = []
        self.cb.close()


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan_endpoints(host: str, port: int) -> dict:
    """Front door at `port`, appender at port+2, reader at port+3; free ports when port is 0."""
    if port:
        ports = (port, port + 2, port + 3)
    else:
        ports = tuple(free_port(host) for _ in range(3))
    h = f"[{host}]" if ":" in host else host
    return {name: f"tcp://{h}:{p}" for name, p in zip(("front", "appender", "reader"), ports)}


def prepare_run(config, store, host: str = "127.0.0.1", port: int = 0) -> RunContext:
    """Write run/ and create the control block from a loaded (recovered) `core.MessageStore`."""
    run = config.run_dir
    os.makedirs(run, exist_ok=True)
    os.makedirs(config.logs_dir, exist_ok=True)
    for name in os.listdir(run):
        if name.endswith(".sock") or name in ("address", "control", "endpoints.json"):
            os.unlink(os.path.join(run, name))
    endpoints = plan_endpoints(host, port)
    _write_json(os.path.join(run, "config.json"), config.to_dict())
    _write_json(os.path.join(run, "endpoints.json"), endpoints)
    cb = ControlBlock(f"mqstore-{os.getpid()}-{secrets.token_hex(4)}", create=True)
    seed_control_block(cb, config, store)
    pool = []
    if config.use_transient_store_pool:
        for i in range(min(config.transient_store_pool_size, POOL_BUFFERS)):
            pool.append(shared_memory.SharedMemory(f"{cb.name}-pool-{i}", create=True,
                                                   size=config.mapped_file_size_commitlog))
    with open(os.path.join(run, "control"), "w") as f:
        f.write(cb.name)
    with open(os.path.join(run, "supervisor.pid"), "w") as f:
        f.write(str(os.getpid()))
    return RunContext(config, cb, endpoints, pool)


def seed_control_block(cb: ControlBlock, config, store) -> None:
    end = store.get_max_phy_offset()
    for w in (Word.WROTE, Word.COMMITTED, Word.FLUSHED, Word.CONFIRM, Word.DISPATCHED,
              Word.DISPATCHED_DURABLE):
        cb.set(w, end)
    cb.set(Word.MIN_PHY, max(store.get_min_phy_offset(), 0))
    ckpt = store.checkpoint
    cb.set(Word.LAST_STORE_TS, ckpt.physic_msg_timestamp)
    cb.set(Word.PHYSIC_TS, ckpt.physic_msg_timestamp)
    cb.set(Word.LOGICS_TS, ckpt.logics_msg_timestamp)
    cb.set(Word.INDEX_TS, ckpt.index_msg_timestamp)
    cb.set(Word.SYNC_FLUSH, int(config.is_sync_flush))
    cb.set(Word.SLAVE, int(config.is_slave))
    cb.set(Word.POOL_ENABLED, int(config.use_transient_store_pool))
    cb.set(Word.WRITABLE, 1)


def spawn_service(config, name: str) -> subprocess.Popen:
    """Start `python -m services.<name> --store ROOT`; its stdout/stderr go to logs/<name>.out."""
    out = open(os.path.join(config.logs_dir, f"{name}.out"), "ab")
    try:
        return subprocess.Popen([sys.executable, "-m", f"services.{name}", "--store",
                                 config.store_path_root_dir],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        out.close()


def wait_state(cb: ControlBlock, name: str, proc: subprocess.Popen, states, timeout: float) -> bool:
    """Poll until the service reports one of `states`; False if it exits or time runs out."""
    wanted = {int(s) for s in states}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cb.slot_get(name, Slot.STATE) in wanted and cb.slot_get(name, Slot.PID) == proc.pid:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def stop_service(proc: subprocess.Popen, grace: float) -> int:
    """SIGTERM, wait `grace` seconds, then SIGKILL; return the exit code (negative: signal)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def mark_started(cb: ControlBlock, name: str) -> None:
    cb.slot_set(name, Slot.STARTED_MS, now_ms())


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)
