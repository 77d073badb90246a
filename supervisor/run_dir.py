"""The `run/` directory the supervisor sets up around the service processes
(docs/SERVICES.md): config.json, endpoints.json, control (the name of the control block,
created and seeded here), the transient pool buffers, the supervisor's and the services' pid
files, address (the front door, once the store is ready); and clearing it, with the shared
memory a killed supervisor left.
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from multiprocessing import shared_memory

from ipc.control_block import POOL_BUFFERS, ControlBlock, read_control_name
from supervisor.control_seed import seed_control_block
from supervisor.ports import listening_store_host, plan_endpoints
from supervisor.spawn import SERVICE_ORDER


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


def prepare_run(config, store, host: str = "127.0.0.1", port: int = 0,
                own_store_host: bool = False, ha_port: int | None = None) -> RunContext:
    """Write run/ and create the control block from a loaded (recovered) `core.MessageStore`.
    With `own_store_host`, the run's config (run/config.json, RunContext.config) has the
    `store_host` of `listening_store_host`. Its `ha_listen_port` is the port planned for the
    ha process (`plan_endpoints`; `ha_port` None: derived from `port`)."""
    run = config.run_dir
    os.makedirs(run, exist_ok=True)
    os.makedirs(config.logs_dir, exist_ok=True)
    for name in os.listdir(run):
        if name.endswith((".sock", ".fifo")) or name in ("address", "control", "endpoints.json"):
            os.unlink(os.path.join(run, name))
    endpoints = plan_endpoints(host, port, ha_port)
    if own_store_host:
        config = config.replace(store_host=listening_store_host(config, endpoints, host))
    config = config.replace(ha_listen_port=int(endpoints["ha"].rpartition(":")[2]))
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


def write_pid_file(config) -> None:
    """run/supervisor.pid, written as soon as the lock is held, so that `mqstore stop` can
    reach a supervisor that is still recovering (prepare_run writes it again). The run/address
    and run/control of a supervisor that died go first: until this one is ready, commands must
    find its pid and no address, not the dead one's front door (which nobody answers)."""
    clear_run(config)
    os.makedirs(config.run_dir, exist_ok=True)
    with open(os.path.join(config.run_dir, "supervisor.pid"), "w") as f:
        f.write(str(os.getpid()))


def write_service_pid(config, name: str, pid: int) -> None:
    """run/<name>.pid: the pid of a service the supervisor just started."""
    _write_run_file(config, f"{name}.pid", f"{pid}\n")


def remove_service_pid(config, name: str, pid: int) -> None:
    """Remove run/<name>.pid once that process has ended (not a newer process's file)."""
    path = os.path.join(config.run_dir, f"{name}.pid")
    try:
        with open(path) as f:
            if f.read().strip() == str(pid):
                os.unlink(path)
    except (FileNotFoundError, ValueError):
        pass


def write_address(config, address: str) -> None:
    """run/address: the front door, for clients and commands (written once the store is ready)."""
    _write_run_file(config, "address", address + "\n")


def _write_run_file(config, name: str, text: str) -> None:
    """run/<name>, replaced whole (a reader never sees half of it)."""
    path = os.path.join(config.run_dir, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def clear_run(config) -> None:
    """Empty run/ (with the store lock held and no service running): the files that say a store
    runs here (address, control, supervisor.pid, the services' pid files) and what the
    services used (config.json, endpoints.json, the ipc sockets). The control block and pool
    buffers that run/control names go too: a supervisor killed by SIGKILL never unlinked them,
    and each would keep its memory in /dev/shm until the machine restarts."""
    try:
        names = os.listdir(config.run_dir)
    except FileNotFoundError:
        return
    discard_control_block(config.run_dir)
    for name in names:
        try:
            os.unlink(os.path.join(config.run_dir, name))
        except (FileNotFoundError, IsADirectoryError):
            pass


def discard_control_block(run_dir: str) -> None:
    """Unlink the shared memory named by run/control and its pool buffers, where they still
    exist (the mappings of any process still attached stay valid until it unmaps them)."""
    try:
        name = read_control_name(run_dir)
    except OSError:
        return
    if not name.startswith("mqstore-"):
        return
    for segment in [name] + [f"{name}-pool-{i}" for i in range(POOL_BUFFERS)]:
        try:
            shm = shared_memory.SharedMemory(name=segment, create=False)
        except (FileNotFoundError, ValueError):
            continue
        shm.close()
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


def _write_json(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def write_run_config(config) -> None:
    """run/config.json again (a role change): every service started from now on reads it."""
    _write_json(os.path.join(config.run_dir, "config.json"), config.to_dict())
