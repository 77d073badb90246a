"""CurveZMQ for the store's tcp sockets (docs/OPERATIONS.md "Security", docs/PROTOCOL.md
"Secure mode"): the key options a socket is given (`CurveKeys`, applied by
ipc.sockets.make_socket), and one process's ZAP handler (`ServerSecurity`).

A process that binds a client-facing tcp socket in secure mode (the supervisor's front door,
the appender, the reader, a master's ha port) starts one `ServerSecurity` on its context before
it binds: a pyzmq thread authenticator whose CURVE callback admits a public key only when the
key directory (ipc/keyring.py) knows it and it is not revoked. The directory is re-read when
`acl.json` changes, so a key revoked while the store runs is refused from its next connection
(and its requests on a connection already open are refused by the guard, ipc/access.py). A
refused handshake gets nothing back (ZeroMQ drops it) and is logged with the peer's address.
The ZAP handler sets the connection's User-Id to the client's Z85 public key, which the guard
reads from each request's frames.

Internal `ipc://` sockets carry no CURVE: they are files under `run/`, readable by the store's
user only.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import zmq

from ipc.keyring import KeyDirectory, read_pair, read_public

REFUSAL_LOG_S = 10.0


@dataclass(frozen=True)
class CurveKeys:
    """The CURVE options of one socket: a server's pair, or a client's pair and the server's
    public key (all Z85 bytes)."""
    public: bytes
    secret: bytes
    server_public: bytes | None = None

    @classmethod
    def server(cls, keys: KeyDirectory) -> "CurveKeys":
        public, secret = keys.server_pair()
        return cls(public, secret)

    @classmethod
    def client(cls, key_file: str, server_key_file: str) -> "CurveKeys":
        """From a client's `NAME.key_secret` and the store's `server.key`."""
        public, secret = read_pair(key_file)
        return cls(public, secret, read_public(server_key_file))

    @classmethod
    def internal(cls, keys: KeyDirectory) -> "CurveKeys":
        """The store's own pair used as a client of the store (scheduler, local CLI)."""
        public, secret = keys.server_pair()
        return cls(public, secret, public)

    def apply(self, sock: zmq.Socket) -> None:
        if self.server_public is None:
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        else:
            sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)


def client_keys(key_file: str | None = None, server_key_file: str | None = None, store: str | None = None):
    """CurveKeys for a client given `key_file=` (None: an insecure client), the server key
    from `server_key_file=` or else `<store>/config/keys/server.key`."""
    if not key_file:
        if server_key_file:
            raise ValueError("server_key_file= needs key_file= (the client's NAME.key_secret)")
        return None
    if not server_key_file:
        if not store:
            raise ValueError("key_file= needs server_key_file= (the store's server.key) or store=")
        server_key_file = KeyDirectory(store).server_public_path
    return CurveKeys.client(key_file, server_key_file)


class _KeyCallback:
    """pyzmq's credentials provider: `callback(domain, key)` -> admitted. A refused key is
    logged once per REFUSAL_LOG_S with the count since (a client retries every few ms)."""

    def __init__(self, keys: KeyDirectory, log: logging.Logger):
        self.keys = keys
        self.log = log
        self.address = ""
        self._refused: dict = {}                   # key -> [next log time, refusals not logged]

    def callback(self, domain, key: bytes) -> bool:
        z85 = key.decode("ascii")
        try:
            rights = self.keys.lookup(z85)
        except Exception as e:                     # an unreadable table admits nobody
            self.log.error("key directory unreadable, refusing %s: %s", z85, e)
            return False
        if rights is None:
            self._note_refusal(z85)
            return False
        return True

    def _note_refusal(self, z85: str) -> None:
        now = time.monotonic()
        entry = self._refused.setdefault(z85, [0.0, 0])
        entry[1] += 1
        if now >= entry[0]:
            self.log.warning("refused a client from %s: public key %s is unknown or revoked (%d "
                             "handshake(s) since the last line)", self.address or "?", z85, entry[1])
            entry[0], entry[1] = now + REFUSAL_LOG_S, 0
        if len(self._refused) > 10_000:
            self._refused.clear()


def _authenticator(ctx: zmq.Context, provider: _KeyCallback):
    """pyzmq's thread authenticator, noting each request's peer address for the refusal log
    (imported here: a client never loads it)."""
    from zmq.auth.thread import ThreadAuthenticator

    class Authenticator(ThreadAuthenticator):
        async def handle_zap_message(self, msg):
            if len(msg) > 3:
                provider.address = msg[3].decode("utf-8", "replace")
            return await super().handle_zap_message(msg)

    return Authenticator(ctx, log=logging.getLogger("mqstore.zap"))


class ServerSecurity:
    """One process's ZAP handler and its server keys. `start()` before binding."""

    def __init__(self, ctx: zmq.Context, store_root: str, log: logging.Logger):
        self.keys = KeyDirectory(store_root)
        self.curve = CurveKeys.server(self.keys)
        self._provider = _KeyCallback(self.keys, log)
        self._auth = _authenticator(ctx, self._provider)

    def start(self) -> "ServerSecurity":
        self._auth.start()
        self._auth.configure_curve_callback(domain="*", credentials_provider=self._provider)
        return self

    def stop(self) -> None:
        self._auth.stop()

