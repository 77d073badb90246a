"""Starting and stopping the service processes: the order they start and stop in, the
grace a stop gives each, `python -m services.<name>` started in its own session and killed by
the kernel when the supervisor dies (`spawn_service`), the leftovers of a supervisor that died
(`kill_leftovers`), waiting for a service's state in the control block (`wait_state`), and the
open-file limit the services inherit (`raise_fd_limit`).
"""
from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import sys
import time

import psutil

from ipc.control_block import ControlBlock, Slot, now_ms

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


def spawn_service(config, name: str) -> subprocess.Popen:
    """Start `python -m services.<name> --store ROOT`; its stdout/stderr go to logs/<name>.out.
    The service gets its own session (a Ctrl-C at the terminal goes to the supervisor only)
    and is killed by the kernel if the process that started it dies: it asks for that itself
    (`--parent-pid`, services.base.die_with_parent), since a `preexec_fn` here would make
    Python fork the supervisor's whole address space instead of vfork-ing (15-70 ms a spawn)."""
    out = open(os.path.join(config.logs_dir, f"{name}.out"), "ab")
    try:
        # Run from the project's own directory: `-m services.X` must find our package, never a
        # `services/` (or a module shadowing the stdlib) in whatever directory the user is in.
        return subprocess.Popen([sys.executable, "-m", f"services.{name}", "--store",
                                 config.store_path_root_dir, "--parent-pid", str(os.getpid())],
                                cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
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
