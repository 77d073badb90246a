"""The sockets of one client `Connection` (ipc/connection.py): a DEALER per service (the front
door, the appender, the reader), each with the LinkWatch that tells whether its connection is
up, and the poll set of their descriptors plus a wake-up pipe, which the connection's leader
sleeps on. Replacing a socket (a service moved, or its connection broke) makes a fresh one and
a fresh poll set. Everything here is used under the connection's socket lock, except `poke`
and `drain_wake`, which any thread may call.
"""
from __future__ import annotations

import os
import select

import zmq

from ipc.link_watch import LinkWatch
from ipc.sockets import make_socket


class ClientSockets:
    """`socks`, `fds` (ZMQ_FD), `links` and `endpoints` by socket name; `link_fds` maps a
    monitor's descriptor to its socket's name; `fdpoll` polls all of them and `wake_r`."""

    def __init__(self, ctx: zmq.Context, curve=None):
        self._ctx = ctx
        self._curve = curve                      # secure mode: the client's CurveKeys
        self.socks: dict = {}
        self.fds: dict = {}
        self.links: dict = {}
        self.link_fds: dict = {}
        self.endpoints: dict = {}
        self.fdpoll = None
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)

    def replace(self, name: str, endpoint: str) -> bool:
        """Connect a fresh socket `name` to `endpoint`, closing the one it replaces; True when
        there was one."""
        sock = make_socket(self._ctx, zmq.DEALER, curve=self._curve)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        link = LinkWatch(sock)                   # before connect: the first handshake is seen
        sock.connect(endpoint)
        old = self.socks.get(name)
        if old is not None:
            self.links.pop(name).close()
            old.close(0)
        self.socks[name] = sock
        self.links[name] = link
        self.fds[name] = sock.getsockopt(zmq.FD)
        self.link_fds.clear()
        self.link_fds.update((w.fd, n) for n, w in self.links.items())
        self.endpoints[name] = endpoint
        fdpoll = select.poll()
        fdpoll.register(self.wake_r, select.POLLIN)
        for fd in list(self.fds.values()) + list(self.link_fds):
            fdpoll.register(fd, select.POLLIN)
        self.fdpoll = fdpoll
        return old is not None

    def poke(self) -> None:
        """Wake the thread sleeping on `fdpoll`."""
        try:
            os.write(self.wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        """Close every socket and its monitor (the wake-up pipe stays: see `close_pipe`)."""
        for link in self.links.values():
            link.close()
        self.links.clear()
        for sock in self.socks.values():
            sock.close(0)
        self.socks.clear()

    def close_pipe(self) -> None:
        for fd in (self.wake_r, self.wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
