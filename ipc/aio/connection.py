"""The asyncio side of docs/PROTOCOL.md: one `AsyncConnection` per asyncio client object, on
`zmq.asyncio` sockets (a DEALER to each of the front door, the appender and the reader, options
as ipc.sockets.make_socket sets them).

It offers what the blocking ipc.connection.Connection offers the protocol logic the two share:
`request(name, op, fields, frames, timeout, transform, future)` sends at once (it does not
wait: callable from sync code such as ipc.pulls.PullPipeline) and completes the future, or any
object with `set_result`/`set_exception` (a pull ticket, a batch ticket), when the reply comes;
replies are matched by `rid` (combined put replies too), a request not answered within its
timeout fails with TimeoutError. `call` awaits a reply map (MQError for an error reply),
`wait(predicate, timeout)` awaits a condition that completions make true, `wait_room` awaits
room in the window of `window` requests.

The bookkeeping of requests and replies (rids, matching, expiry, completion, the hello answer)
is ipc/requests.py, shared with the blocking Connection; this module adds the sockets and the
tasks: one per socket reads replies, one expires overdue requests. A service restarted on
the same endpoint is reconnected by ZeroMQ; its requests in flight time out (the blocking
Connection's socket monitors, which fail them at once and reconnect a moved store, are not
repeated here).
"""
from __future__ import annotations

import asyncio
import time

import zmq
import zmq.asyncio

from ipc.client_common import ConnectionClosed, raise_for_error, resolve_address
from ipc.requests import Requests, complete, replies, service_endpoints
from ipc.curve import client_keys
from ipc.sockets import make_socket


DEFAULT_TIMEOUT = 10.0
DEFAULT_WINDOW = 1024
EXPIRY_CHECK_S = 0.05


class AsyncConnection:
    """Sockets to a running store for one event loop; `await open()` before use."""

    def __init__(self, address: str | None = None, *, store: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, window: int = DEFAULT_WINDOW,
                 key_file: str | None = None, server_key_file: str | None = None):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.address = resolve_address(address, store)
        self.curve = client_keys(key_file, server_key_file, store)   # secure mode: ipc/curve.py
        self.timeout = float(timeout)
        self.window = int(window)
        self.info: dict = {}
        self.endpoints: dict = {}
        self._ctx = zmq.asyncio.Context.instance()
        self._socks: dict = {}
        self._tasks: list = []
        self._reqs = Requests()                 # ipc/requests.py: shared with the blocking connection
        self._pending = self._reqs.pending      # rid -> (future, deadline, name, transform, op)
        self._changed = asyncio.Event()
        self._closed = False

    async def open(self) -> "AsyncConnection":
        try:
            self._connect("front", self.address)
            env = await self.call("front", "hello")
            for name, endpoint in service_endpoints(env, self.address).items():
                self._connect(name, endpoint)
            self.info = env
        except BaseException:
            self.close()
            raise
        return self

    def _connect(self, name: str, endpoint: str) -> None:
        sock = make_socket(self._ctx, zmq.DEALER, curve=self.curve)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        sock.connect(endpoint)
        self._socks[name] = sock
        self.endpoints[name] = endpoint
        self._tasks.append(asyncio.ensure_future(self._read(name, sock)))
        if len(self._tasks) == 1:
            self._tasks.append(asyncio.ensure_future(self._expire()))

    # -- requests --------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed

    def request(self, name: str, op: str, fields: dict | None = None, frames=(),
                timeout: float | None = None, transform=None, future=None):
        """Send `{op, rid, **fields}` and `frames` to socket `name` now; the future (or
        `future` as given) completes with `transform(env, frames)` (default the pair)."""
        if self._closed:
            raise ConnectionClosed("connection closed")
        sock = self._socks[name]
        fut = asyncio.get_running_loop().create_future() if future is None else future
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        _rid, head = self._reqs.add(name, op, fields, (fut, deadline, name, transform, op))
        sock.send_multipart([head, *frames], copy=True)   # queued in order if it must wait
        return fut

    async def call(self, name: str, op: str, frames=(), timeout: float | None = None, **fields) -> dict:
        env, _ = await self.call_with_frames(name, op, frames, timeout, **fields)
        return env

    async def call_with_frames(self, name: str, op: str, frames=(), timeout: float | None = None,
                               **fields) -> tuple[dict, list]:
        await self.wait_room(timeout)
        env, raw = await self.request(name, op, fields, frames, timeout)
        return raise_for_error(env, op), raw

    async def wait_room(self, timeout: float | None = None) -> None:
        if len(self._pending) >= self.window:
            timeout = self.timeout if timeout is None else timeout
            if not await self.wait(lambda: len(self._pending) < self.window, timeout):
                raise TimeoutError(f"{self.window} requests still in flight after {timeout}s")

    async def wait(self, predicate, timeout: float | None = None) -> bool:
        """Until `predicate()` (True) or `timeout` seconds (False); completions wake it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not predicate():
            if self._closed:
                return bool(predicate())
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return True

    # -- replies ---------------------------------------------------------------------------
    async def _read(self, name: str, sock) -> None:
        while not self._closed:
            try:
                frames = await sock.recv_multipart(copy=False)
            except (asyncio.CancelledError, zmq.ZMQError):
                return
            done: list = []
            for raw, rest in replies(frames[0].buffer, [f.buffer for f in frames[1:]]):
                self._reqs.match(raw, rest, done)
            for entry, env, rest in done:
                complete(entry, env, rest, None)
            self._changed.set()

    async def _expire(self) -> None:
        while not self._closed:
            try:
                await asyncio.sleep(EXPIRY_CHECK_S)
            except asyncio.CancelledError:
                return
            done: list = []
            if self._reqs.expire(time.monotonic(), self.endpoints, done):
                for entry, _env, exc in done:
                    complete(entry, None, None, exc)
                self._changed.set()

    def close(self) -> None:
        """Fail every pending request with ConnectionClosed and close the sockets."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for entry, _env, exc in self._reqs.take_all(None, lambda op: ConnectionClosed(f"{op}: connection closed")):
            complete(entry, None, None, exc)
        for sock in self._socks.values():
            sock.close(0)
        self._socks.clear()
        self._changed.set()


__all__ = ["AsyncConnection"]
