"""`mqstore stop [--store DIR | --address A] [--timeout S]`: stop a running store cleanly.

Sends `stop` to the supervisor's front door and waits until the supervisor process (its pid
from `run/supervisor.pid`, or from the `hello` reply when only `--address` is given) has
exited: it drains and stops every service, writes the final checkpoint and removes the abort
file when nothing is left behind. When the supervisor runs on another machine the pid means
nothing here, and the wait is for the front door to stop answering instead.

Exit status: 0 once stopped (the message says whether the stop was clean), 1 when no store is
running there or it did not stop within `--timeout` seconds, 2 when there is no store directory.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import psutil

from supervisor.option_checks import check_timeout
from supervisor.store_access import (
    NotRunning, add_store_arguments, call_front, locate, pid_alive, read_pid, require_store_dir, store_root,
)

DEFAULT_TIMEOUT_S = 120.0


def add_parser(subparsers):
    p = subparsers.add_parser("stop", help="stop a running store cleanly",
                              description=__doc__.split("\n\n")[0])
    add_store_arguments(p)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for the store to stop (default {DEFAULT_TIMEOUT_S:g})")
    return p


def _local_pid(hello: dict) -> int | None:
    """The supervisor's pid from its `hello` reply when it runs on this machine: the store
    directory it names exists here and its pid file names the same process."""
    store, pid = hello.get("store"), hello.get("pid")
    if isinstance(pid, int) and isinstance(store, str):
        try:
            with open(os.path.join(store, "run", "supervisor.pid")) as f:
                if int(f.read().strip()) == pid:
                    return pid
        except (OSError, ValueError):
            pass
    return None


def _wait_gone(address: str, pid: int | None, deadline: float, keys: dict | None = None) -> bool:
    while time.monotonic() < deadline:
        if pid is not None:
            if not pid_alive(pid):
                return True
        else:
            try:
                call_front(address, "hello", timeout=1.0, keys=keys)
            except NotRunning:
                return True
        time.sleep(0.1)
    return False


def _is_supervisor(pid: int) -> bool:
    """Whether `pid` runs `mqstore start` (a pid file may outlive its process and the pid be
    reused by another program, which must not be signalled)."""
    try:
        cmd = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return "start" in cmd and any(c.endswith("mqstore") or c == "supervisor.cli" for c in cmd)


def _stop_recovering(args, start: float) -> int | None:
    """A supervisor with a live pid file but no run/address is still recovering: SIGTERM ends
    its recovery (which runs again at the next start). None when there is no such process."""
    if args.address:
        return None
    root = store_root(args)
    pid = read_pid(os.path.join(root, "run", "supervisor.pid"))
    if pid is None or not pid_alive(pid) or not _is_supervisor(pid):
        return None
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone("", pid, start + args.timeout):
        print(f"mqstore stop: supervisor pid {pid} is still running after {args.timeout:g} s",
              file=sys.stderr)
        return 1
    print(f"mqstore stopped (supervisor pid {pid}, interrupted before it was ready)")
    return 0


def run(args) -> int:
    check_timeout(args.timeout)
    require_store_dir(args)
    start = time.monotonic()
    try:
        address, pid, root = locate(args)
    except NotRunning as e:
        code = _stop_recovering(args, start)
        if code is not None:
            return code
        print(f"mqstore stop: {e}", file=sys.stderr)
        return 1
    try:
        if pid is None or root is None:
            hello = call_front(address, "hello", keys=args.curve_keys)
            pid = pid if pid is not None else _local_pid(hello)
            root = root or (hello.get("store") if pid is not None else None)
        call_front(address, "stop", keys=args.curve_keys)
    except NotRunning as e:
        print(f"mqstore stop: {e}", file=sys.stderr)
        return 1
    who = f"supervisor pid {pid}" if pid is not None else address
    if not _wait_gone(address, pid, start + args.timeout, args.curve_keys):
        print(f"mqstore stop: {who} is still stopping after {args.timeout:g} s; it keeps "
              "draining (see logs/supervisor.log); run stop again to wait longer", file=sys.stderr)
        return 1
    took = time.monotonic() - start
    if pid is not None and root and os.path.exists(os.path.join(root, "abort")):
        print(f"mqstore stopped ({who}, {took:.1f} s), but not cleanly: the abort file stays "
              "and the next start runs the abnormal recovery (see logs/supervisor.log)")
    else:
        print(f"mqstore stopped ({who}, {took:.1f} s)")
    return 0
