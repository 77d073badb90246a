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

One task per socket reads replies; one task expires overdue requests. A service restarted on
the same endpoint is reconnected by ZeroMQ; its requests in flight time out (the blocking
Connection's socket monitors, which fail them at once and reconnect a moved store, are not
repeated here).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time

import zmq
import zmq.asyncio

from ipc.client_common import ConnectionClosed, raise_for_error, reachable_endpoint, resolve_address
from ipc.protocol import PROTOCOL_VERSION, pack, unpack
from ipc.curve import client_keys
from ipc.sockets import make_socket

log = logging.getLogger("mqstore.client")

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
        self._pending: dict = {}                # rid -> (future, deadline, name, transform, op)
        self._rids = itertools.count(1)
        self._changed = asyncio.Event()
        self._closed = False

    async def open(self) -> "AsyncConnection":
        try:
            self._connect("front", self.address)
            env = await self.call("front", "hello")
            if env.get("version") != PROTOCOL_VERSION:
                raise ConnectionError(f"the store speaks protocol version {env.get('version')!r}, "
                                      f"this client {PROTOCOL_VERSION}")
            for name in ("appender", "reader"):
                if not isinstance(env.get(name), str):
                    raise ConnectionError(f"hello reply without a {name} endpoint")
                self._connect(name, reachable_endpoint(env[name], self.address))
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
        rid = next(self._rids)
        env = {"op": op, "rid": rid}
        if fields:
            env.update(fields)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._pending[rid] = (fut, deadline, name, transform, op)
        sock.send_multipart([pack(env), *frames], copy=True)   # queued in order if it must wait
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
            head, extra = frames[0], [f.buffer for f in frames[1:]]
            replies = ((head.buffer, extra),) if len(head.buffer) else [(f, []) for f in extra]
            for raw, rest in replies:
                try:
                    env = unpack(raw)
                    entry = self._pending.pop(env["rid"], None)
                except Exception:
                    log.warning("dropped a reply that is not a protocol envelope")
                    continue
                if entry is not None:
                    self._complete(entry, env, rest, None)
            self._changed.set()

    @staticmethod
    def _complete(entry, env, frames, exc) -> None:
        fut, _deadline, _name, transform, _op = entry
        try:
            if exc is not None:
                fut.set_exception(exc)
            elif transform is None:
                fut.set_result((env, frames))
            else:
                try:
                    value = transform(env, frames)
                except Exception as e:
                    fut.set_exception(e)
                else:
                    fut.set_result(value)
        except asyncio.InvalidStateError:
            pass                                    # cancelled by its owner

    async def _expire(self) -> None:
        while not self._closed:
            try:
                await asyncio.sleep(EXPIRY_CHECK_S)
            except asyncio.CancelledError:
                return
            now = time.monotonic()
            late = [rid for rid, entry in self._pending.items() if entry[1] <= now]
            for rid in late:
                entry = self._pending.pop(rid)
                self._complete(entry, None, None, TimeoutError(
                    f"{entry[4]}: no reply from {entry[2]} ({self.endpoints.get(entry[2], '?')}) in time"))
            if late:
                self._changed.set()

    def close(self) -> None:
        """Fail every pending request with ConnectionClosed and close the sockets."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            self._complete(entry, None, None, ConnectionClosed(f"{entry[4]}: connection closed"))
        for sock in self._socks.values():
            sock.close(0)
        self._socks.clear()
        self._changed.set()


__all__ = ["AsyncConnection"]
