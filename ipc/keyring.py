"""The store's key directory, `<store>/config/keys/`, and the permission record of each key
(docs/OPERATIONS.md, "Security"). Plain files, no sockets: the `mqstore keys` command writes
here, and every process that serves a tcp socket in secure mode reads it (ipc/curve.py).

- `server.key` / `server.key_secret`: the store's own CURVE pair, in pyzmq's certificate
  format (zmq.auth.create_certificates), made at the first secure start. `server.key` is what
  clients are given; the secret stays readable by the store's user only. The store's own
  services that connect to a tcp socket of the store (the scheduler's re-puts, the CLI on the
  store's machine) use this pair, with every right (`INTERNAL`).
- `acl.json`: one record per client key, by name: its public key (Z85), its role, the topics
  it may put to, the topics and groups it may read and commit, whether it administers,
  whether it may follow this store as a replica, and whether it is revoked. Rewritten whole
  (a temporary file renamed over it), so a reader sees the old or the new table.

The roles (RocketMQ 5's ACL in small): `admin` may do every client operation; `producer` may
put to its topics (all by default); `consumer` may read and commit its topics and groups (all
by default); `replica` may only follow this store (the HA port). Topic and group lists hold
names or shell patterns (`orders*`, `*`), matched case-sensitively.

Cryptography is libzmq's: this module only makes key files with pyzmq and reads them.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass

import zmq.auth

KEYS_DIR = ("config", "keys")
ACL_FILE = "acl.json"
SERVER = "server"
ROLES = ("admin", "producer", "consumer", "replica")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
RECHECK_S = 0.1            # how often `lookup` looks at acl.json again (a miss always looks)


class KeyringError(ValueError):
    """A bad name, role or key file; the message says which."""


@dataclass(frozen=True)
class KeyRights:
    """What one key may do."""
    name: str
    public_key: str                      # Z85, 40 characters
    role: str
    put: tuple = ()
    read: tuple = ()
    groups: tuple = ()
    admin: bool = False
    replica: bool = False
    revoked: bool = False
    created_ms: int = 0

    def may_put(self, topic: str) -> bool:
        return self.admin or _matches(self.put, topic)

    def may_read(self, topic: str) -> bool:
        return self.admin or _matches(self.read, topic)

    def may_use_group(self, group: str) -> bool:
        return self.admin or _matches(self.groups, group)

    def to_record(self) -> dict:
        rec = asdict(self)
        del rec["name"]
        for k in ("put", "read", "groups"):
            rec[k] = list(rec[k])
        return rec


INTERNAL = KeyRights(name="(store)", public_key="", role="admin", put=("*",), read=("*",),
                     groups=("*",), admin=True, replica=True)


def _matches(patterns, name: str) -> bool:
    return any(p == "*" or p == name or fnmatch.fnmatchcase(name, p) for p in patterns)


def rights_for_role(name: str, public_key: str, role: str, topics=None, groups=None) -> KeyRights:
    """The record a new key of `role` gets; `topics`/`groups` (lists) narrow it (default all)."""
    if role not in ROLES:
        raise KeyringError(f"role {role!r}: must be one of {', '.join(ROLES)}")
    topics = tuple(topics) if topics else ("*",)
    groups = tuple(groups) if groups else ("*",)
    now = int(time.time() * 1000)
    if role == "admin":
        return KeyRights(name, public_key, role, ("*",), ("*",), ("*",), admin=True, created_ms=now)
    if role == "producer":
        return KeyRights(name, public_key, role, put=topics, created_ms=now)
    if role == "consumer":
        return KeyRights(name, public_key, role, read=topics, groups=groups, created_ms=now)
    return KeyRights(name, public_key, role, replica=True, created_ms=now)


def check_name(name: str) -> None:
    if not _NAME.match(name or "") or name == SERVER:
        raise KeyringError(f"key name {name!r}: 1..64 of [A-Za-z0-9_.-], and not {SERVER!r}")


def read_public(path: str) -> bytes:
    """The public key (Z85 bytes) of a certificate file, public or secret."""
    try:
        public, _ = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise KeyringError(f"cannot read the key file {path}: {e}") from None
    return public


def read_pair(path: str) -> tuple[bytes, bytes]:
    """(public, secret) of a `NAME.key_secret` file; KeyringError when it holds no secret."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as e:
        raise KeyringError(f"cannot read the key file {path}: {e}") from None
    if not secret:
        raise KeyringError(f"{path} holds no secret key (give the NAME.key_secret file)")
    return public, secret


def make_pair(out_dir: str, name: str) -> tuple[str, str]:
    """Make `name.key` and `name.key_secret` in `out_dir` (the secret 0600); refuses to
    overwrite. Returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    public_path = os.path.join(out_dir, f"{name}.key")
    secret_path = public_path + "_secret"
    for p in (public_path, secret_path):
        if os.path.exists(p):
            raise KeyringError(f"{p} exists already: choose another name or --out directory")
    old = os.umask(0o077)
    try:
        public_path, secret_path = zmq.auth.create_certificates(out_dir, name)
    finally:
        os.umask(old)
    os.chmod(secret_path, 0o600)
    os.chmod(public_path, 0o644)
    return public_path, secret_path


class KeyDirectory:
    """`<store>/config/keys/`: the server pair and the table of client keys."""

    def __init__(self, store_root: str):
        self.path = os.path.join(store_root, *KEYS_DIR)
        self.acl_path = os.path.join(self.path, ACL_FILE)
        self.server_public_path = os.path.join(self.path, f"{SERVER}.key")
        self.server_secret_path = self.server_public_path + "_secret"
        self._stamp = None
        self._by_key: dict = {}
        self._server_public = b""
        self._checked = float("-inf")
        self._lock = threading.Lock()          # the ZAP thread and the request guard share it

    # -- the server pair --------------------------------------------------------------------
    def ensure_server_pair(self) -> bool:
        """Make the store's own pair unless it exists; True when it was made now."""
        if os.path.exists(self.server_secret_path):
            return False
        self._make_dir()
        make_pair(self.path, SERVER)
        return True

    def server_pair(self) -> tuple[bytes, bytes]:
        return read_pair(self.server_secret_path)

    # -- the table ----------------------------------------------------------------------------
    def _make_dir(self) -> None:
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        os.chmod(self.path, 0o700)

    def records(self) -> dict[str, KeyRights]:
        """Every registered key by name (revoked ones included)."""
        try:
            with open(self.acl_path) as f:
                table = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise KeyringError(f"cannot read {self.acl_path}: {e}") from None
        out = {}
        for name, rec in table.get("keys", {}).items():
            rec = dict(rec)
            for k in ("put", "read", "groups"):
                rec[k] = tuple(rec.get(k, ()))
            out[name] = KeyRights(name=name, **rec)
        return out

    def _write(self, records: dict) -> None:
        self._make_dir()
        tmp = self.acl_path + ".tmp"
        body = {"version": 1, "keys": {n: r.to_record() for n, r in sorted(records.items())}}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.acl_path)
        dfd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def register(self, rights: KeyRights) -> None:
        """Add a key; KeyringError when the name or the public key is registered already."""
        check_name(rights.name)
        records = self.records()
        if rights.name in records:
            raise KeyringError(f"a key named {rights.name!r} is registered already (revoke it or "
                            "choose another name)")
        if any(r.public_key == rights.public_key for r in records.values()):
            raise KeyringError("this public key is registered already")
        records[rights.name] = rights
        self._write(records)

    def revoke(self, name: str) -> KeyRights:
        records = self.records()
        if name not in records:
            raise KeyringError(f"no key named {name!r}")
        rec = records[name]
        records[name] = KeyRights(**{**asdict(rec), "revoked": True})
        self._write(records)
        return records[name]

    # -- lookups for the authenticator and the guard (cached, reloaded when the file changes) --
    def _refresh(self) -> None:
        try:
            st = os.stat(self.acl_path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        try:
            sst = os.stat(self.server_public_path)
            sstamp = (sst.st_ino, sst.st_mtime_ns)
        except FileNotFoundError:
            sstamp = None
        if (stamp, sstamp) == self._stamp:
            return
        by_key = {r.public_key: r for r in self.records().values()}
        self._server_public = read_public(self.server_public_path) if sstamp else b""
        self._by_key = by_key
        self._stamp = (stamp, sstamp)

    def lookup(self, public_key_z85: str) -> KeyRights | None:
        """The rights of an admitted key (INTERNAL for the store's own), None when the key is
        unknown or revoked. The table is looked at again every RECHECK_S (a revocation takes
        effect within that) and at every miss (a key registered a moment ago is found)."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= RECHECK_S:
                self._refresh()
                self._checked = now
            rec = self._find(public_key_z85)
            if rec is None and now != self._checked:
                self._refresh()
                self._checked = now
                rec = self._find(public_key_z85)
            return rec

    def _find(self, public_key_z85: str) -> KeyRights | None:
        if self._server_public and public_key_z85 == self._server_public.decode("ascii"):
            return INTERNAL
        rec = self._by_key.get(public_key_z85)
        return None if rec is None or rec.revoked else rec
