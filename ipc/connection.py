"""The client side of docs/PROTOCOL.md: one `Connection` per client object.

A connection says `hello` to the front door, then keeps one DEALER socket to each of the
front door, the appender and the reader (high-water marks raised, as DESIGN.md section 4
requires). Every request gets a fresh `rid` and a `ReplyFuture`; replies are matched by `rid`
and may come back in any order. At most `window` requests are in flight at once: a caller
that would exceed it waits for replies first, which keeps ROUTER queues on the server far
below their high-water mark. A request not answered within its timeout fails with
`TimeoutError`; the next request then says `hello` again (re-reading `<store>/run/address`
when the connection was made from a store directory) and reopens every socket whose endpoint
changed. A service restarted on the same endpoint needs nothing: ZeroMQ reconnects by itself.

Broken connections. Each socket's monitor (ipc/link_watch.py) tells when its connection is up.
A request goes out only on a completed connection: while the service is unreachable it waits
for it, trying every UNREACHABLE_RETRY_S, up to its timeout (then PeerUnreachable, nothing
sent). When a connection breaks (the service killed or stopped), the replies that came before
it are read, the requests still in flight on it fail at once with ConnectionLost (a put may or
may not have been stored) instead of waiting for their timeout, and the socket is replaced by a
fresh one to the same endpoint, so that a request queued in the old one after the break is
never delivered after it failed. (ZMQ_IMMEDIATE, used before, dropped the unread replies with
the broken connection: puts that were stored and answered timed out.)

Threading. Sockets are used only under `_sock_lock`, never while blocking. A thread that
needs a reply becomes the *leader*: it polls the sockets' ZMQ_FD descriptors (no lock held),
then drains every socket without blocking and completes the futures. Other waiting threads
sleep on a condition that each completion wakes. A sender drains its socket right after the
send while another thread leads, so that leader does not sleep past a reply. A daemon thread
(ipc/client_background) leads while no user thread does I/O, so futures also complete when
nobody asks for them. ZMQ_FD is edge-triggered: a thread therefore always drains (EVENTS +
non-blocking recv) before it sleeps on the descriptor.

Frames are sent copied: pyzmq's zero-copy send hands each frame to a Python garbage-collector
thread, which measured costlier in process CPU than copying 100 KiB. Reply frames after
frame 0 are received zero-copy and passed on as memoryviews.
"""
from __future__ import annotations

import logging
import threading
import time

import zmq

from ipc.client_background import QUIET_S, BackgroundLeader
from ipc.client_common import (  # noqa: F401  (re-exported: the client's names live here too)
    DEFAULT_STORE, ConnectionClosed, ConnectionLost, MQError, PeerUnreachable, ReplyFuture,
    normalize_address, raise_for_error, reachable_endpoint, resolve_address,
)
from ipc.client_sockets import ClientSockets
from ipc.curve import client_keys
from ipc.requests import Requests, complete, replies, service_endpoints

log = logging.getLogger("mqstore.client")

DEFAULT_TIMEOUT = 10.0          # seconds; above the server's default sync_flush_timeout (5 s)
DEFAULT_WINDOW = 1024           # requests in flight per connection
IDLE_POLL_S = 0.1               # longest sleep of a leader, so that deadlines are checked
RECONNECT_INTERVAL_S = 1.0
UNREACHABLE_RETRY_S = 0.005     # how often a send tries again while its peer is not connected
FIRST_RETRY_S = 0.0005          # the first pause (a new socket's handshake takes well under 1 ms)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK


class Connection:
    """Sockets to a running store, request ids, a bounded window and reply futures."""

    def __init__(self, address: str | None = None, *, store: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, window: int = DEFAULT_WINDOW,
                 background: bool = True, context: zmq.Context | None = None,
                 key_file: str | None = None, server_key_file: str | None = None):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.store = store if not address else None
        self.address = resolve_address(address, store)
        self.timeout = float(timeout)
        self.window = int(window)
        self.info: dict = {}
        self._ctx = context or zmq.Context.instance()
        self._sock_lock = threading.Lock()
        self._cv = threading.Condition()
        self._reqs = Requests()                 # ipc/requests.py: shared with the asyncio connection
        self._pending = self._reqs.pending
        self._busy = self._reqs.busy            # socket name -> requests in flight on it
        self.curve = client_keys(key_file, server_key_file, store)   # secure mode: ipc/curve.py
        self._sockets = ClientSockets(self._ctx, self.curve)
        self._socks = self._sockets.socks       # name -> socket (the same dict)
        self.endpoints = self._sockets.endpoints
        self._leader = None
        self._user_waiters = 0
        self._bg_ident = None
        self._suspect = False
        self._last_reconnect = 0.0
        self._closed = False
        self._last_user_io = 0.0
        try:
            self._open("front", self.address)
            self._apply_hello(self.call("front", "hello"))
        except BaseException:
            self.close()
            raise
        self._bg = BackgroundLeader(self) if background else None
        if self._bg is not None:
            self._bg_ident = self._bg.ident
            self._bg.go()

    # -- requests ------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def request(self, name: str, op: str, fields: dict | None = None, frames=(),
                timeout: float | None = None, transform=None, future=None) -> ReplyFuture:
        """Send `{op, rid, **fields}` plus raw `frames` to socket `name` ("front", "appender",
        "reader"); the future resolves to `transform(env, frames)` (default: the pair itself).
        Error replies are passed to `transform` like any other reply. `future`: any object
        with `set_result(value)` and `set_exception(exc)` to complete instead of a new
        ReplyFuture (a caller with many requests in flight that only wants a callback, such as
        the Consumer's pipelined pulls); it is returned as given."""
        if self._closed:
            raise ConnectionClosed("connection closed")
        user = threading.get_ident() != self._bg_ident
        if self._suspect and user:
            self._maybe_reconnect()
        timeout = self.timeout if timeout is None else timeout
        if len(self._pending) >= self.window and user:
            if not self.wait(self._has_room, timeout):
                raise TimeoutError(f"{op}: {self.window} requests still in flight after {timeout}s")
        fut = ReplyFuture(self) if future is None else future
        now = time.monotonic()
        deadline = now + timeout
        if user:
            self._last_user_io = now
        pause = FIRST_RETRY_S
        while True:
            with self._sock_lock:
                lost = self._check_link_locked(name)
                sock = self._socks.get(name)
                if sock is None:
                    raise ConnectionClosed("connection closed") if self._closed else KeyError(name)
                sent = self._sockets.links[name].up and self._send_locked(
                    sock, name, op, fields, frames, (fut, deadline, name, transform, op))
                # The send may have consumed this socket's ZMQ_FD edge: drain for a leader that
                # sleeps on it. With no leader the next one drains before it sleeps.
                done = self._drain_locked((sock,)) if sent and self._leader is not None else ()
            if lost:
                self._complete(lost)
            if sent:
                break
            left = deadline - time.monotonic()
            if not user or left <= 0:
                self._suspect = True
                where = f"{name} at {self.endpoints.get(name, name)}"
                if not user:
                    raise ConnectionError(f"{op}: {where} is not connected or its send queue is full")
                raise PeerUnreachable(f"{op}: {where} was not reachable (or its send queue stayed "
                                      f"full) for {timeout}s; nothing was sent")
            time.sleep(min(pause, left))
            pause = min(pause * 2, UNREACHABLE_RETRY_S)
        if done:
            self._complete(done)
        return fut

    def _send_locked(self, sock, name: str, op: str, fields, frames, entry: tuple) -> bool:
        """Send one request and record it as pending (the caller holds _sock_lock); False when
        the socket's send queue is full (nothing sent, nothing recorded)."""
        rid, head = self._reqs.add(name, op, fields, entry)
        try:
            if frames:
                sock.send(head, _SNDMORE_NOBLOCK)
                for frame in frames[:-1]:
                    sock.send(frame, _SNDMORE_NOBLOCK)
                sock.send(frames[-1], _NOBLOCK)
            else:
                sock.send(head, _NOBLOCK)
        except zmq.Again:
            self._reqs.drop(rid)
            return False
        return True

    def call(self, name: str, op: str, frames=(), timeout: float | None = None, **fields) -> dict:
        """A synchronous request; returns the reply map. Raises MQError on an error reply and
        TimeoutError when no reply came in time."""
        return self.call_with_frames(name, op, frames, timeout, **fields)[0]

    def call_with_frames(self, name: str, op: str, frames=(), timeout: float | None = None,
                         **fields) -> tuple[dict, list]:
        """As `call`, also returning the reply's raw frames."""
        env, raw = self.request(name, op, fields, frames, timeout).result()
        return raise_for_error(env, op), raw

    def _has_room(self) -> bool:
        return len(self._pending) < self.window

    # -- waiting and completing ----------------------------------------------------------
    def wait(self, predicate, timeout: float | None = None) -> bool:
        """Drive the sockets until `predicate()` is true (True) or `timeout` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        me = threading.get_ident()
        is_bg = me == self._bg_ident
        if not is_bg:
            with self._cv:
                self._user_waiters += 1
        try:
            while True:
                if predicate():
                    return True
                if self._closed:
                    return bool(predicate())
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                with self._cv:
                    if self._leader == me:          # re-entered from a callback: lead inline
                        nested = True
                    elif self._leader is not None or (is_bg and self.users_active()):
                        if self._leader == self._bg_ident and not is_bg:
                            self._poke()            # ask the background thread to step aside
                        self._cv.wait(IDLE_POLL_S if remaining is None else min(remaining, IDLE_POLL_S))
                        continue
                    else:
                        nested = False
                        self._leader = me
                try:
                    self._lead(predicate, deadline, is_bg)
                finally:
                    if not nested:
                        with self._cv:
                            self._leader = None
                            self._cv.notify_all()
        finally:
            if not is_bg:
                with self._cv:
                    self._user_waiters -= 1
                    self._cv.notify_all()

    def _lead(self, predicate, deadline, is_bg: bool) -> None:
        signaled = ()
        while True:
            with self._sock_lock:
                done = self._watch_locked(signaled) if signaled else []
                done += self._drain_locked(self._to_drain(signaled))
            if done:
                self._complete(done)
            if predicate() or self._closed or (is_bg and self.users_active()):
                return
            sleep = IDLE_POLL_S
            if deadline is not None:
                sleep = min(sleep, deadline - time.monotonic())
                if sleep <= 0:
                    return
            sleep = min(sleep, max(self._reqs.next_expiry - time.monotonic(), 0.0))
            fdpoll = self._sockets.fdpoll
            try:
                ready = fdpoll.poll(sleep * 1000.0)
            except (OSError, RuntimeError):
                ready = ()
            signaled = [fd for fd, _ in ready]
            if self._sockets.wake_r in signaled:
                self._sockets.drain_wake()

    def _to_drain(self, signaled) -> list:
        """The sockets a leader reads (the caller holds _sock_lock): those with requests in
        flight, and those whose ZMQ_FD the last poll reported. A socket with nothing in flight
        can only hold late replies, which are dropped anyway; reading it when its descriptor
        fires keeps the descriptor from staying readable. (EVENTS costs a few microseconds per
        socket: a consumer's pulls should not pay it for the front door and the appender.)"""
        busy, fds = self._busy, self._sockets.fds
        return [sock for name, sock in self._socks.items() if busy.get(name) or fds.get(name) in signaled]

    def _drain_locked(self, socks=None) -> list:
        """Read every waiting reply of `socks` (default all; the caller holds _sock_lock) and
        expire overdue requests."""
        done = []
        match = self._reqs.match
        for sock in self._socks.values() if socks is None else socks:
            while sock.get(_EVENTS) & _POLLIN:
                head = sock.recv(_NOBLOCK, copy=False)    # Frame.more: no RCVMORE option call
                extra = []
                more = head.more
                while more:                         # raw frames: zero-copy memoryviews
                    frame = sock.recv(_NOBLOCK, copy=False)
                    extra.append(frame.buffer)
                    more = frame.more
                for raw, frames in replies(head.buffer, extra):
                    match(raw, frames, done)
        now = time.monotonic()
        if self._reqs.next_expiry <= now and self._reqs.expire(now, self.endpoints, done):
            self._suspect = True
        return done

    def _complete(self, done: list) -> None:
        """Resolve futures outside every lock (their callbacks may send requests)."""
        for entry, env, extra in done:
            complete(entry, env, extra, extra)
        with self._cv:
            self._cv.notify_all()
            if self._leader not in (None, self._bg_ident, threading.get_ident()):
                self._poke()                         # a leading user thread may wait for these

    def _poke(self) -> None:
        self._sockets.poke()

    def users_active(self) -> bool:
        """A user thread waits, or did I/O in the last QUIET_S (the background thread's cue)."""
        return bool(self._user_waiters) or time.monotonic() - self._last_user_io < QUIET_S

    # -- sockets and reconnection --------------------------------------------------------
    def _open(self, name: str, endpoint: str) -> None:
        """Connect socket `name` to `endpoint`, replacing the one it had (its requests in
        flight fail with ConnectionClosed: they went to the old endpoint)."""
        old = self.endpoints.get(name)
        with self._sock_lock:
            failed = self._replace_locked(name, endpoint, lambda op: ConnectionClosed(
                f"{op}: {name} moved from {old} to {endpoint}"))
        if failed:
            self._complete(failed)

    def _replace_locked(self, name: str, endpoint: str, error) -> list:
        """A fresh socket `name` connected to `endpoint` (the caller holds _sock_lock); the
        requests in flight on the old one, failed with `error(op)`, for `_complete`."""
        failed = self._reqs.take_all(name, error)
        self._sockets.replace(name, endpoint)
        return failed

    def _watch_locked(self, signaled) -> list:
        """Read the monitors whose descriptor the last poll reported (the caller holds
        _sock_lock); what `_check_link_locked` gives for each."""
        done = []
        for fd in signaled:
            name = self._sockets.link_fds.get(fd)
            if name is not None:
                done += self._check_link_locked(name)
        return done

    def _check_link_locked(self, name: str) -> list:
        """Read socket `name`'s monitor (the caller holds _sock_lock). When its connection
        broke: the replies that came before the break, and the requests still in flight failed
        with ConnectionLost, for `_complete`; the socket is replaced by a fresh one."""
        link = self._sockets.links.get(name)
        if link is None or not link.read():
            return []
        endpoint = self.endpoints[name]
        done = self._drain_locked((self._socks[name],))

        def lost(op: str) -> ConnectionLost:
            what = "stored" if op.startswith("put") else "carried out"
            return ConnectionLost(f"{op}: the connection to the {name} ({endpoint}) broke before "
                                  f"the reply came; it may or may not have been {what}")
        log.info("the connection to the %s at %s broke", name, endpoint)
        return done + self._replace_locked(name, endpoint, lost)

    def _apply_hello(self, env: dict) -> None:
        for name, endpoint in service_endpoints(env, self.address).items():
            if self.endpoints.get(name) != endpoint:
                self._open(name, endpoint)
        self.info = env

    def reconnect(self) -> bool:
        """Say hello again and reopen sockets whose endpoint changed; False when the front
        door did not answer."""
        self._last_reconnect = time.monotonic()
        if self.store:
            try:
                address = resolve_address(None, self.store)
            except ConnectionError:
                address = self.address
            if address != self.address:
                self.address = address
                self._open("front", address)
        try:
            env = self.call("front", "hello", timeout=min(self.timeout, 5.0))
            self._apply_hello(env)
        except (TimeoutError, ConnectionError, MQError) as e:
            log.info("re-hello to %s failed: %s", self.address, e)
            return False
        self._suspect = False
        return True

    def _maybe_reconnect(self) -> None:
        if time.monotonic() - self._last_reconnect >= RECONNECT_INTERVAL_S:
            self.reconnect()

    def close(self) -> None:
        """Fail every pending request with ConnectionClosed and close the sockets."""
        if self._closed:
            return
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._poke()
        bg = getattr(self, "_bg", None)
        if bg is not None:
            bg.stop()
        with self._sock_lock:
            failed = self._reqs.take_all(None, lambda op: ConnectionClosed(f"{op}: connection closed"))
            self._busy.clear()
            self._sockets.close()
        self._complete(failed)
        self._sockets.close_pipe()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
