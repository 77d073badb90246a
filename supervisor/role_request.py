"""What `mqstore promote` and `mqstore follow` share: send the role change to the store's
front door (ops `promote` and `follow`, docs/PROTOCOL.md) and wait, polling `status`, until
the store runs in its new role with its appender and ha process RUNNING (a store that does
not answer for a while, truncating a diverged log, is asked again until the timeout)."""
from __future__ import annotations

import sys
import time

from supervisor.option_checks import check_timeout
from supervisor.store_access import NotRunning, ask_front, call_front, locate, require_store_dir

DEFAULT_TIMEOUT_S = 60.0


def add_common(parser) -> None:
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
                        help=f"seconds to wait for the change (default {DEFAULT_TIMEOUT_S:g})")


def _settled(status: dict, want_slave: bool) -> bool:
    repl = status.get("replication", {})
    if repl.get("pending") or status.get("supervisor", {}).get("phase") != "running":
        return False
    if (repl.get("role") == "SLAVE") != want_slave:
        return False
    states = {s["name"]: s["state"] for s in status.get("services", [])}
    return states.get("appender") == "RUNNING" and states.get("ha") == "RUNNING"


def request(args, op: str, fields: dict, want_slave: bool, done: str) -> int:
    check_timeout(args.timeout)
    require_store_dir(args)
    try:
        address, _pid, _root = locate(args)
        answer = ask_front(address, op, fields, min(args.timeout, 10.0), args.curve_keys)
        if not isinstance(answer, dict) or answer.get("status") != "OK":
            reason = answer.get("reason") if isinstance(answer, dict) else answer
            print(f"mqstore {op}: the store refused: {reason}", file=sys.stderr)
            return 1
        deadline = time.monotonic() + args.timeout
        while True:
            try:
                status = call_front(address, "status", max(0.5, min(5.0, deadline - time.monotonic())),
                                    args.curve_keys)
            except NotRunning:            # busy truncating a diverged log: ask again
                if time.monotonic() > deadline:
                    raise
                continue
            if _settled(status, want_slave):
                repl = status["replication"]
                print(f"{done}: role {repl['role']}, epoch {repl.get('epoch')}")
                return 0
            if time.monotonic() > deadline:
                print(f"mqstore {op}: the change did not finish within {args.timeout:g} s", file=sys.stderr)
                return 1
            time.sleep(0.1)
    except NotRunning as e:
        print(f"mqstore {op}: {e}", file=sys.stderr)
        return 1
