"""What the supervisor sets up around the service processes (docs/SERVICES.md): the `run/`
directory (config.json, endpoints.json, control), the control block seeded from the recovered
store (and seeded again after a recovery while running), the transient pool buffers, the
ports, starting and stopping one service process, and the checkpoint written at a stop.

The store host stamped on every record (and encoded in every offset message id) is, as in
RocketMQ, the store's own address and listening port (the broker's listenPort, 10911): unless
the configuration sets `store_host`, `prepare_run` derives it from the front door's endpoint,
the address clients are given (the port planned here, which with port 0 is the free port
picked for it), before any service starts.
"""
from __future__ import annotations

import ctypes
import ipaddress
import json
import logging
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import psutil

from core.log.checkpoint import StoreCheckpoint
from core.files.fileops import REAL_FILE_OPS
from ipc.control_block import (
    POOL_BUFFERS, ControlBlock, ServiceState, Slot, Word, now_ms, read_control_name,
)

log = logging.getLogger("mqstore.supervisor")

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE_ORDER = ("allocator", "flusher", "committer", "reput", "ha", "appender", "reader", "scheduler")
# The scheduler stops first: its re-puts in flight are answered while the appender runs. The ha
# process stops after the appender (a master sends its slaves the last puts) and before the
# flusher (on a slave it is the CommitLog's writer: the final flush covers what it wrote).
STOP_ORDER = ("scheduler", "appender", "ha", "committer", "flusher", "reput", "allocator", "reader")
# Seconds between SIGTERM and SIGKILL at a clean stop: the services that make data durable
# (flusher, reput) drain longest (RocketMQ joins its flush services for up to 5 minutes).
STOP_GRACE_S = {"appender": 30.0, "committer": 60.0, "flusher": 120.0, "reput": 120.0,
                "allocator": 15.0, "reader": 15.0, "ha": 30.0, "scheduler": 15.0}


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


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it hands out by itself (outgoing connections, bind to 0)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str, taken=()) -> int:
    """A port free on `host` now, for a service that binds it a moment later. It is picked
    below the ephemeral range: a port the kernel handed out (bind to 0) could be given again to
    any outgoing connection before the service binds it, and the service's bind would fail."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    lo = ephemeral_range()[0]
    rng = secrets.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, lo - 16384), lo) if lo > 2048 else 0
        if port in taken:
            continue
        with socket.socket(family) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SupervisorError(f"no free port found on {host}; choose one with --port", exit_code=2)


class SupervisorError(RuntimeError):
    """The store cannot start; the message says why and what to do. `exit_code` 2 marks a
    usage error (a port in use, the store locked), 1 anything else (supervisor.cli)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def raise_fd_limit(minimum: int = 4096) -> int:
    """Raise this process's soft RLIMIT_NOFILE to the hard limit, so that the services it
    starts inherit it (each mmap holds a file descriptor on Python 3.11; alibaba/rocketmq#506
    "Too many open files"); warn when it stays under `minimum`. Returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard or hard == resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < minimum:
        log.warning("the open-file limit is %d; every mapped segment holds a file descriptor: "
                    "raise it (ulimit -n) to at least %d", soft, minimum)
    return soft


def port_error(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on (the OS's words), or None when it can."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror or str(e)
    return None


def check_host(host: str) -> None:
    """SupervisorError (usage) unless `host` resolves and is an address of this machine."""
    try:
        socket.getaddrinfo(host.strip("[]"), None)
    except (socket.gaierror, UnicodeError) as e:
        raise SupervisorError(f"--host {host}: cannot resolve it ({getattr(e, 'strerror', e)})",
                              exit_code=2) from None
    reason = port_error(host.strip("[]"), 0)
    if reason:
        raise SupervisorError(f"--host {host}: cannot listen there ({reason}); give an address "
                              "of this machine, 0.0.0.0 or ::", exit_code=2)


def check_ports(host: str, port: int, ha_port: int | None = None) -> None:
    """SupervisorError naming the port and its role unless port, port+2 and port+3 are free,
    and the replication port: `ha_port` when one is configured (0: any), else port+1 (port
    0: free ports are picked later, nothing to check)."""
    wanted = [(ha_port, "replication (ha_listen_port)")] if ha_port else []
    if port:
        if port + 3 > 65535:
            raise SupervisorError(f"--port {port}: the store also needs port+1 to port+3, so the "
                                  "port must be at most 65532", exit_code=2)
        wanted += [(port, "front door"), (port + 2, "appender"), (port + 3, "reader")]
        if ha_port is None:
            wanted.append((port + 1, "replication (ha_listen_port: --port + 1)"))
    for p, role in wanted:
        reason = port_error(host, p)
        if reason:
            raise SupervisorError(
                f"cannot listen on {host}:{p} for the {role}: {reason}; another mqstore (or "
                "another program) is using it; choose another port with --port (the store "
                "uses --port, --port+2 and --port+3)", exit_code=2)


def plan_endpoints(host: str, port: int, ha_port: int | None = None) -> dict:
    """Front door at `port`, appender at port+2, reader at port+3; free ports when port is 0.
    The ha process (replication) listens at `ha_port` when it is configured (0: a free port),
    else at port+1 as RocketMQ's haListenPort (the broker's listenPort + 1), or a free port."""
    if port:
        ports = [port, port + 2, port + 3]
    else:
        ports = []
        for _ in range(3):
            ports.append(free_port(host, ports))
    if ha_port is None:
        ha_port = port + 1 if port else 0
    ports.append(ha_port or free_port(host, ports))
    h = f"[{host}]" if ":" in host else host
    return {name: f"tcp://{h}:{p}" for name, p in zip(("front", "appender", "reader", "ha"), ports)}


def listening_store_host(config, endpoints: dict, host: str) -> str:
    """`store_host` for a store whose front door listens at `endpoints["front"]`: that port,
    with `host` when it is an IP address other than a wildcard (0.0.0.0, ::), else the address
    of the configured `store_host` (a wildcard or a name is no address to stamp)."""
    port = int(endpoints["front"].rpartition(":")[2])
    address = config.store_host_tuple[0]
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
        if not ip.is_unspecified:
            address = str(ip)
    except ValueError:
        pass
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


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
    clear_replication_words(cb)


def clear_replication_words(cb: ControlBlock) -> None:
    """The ha process's words back to zero, with it stopped: at a seed and at a role change
    (a new master's acknowledged offsets start from nothing)."""
    for w in range(Word.HA_EPOCH, Word.POOL_BASE):
        cb.set(w, 0)


def reseed_control_block(cb: ControlBlock, config, store) -> None:
    """Seed the control block again from a store recovered while the supervisor runs (after a
    failed flush), with every service stopped: the flags the services own go back to their
    initial values and every pool buffer is free, then `seed_control_block`."""
    for w in (Word.FLUSH_FAILED, Word.DISK_FULL, Word.SPACE_FULL, Word.DRAINING):
        cb.set(w, 0)
    for i in range(2 * POOL_BUFFERS):
        cb.set(Word.POOL_BASE + i, 0)
    seed_control_block(cb, config, store)


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


def write_final_checkpoint(config, cb: ControlBlock) -> None:
    """The checkpoint at a stop, from the control block: the flusher that owned the file while
    services ran has exited, and each word is a position its writer made durable."""
    ckpt = StoreCheckpoint(config.checkpoint_path, REAL_FILE_OPS)
    try:
        ckpt.physic_msg_timestamp = cb.get(Word.PHYSIC_TS)
        ckpt.logics_msg_timestamp = cb.get(Word.LOGICS_TS)
        ckpt.index_msg_timestamp = cb.get(Word.INDEX_TS)
        ckpt.flushed_phy_offset = cb.get(Word.FLUSHED)
        ckpt.confirm_phy_offset = cb.get(Word.CONFIRM)
        ckpt.dispatched_phy_offset = cb.get(Word.DISPATCHED_DURABLE)
    finally:
        ckpt.shutdown()


_PR_SET_PDEATHSIG = 1
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):         # not Linux: leftovers are found by kill_leftovers
    _prctl = None


def _die_with_parent(parent_pid: int):
    """A preexec_fn: SIGKILL this child when the process that started it dies (Linux), so that
    services never outlive a killed supervisor and write beside the next one."""
    def setup() -> None:
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:         # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)
    return setup


def spawn_service(config, name: str) -> subprocess.Popen:
    """Start `python -m services.<name> --store ROOT`; its stdout/stderr go to logs/<name>.out.
    The service gets its own session (a Ctrl-C at the terminal goes to the supervisor only)
    and is killed by the kernel if the process that started it dies."""
    out = open(os.path.join(config.logs_dir, f"{name}.out"), "ab")
    try:
        # Run from the project's own directory: `-m services.X` must find our package, never a
        # `services/` (or a module shadowing the stdlib) in whatever directory the user is in.
        return subprocess.Popen([sys.executable, "-m", f"services.{name}", "--store",
                                 config.store_path_root_dir], cwd=PROJECT_ROOT,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
    finally:
        out.close()


def kill_leftovers(config, timeout: float = 10.0) -> list[int]:
    """SIGKILL service processes of this store left by a supervisor that died (found by their
    command line, `-m services.<name> --store ROOT`) and wait for them; return their pids.
    Called with the store lock held, before recovery, so nothing else writes the store."""
    root = config.store_path_root_dir
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if proc.pid == os.getpid() or "-m" not in cmd or "--store" not in cmd:
            continue
        module = cmd[cmd.index("-m") + 1] if cmd.index("-m") + 1 < len(cmd) else ""
        store = cmd[cmd.index("--store") + 1] if cmd.index("--store") + 1 < len(cmd) else ""
        if module.startswith("services.") and os.path.abspath(store) == root:
            found.append(proc)
    for proc in found:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(found, timeout=timeout)
    return [p.pid for p in found]


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


def write_run_config(config) -> None:
    """run/config.json again (a role change): every service started from now on reads it."""
    _write_json(os.path.join(config.run_dir, "config.json"), config.to_dict())
