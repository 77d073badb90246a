"""Secure stores for tests: a real `mqstore start --secure` (SupervisedStore), keys made with
`mqstore keys`, and a raw pyzmq client that speaks CURVE as docs/PROTOCOL.md ("Secure mode")
tells a client in another language to: the three key options on a DEALER, nothing else."""
from __future__ import annotations

import json
import os
import time

import msgpack
import zmq
import zmq.auth

from tests.integration.supervised import SupervisedStore, cli


class CurveClient:
    """A bare DEALER with CURVE keys (or none: `key_file=None`), one request at a time."""

    def __init__(self, endpoint: str, key_file: str | None, server_key: str | None):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if key_file is not None:
            public, secret = zmq.auth.load_certificate(key_file)
            server_public, _ = zmq.auth.load_certificate(server_key)
            self.sock.curve_publickey = public
            self.sock.curve_secretkey = secret
            self.sock.curve_serverkey = server_public
        self.sock.connect(endpoint)
        self.rid = 0

    def call(self, op: str, *frames, timeout: float = 10.0, **fields):
        """(reply map, frames), or None when nothing came within `timeout`."""
        self.send(op, *frames, **fields)
        if not self.sock.poll(timeout * 1000):
            return None
        return self.receive()

    def send(self, op: str, *frames, **fields) -> None:
        self.rid += 1
        self.sock.send_multipart([msgpack.packb({"op": op, "rid": self.rid, **fields}), *frames])

    def receive(self):
        head, *rest = self.sock.recv_multipart()
        return msgpack.unpackb(head), rest

    def close(self) -> None:
        self.sock.close(0)


class SecureStore:
    """A SupervisedStore started with --secure, and its keys (made in `<tmp>/keys`)."""

    def __init__(self, tmp_path, name: str = "secure", **config):
        self.store = SupervisedStore(tmp_path, name, **config)
        self.key_dir = str(tmp_path / f"{name}-keys")
        os.makedirs(self.store.root, exist_ok=True)

    @property
    def root(self) -> str:
        return self.store.root

    @property
    def server_key(self) -> str:
        return os.path.join(self.root, "config", "keys", "server.key")

    def new_key(self, name: str, role: str, *extra) -> str:
        """Make and register a key; the path of its NAME.key_secret."""
        done = cli("keys", "--store", self.root, "--new", name, "--role", role, "--out", self.key_dir, *extra)
        assert done.returncode == 0, done.stderr
        return os.path.join(self.key_dir, f"{name}.key_secret")

    def revoke(self, name: str) -> None:
        done = cli("keys", "--store", self.root, "--revoke", name)
        assert done.returncode == 0, done.stderr

    def start(self, *extra) -> "SecureStore":
        self.store.start("--secure", *extra)
        return self

    def endpoints(self) -> dict:
        with open(os.path.join(self.root, "run", "endpoints.json")) as f:
            return json.load(f)

    def client(self, service: str, key_file: str | None) -> CurveClient:
        return CurveClient(self.endpoints()[service], key_file, self.server_key)

    def call(self, service: str, key_file: str | None, op: str, *frames, timeout: float = 10.0, **fields):
        c = self.client(service, key_file)
        try:
            return c.call(op, *frames, timeout=timeout, **fields)
        finally:
            c.close()

    def answered(self, requests, timeout: float) -> list:
        """Send every request of `requests` ((service, key_file, op, frames, fields) each, on a
        client of its own) at once and wait `timeout` seconds for all of them together: each
        has had `timeout` seconds to be answered, as with `call(..., timeout=timeout)` one after
        the other. The requests that got a reply, with it."""
        clients = []
        try:
            for service, key_file, op, frames, fields in requests:
                clients.append(self.client(service, key_file))
                clients[-1].send(op, *frames, **fields)
            poller = zmq.Poller()
            for c in clients:
                poller.register(c.sock, zmq.POLLIN)
            waiting = dict(zip((c.sock for c in clients), zip(clients, requests)))
            got = []
            deadline = time.monotonic() + timeout
            while waiting and (left := deadline - time.monotonic()) > 0:
                for sock, _ in poller.poll(left * 1000):
                    client, request = waiting.pop(sock)
                    poller.unregister(sock)
                    got.append((request, client.receive()))
            return got
        finally:
            for c in clients:
                c.close()

    def ensure_stopped(self) -> None:
        self.store.ensure_stopped()
