"""`mqstore status [--store DIR | --address A] [--json]`: what a running store is doing.

Asks the supervisor's front door for `status` and prints, for each service, its pid, state,
uptime, restarts, RSS and CPU; the CommitLog positions with their lags; the health flags; the
store's disk use; replication (role, epoch, the master followed or each slave's acknowledged
offset and lag); the delayed messages pending; any error (a service in BACKOFF, a failed
recovery); and, asked of the reader, the consumer groups with members: each member's queues and
their lag (`groups`). `--json` prints the reply's fields (with `groups`) as one JSON object
instead of the table.

The store is found as every command finds it (supervisor/store_access.py). Exit status: 0
when the store answered, 1 when it is not running or does not answer, 2 when there is no
store directory.
"""
from __future__ import annotations

import json
import sys

from ipc.admin import Admin
from ipc.connection import MQError
from supervisor.delayed_report import render_lines
from supervisor.option_checks import check_timeout
from supervisor.store_access import (
    TIMEOUT_S, NotRunning, add_store_arguments, call_front, locate, require_store_dir,
)


def add_parser(subparsers):
    p = subparsers.add_parser("status", help="show the services, positions and disk use of a "
                              "running store", description=__doc__.split("\n\n")[0])
    add_store_arguments(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for an answer (default {TIMEOUT_S:g})")
    return p


def run(args) -> int:
    check_timeout(args.timeout)
    require_store_dir(args)
    try:
        address, _pid, _root = locate(args)
        reply = call_front(address, "status", args.timeout, args.curve_keys)
    except NotRunning as e:
        print(f"mqstore status: {e}", file=sys.stderr)
        return 1
    reply.pop("rid", None)
    reply.pop("status", None)
    reply["groups"] = consumer_groups(address, args.timeout, args.curve_keys)
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))
    else:
        print(render(reply))
    return 0


def consumer_groups(address: str, timeout: float, keys: dict) -> list:
    """The consumer groups with members, each member with its queues and their lag, from the
    reader ([] when it does not answer: the rest of the status still prints)."""
    try:
        with Admin(address, timeout=timeout, **keys) as admin:
            out = []
            for g in admin.groups():
                lag = admin.consumer_lag(g["group"], g["topic"])
                per_queue = {q["queue_id"]: q["lag"] for q in lag.get("queues", ())}
                members = [{**m, "lag": sum(per_queue.get(q, 0) for q in m["queues"])}
                           for m in lag.get("members", ())]
                out.append({"group": g["group"], "topic": g["topic"], "generation": lag.get("generation"),
                            "members": members, "total_lag": lag.get("total_lag", 0)})
            return out
    except (ConnectionError, TimeoutError, OSError, MQError) as e:   # MQError: an older reader
        return [{"error": f"consumer groups not read: {e}"}]


# -- the human table --------------------------------------------------------------------
def human_bytes(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_duration(seconds) -> str:
    s = int(seconds or 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


POSITION_LAGS = (("wrote", None), ("committed", "commit"), ("flushed", "flush"),
                 ("confirm", "confirm"), ("dispatched", "dispatch"),
                 ("dispatched_durable", "dispatch_durable"), ("min", None))


def render(st: dict) -> str:
    sup = st.get("supervisor", {})
    lines = [f"store {sup.get('store', '?')}  at {sup.get('address', '?')}"
             + (f"  metrics {sup['metrics']}" if sup.get("metrics") else ""),
             f"supervisor pid {sup.get('pid', '?')}  {sup.get('phase', '?')}  up "
             f"{human_duration(sup.get('uptime_s'))}  recovery: {sup.get('recovery') or '?'}", ""]
    rows = [["SERVICE", "PID", "STATE", "UPTIME", "RESTARTS", "RSS", "CPU", "FDS"]]
    for s in st.get("services", []):
        state = s.get("state", "?")
        if s.get("restart_in_s") is not None:
            state += f" (restart in {s['restart_in_s']:.0f}s)"
        elif s.get("progress"):
            done, total = s["progress"]
            state += f" {100 * done // total if total else 0}%"
        rows.append([s.get("name", "?"), str(s.get("pid") or "-"), state,
                     human_duration(s.get("uptime_s")) if s.get("pid") else "-",
                     str(s.get("restarts", 0)), human_bytes(s.get("rss")) if s.get("pid") else "-",
                     f"{s.get('cpu', 0.0):.1f}%" if s.get("pid") else "-",
                     str(s.get("fds", "-")) if s.get("pid") else "-"])
    lines += _table(rows) + [""]
    pos, lags = st.get("positions", {}), st.get("lags", {})
    rows = [["POSITION", "OFFSET", "LAG"]]
    for name, lag in POSITION_LAGS:
        if name in pos:
            rows.append([name, str(pos[name]),
                         "" if lag is None else f"{lags.get(lag, 0)} B behind"])
    lines += _table(rows) + [""]
    lines.append("flags: " + (", ".join(st.get("flags", [])) or "none")
                 + (f"; puts {st['puts']}" if st.get("puts") else ""))
    disk = st.get("disk")
    if disk:
        lines.append(f"disk: store {human_bytes(disk['store_bytes'])} (commitlog "
                     f"{human_bytes(disk['commitlog_bytes'])}, consumequeue "
                     f"{human_bytes(disk['consumequeue_bytes'])}, index "
                     f"{human_bytes(disk['index_bytes'])}); file system "
                     f"{100 * disk['fs_used_ratio']:.1f}% used, {human_bytes(disk['fs_free'])} free")
    lines += render_lines(st.get("delayed") or {})
    lines += render_replication(st.get("replication"))
    for err in st.get("errors", []):
        lines.append(f"error: {err}")
    groups = st.get("groups") or []
    rows = [["GROUP", "TOPIC", "GENERATION", "MEMBER", "QUEUES", "LAG"]]
    for g in groups:
        if "error" in g:
            lines.append(g["error"])
            continue
        for m in g["members"]:
            rows.append([g["group"], g["topic"], str(g["generation"]), m["member_id"],
                         ",".join(map(str, m["queues"])) or "-", str(m["lag"])])
    if len(rows) > 1:
        lines += [""] + _table(rows)
    return "\n".join(lines)


def render_replication(repl) -> list[str]:
    """The replication lines: role and epoch, then the master followed (a slave) or each slave
    with its acknowledged offset and lag (a master)."""
    if not repl:
        return []
    head = f"replication: {repl.get('role', '?')}  epoch {repl.get('epoch', 0)}  listening {repl.get('listen', '?')}"
    if repl.get("role") == "SLAVE":
        state = repl.get("state") or ("following" if repl.get("connected") else "not connected")
        lines = [head, f"  master {repl.get('master') or '-'}: {state}, {repl.get('lag_bytes', 0)} B behind"
                 + (f" ({repl['reason']})" if repl.get("reason") else "")]
        if "configs_taken" in repl:
            lines.append(f"  metadata files taken from the master {repl['configs_taken']}, "
                         f"refused {repl.get('configs_refused', 0)}")
    else:
        lines = [head + ("  FENCED: a newer master exists, puts are refused" if repl.get("fenced") else "")]
        rows = [["SLAVE", "ADDRESS", "ACKED", "LAG", "LAG_S"]]
        for sl in repl.get("slaves", []):
            rows.append([str(sl.get("store_id")), str(sl.get("address")), str(sl.get("acked")),
                         f"{sl.get('lag_bytes', 0)} B", f"{sl.get('lag_s', 0):g}"])
        lines += ["  " + r for r in _table(rows)] if len(rows) > 1 else ["  no slave connected"]
    return lines
