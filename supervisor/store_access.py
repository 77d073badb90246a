"""How a CLI command reaches a running store: `--store`/`--address` and `--key` (the
arguments every such command takes), finding the front door and the keys of a secure store
(`locate`, `client_keys`), one request to the front door (`call_front`, `ask_front`), the
supervisor's pid (`read_pid`, `pid_alive`), and the check of queue ids against a topic's
queues, which asks the store (`check_queue_ids`).

The store is found by `--address` (the front door, `tcp://HOST:PORT`) or by `--store` (its
`run/address`, written by the supervisor once it is ready).
"""
from __future__ import annotations

import json
import os

import psutil
import zmq

from core.config import ENV_PREFIX
from ipc.admin import Admin
from ipc.connection import DEFAULT_STORE
from ipc.curve import CurveKeys
from ipc.curve import client_keys as curve_client_keys
from ipc.keyring import KeyDirectory, KeyringError
from ipc.protocol import pack, unpack
from ipc.sockets import make_socket
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
