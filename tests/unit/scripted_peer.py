"""A scripted peer for the client tests: a real ZeroMQ ROUTER in a thread that answers `hello`
with itself (or whatever endpoints a test sets) and every other op from a script, or holds
requests until the test releases them. No store is involved."""
from __future__ import annotations

import threading

import zmq

from ipc.protocol import pack, unpack
from ipc.sockets import make_socket


class Peer:
    """A ROUTER in a thread. `hello` names `self.appender`/`self.reader` (default: itself);
    other ops go to `script(env, frames)`, which returns reply fields (+ "_frames") or None
    to hold the request until `release()`."""

    def __init__(self, script=None, version=1):
        self.script = script or (lambda env, frames: {"status": "OK", "echo": env.get("x")})
        self.version = version
        self.held = []
        self.requests = 0
        self.max_held = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sock = make_socket(zmq.Context.instance(), zmq.ROUTER)
        self.endpoint = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.appender = self.reader = self.endpoint
        self._releases = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            with self._lock:
                releases, self._releases = self._releases, []
            for out in releases:
                self._send(out)
            if not self.sock.poll(5):
                continue
            peer, *frames = self.sock.recv_multipart()
            env = unpack(frames[0])
            self.requests += 1
            if env["op"] == "hello":
                fields = {"status": "OK", "version": self.version, "appender": self.appender,
                          "reader": self.reader, "store": "/nowhere"}
            else:
                fields = self.script(env, frames[1:])
            if fields is None:
                self.held.append((peer, env))
                self.max_held = max(self.max_held, len(self.held))
                continue
            self._send(self._reply(peer, env, fields))

    def _send(self, frames):
        try:
            self.sock.send_multipart(frames)
        except zmq.ZMQError:         # the client is gone (EHOSTUNREACH), as a store drops it
            pass

    @staticmethod
    def _reply(peer, env, fields):
        fields = dict(fields)
        extra = fields.pop("_frames", [])
        return [peer, pack({"rid": env["rid"], **fields}), *extra]

    def release(self, fields_of=lambda env: {"status": "OK", "echo": env.get("x")}, reverse=False):
        held, self.held = self.held, []
        if reverse:
            held.reverse()
        with self._lock:
            self._releases += [self._reply(p, e, fields_of(e)) for p, e in held]

    def close(self):
        self._stop.set()
        self.thread.join()
        self.sock.close(0)



def hold(env, frames):
    """A script that holds every request (until `Peer.release`)."""
    return None
