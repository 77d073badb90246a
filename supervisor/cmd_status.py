"""`mqstore status [--store DIR | --address A] [--json]`: what a running store is doing.

Asks the supervisor's front door for `status` and prints, for each service, its pid, state,
uptime, restarts, RSS and CPU; the CommitLog positions with their lags; the health flags; the
store's disk use; replication (role, epoch, the master followed or each slave's acknowledged
offset and lag); the delayed messages pending; any error (a service in BACKOFF, a failed
recovery); and, asked of the reader, the consumer groups with members: each member's queues and
their lag (`groups`). `--json` prints the reply's fields (with `groups`) as one JSON object
instead of the table.

The store is found by `--address` (the front door, `tcp://HOST:PORT`) or by `--store` (its
`run/address`, written by the supervisor once it is ready). Exit status: 0 when the store
answered, 1 when it is not running or does not answer, 2 when there is no store directory.

Also here, for every command that talks to a running store: `--store`/`--address` and `--key`,
finding the front door and the keys of a secure store (`locate`, `client_keys`), one request
to it (`call_front`), the checks of queue ids against
a topic's queues (`check_queue_ids`), and of timeouts and names before the store is asked
(`check_timeout`, `check_name`).
"""
from __future__ import annotations

import json
import math
import os
import sys

import psutil
import zmq

from core.config import ENV_PREFIX
from core.meta.topics import MAX_QUEUES, topic_name_problem
from ipc.admin import Admin
from ipc.connection import MQError
from ipc.connection import DEFAULT_STORE
from ipc.curve import CurveKeys
from ipc.curve import client_keys as curve_client_keys
from ipc.keyring import KeyDirectory, KeyringError
from ipc.protocol import pack, unpack
from ipc.sockets import make_socket
from supervisor.delayed_report import render_lines
from supervisor.cli import UsageError

TIMEOUT_S = 5.0


class NotRunning(Exception):
    """No supervisor answers for this store; the message says what was found."""


def add_store_arguments(parser, key_alias: bool = True) -> None:
    """`--store`/`--address`, and `--key-file` (also `--key`, unless `key_alias` is False: for
    `mqstore query`, whose `--key` is a message key) and `--server-key` of a secure store."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR",
                       help="store directory (its run/address names the front door; default: "
                            f"MQSTORE_STORE_PATH_ROOT_DIR when set, else {DEFAULT_STORE})")
    where.add_argument("--address", metavar="A", help="front door address, tcp://HOST:PORT")
    parser.add_argument("--key-file", *(["--key"] if key_alias else []), dest="key_file", metavar="FILE",
                        help="a secure store: this client's key (NAME.key_secret, from `mqstore keys "
                             "--new`); without it, a command on the store's machine given --store "
                             "uses the store's own key when it can read it")
    parser.add_argument("--server-key", metavar="FILE",
                        help="a secure store: its server.key (default: config/keys/server.key in "
                             "the store directory; needed with --address)")


def store_root(args) -> str:
    """The store directory of `--store`, else MQSTORE_STORE_PATH_ROOT_DIR, else ./store-data."""
    return os.path.abspath(os.path.expanduser(
        args.store or os.environ.get(ENV_PREFIX + "STORE_PATH_ROOT_DIR") or DEFAULT_STORE))


def require_store_dir(args) -> None:
    """UsageError when the store is named by directory (not `--address`) and there is none."""
    if not args.address and not os.path.isdir(store_root(args)):
        raise UsageError(f"no store directory at {store_root(args)}")


def check_queue_range(option: str, queue_ids) -> None:
    """UsageError unless every id is a queue id some topic can have (0..MAX_QUEUES-1)."""
    bad = [q for q in queue_ids if not 0 <= q < MAX_QUEUES]
    if bad:
        raise UsageError(f"{option} {','.join(map(str, bad))}: queue ids are 0..{MAX_QUEUES - 1}")


def check_timeout(seconds: float, option: str = "--timeout") -> None:
    """UsageError unless `seconds` is a finite number of seconds above 0."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{option} {seconds:g}: must be a number of seconds above 0")


def check_name(option: str, name: str, what: str = "topic") -> None:
    """UsageError unless `name` is a legal topic (or group) name, as the store checks it."""
    problem = topic_name_problem(name, what)
    if problem:
        raise UsageError(f"{option} {name!r}: {problem}")


def check_queue_ids(address: str, topic: str, option: str, queue_ids, timeout: float,
                    write: bool = False, keys: dict | None = None) -> None:
    """UsageError when `topic` exists and one of `queue_ids` is not one of its queues (with
    `write`, of the queues puts go to, which are fewer after its queue count was lowered). A
    topic that does not exist yet is not checked (the store decides its queues when it
    creates it)."""
    with Admin(address, timeout=timeout, **(keys or {})) as admin:
        info = admin.topic_info(topic)
    if info is None:
        return
    count = info.get("write_queues", info["queues"]) if write else info["queues"]
    bad = [q for q in queue_ids if q >= count]
    if bad:
        what = "queues that take puts" if write and count != info["queues"] else "queues"
        raise UsageError(f"{option} {','.join(map(str, bad))}: topic {topic} has {count} "
                         f"{what}: 0..{count - 1}")


def client_keys(args) -> dict:
    """`key_file`/`server_key_file` for the clients of a command (ipc.curve.client_keys): those
    of `--key`/`--server-key`; without `--key`, for a secure store found with --store, the
    store's own pair when this user can read it; {} for an insecure store."""
    key, server = getattr(args, "key_file", None), getattr(args, "server_key", None)
    root = None if getattr(args, "address", None) else store_root(args)
    keys = KeyDirectory(root) if root else None
    if not key:
        if server:
            raise UsageError("--server-key needs --key (this client's NAME.key_secret)")
        if keys is None or not _secure_store(root) or not os.access(keys.server_secret_path, os.R_OK):
            return {}
        key, server = keys.server_secret_path, keys.server_public_path
    elif not server:
        if keys is None:
            raise UsageError("--key with --address needs --server-key FILE (the store's server.key)")
        server = keys.server_public_path
    try:
        CurveKeys.client(key, server)
    except KeyringError as e:
        raise UsageError(str(e)) from None
    return {"key_file": key, "server_key_file": server}


def _secure_store(root: str) -> bool:
    """Whether the store running at `root` runs in secure mode (its run/config.json says so)."""
    try:
        with open(os.path.join(root, "run", "config.json")) as f:
            return json.load(f).get("security") == "curve"
    except (OSError, ValueError):
        return False


def locate(args) -> tuple[str, int | None, str | None]:
    """(front door address, supervisor pid or None, store root or None) for `args`; sets
    `args.curve_keys` (`client_keys`) for the clients the command opens."""
    args.curve_keys = client_keys(args)
    if args.address:
        return args.address, None, None
    root = store_root(args)
    run = os.path.join(root, "run")
    try:
        with open(os.path.join(run, "address")) as f:
            address = f.read().strip()
    except OSError:
        raise NotRunning(f"no store is running at {root} (no run/address)") from None
    pid = read_pid(os.path.join(run, "supervisor.pid"))
    if pid is not None and not pid_alive(pid):
        after = "the abort file stays; the next start runs the abnormal recovery" \
            if os.path.exists(os.path.join(root, "abort")) else \
            "no abort file: recovered since, the next start is a normal one"
        raise NotRunning(f"no store is running at {root}: supervisor pid {pid} has exited ({after})")
    return address, pid, root


def read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def call_front(address: str, op: str, timeout: float = TIMEOUT_S, keys: dict | None = None,
               fields: dict | None = None) -> dict:
    """One request to the front door; NotRunning when nobody answers within `timeout`. `keys`:
    `client_keys` of a secure store."""
    return check_front_reply(address, op, ask_front(address, op, fields or {}, timeout, keys))


def ask_front(address: str, op: str, fields: dict, timeout: float, keys: dict | None = None) -> dict:
    """The front door's reply to one request, whatever its status; NotRunning when nobody
    answers within `timeout` (a secure store also ignores a client it does not admit)."""
    ctx = zmq.Context.instance()
    sock = make_socket(ctx, zmq.DEALER, curve=curve_client_keys(**(keys or {})))
    try:
        sock.connect(address)
        sock.send(pack({"op": op, "rid": 1, **fields}))
        if not sock.poll(timeout * 1000):
            raise NotRunning(f"no answer from {address} within {timeout:g} s")
        return unpack(sock.recv_multipart()[0])
    finally:
        sock.close(0)


def check_front_reply(address: str, op: str, reply) -> dict:
    if isinstance(reply, dict) and reply.get("status") == "ERROR":
        raise NotRunning(f"{address} refused {op!r}: {reply.get('reason')}")
    if not isinstance(reply, dict) or reply.get("status") != "OK":
        raise NotRunning(f"{address} answered {op!r} with {reply!r}")
    return reply


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
