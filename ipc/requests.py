"""The request bookkeeping of a client connection, with no sockets: written once for the
blocking ipc.connection.Connection and the asyncio ipc.aio.connection.AsyncConnection, which
add only how they send, wait and read.

- `Requests` numbers requests (`rid`), keeps the pending ones (future, deadline, socket
  name, transform, op), matches replies to them and finds the overdue ones;
- `replies(head, extra)` splits a received message into its replies: one envelope with its
  raw frames, or (a combined put reply: an empty first frame) one envelope per frame;
- `complete(entry, env, frames, exc)` resolves a request's future: the transform of the reply,
  or the exception;
- `service_endpoints(env, front)` checks a `hello` answer and gives the appender's and the
  reader's endpoints as this client reaches them.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging

from ipc.client_common import reachable_endpoint
from ipc.protocol import PROTOCOL_VERSION, pack, unpack

log = logging.getLogger("mqstore.client")

_INVALID_STATE = (concurrent.futures.InvalidStateError, asyncio.InvalidStateError)


class Requests:
    """The pending requests of one connection: rid -> (future, deadline, name, transform, op),
    and how many are in flight on each socket."""

    def __init__(self):
        self.pending: dict = {}
        self.busy: dict = {}                    # socket name -> requests in flight on it
        self._rids = itertools.count(1)
        self.next_expiry = float("inf")

    def add(self, name: str, op: str, fields, entry: tuple) -> tuple[int, bytes]:
        """Record `entry` as pending; (rid, packed envelope) to send."""
        rid = next(self._rids)
        env = {"op": op, "rid": rid}
        if fields:
            env.update(fields)
        self.pending[rid] = entry
        self.busy[name] = self.busy.get(name, 0) + 1
        if entry[1] < self.next_expiry:
            self.next_expiry = entry[1]
        return rid, pack(env)

    def drop(self, rid: int) -> None:
        """A request that was not sent after all."""
        entry = self.pending.pop(rid)
        self.busy[entry[2]] -= 1

    def match(self, raw, frames, done: list) -> None:
        """Take the reply `raw` (an envelope) and its frames: append (entry, env, frames) to
        `done` when it answers a pending request (a late one is dropped)."""
        try:
            env = unpack(raw)
            entry = self.pending.pop(env["rid"], None)
        except Exception:
            log.warning("dropped a reply that is not a protocol envelope")
            return
        if entry is not None:                    # None: a reply after its timeout
            self.busy[entry[2]] -= 1
            done.append((entry, env, frames))

    def expire(self, now: float, endpoints: dict, done: list) -> bool:
        """Fail the requests overdue at `now` with TimeoutError (appended to `done`); whether
        there were any."""
        nxt = float("inf")
        late = False
        for rid, entry in list(self.pending.items()):
            if entry[1] <= now:
                del self.pending[rid]
                self.busy[entry[2]] -= 1
                late = True
                done.append((entry, None, TimeoutError(
                    f"{entry[4]}: no reply from {entry[2]} ({endpoints.get(entry[2], '?')}) in time")))
            elif entry[1] < nxt:
                nxt = entry[1]
        self.next_expiry = nxt
        return late

    def take_all(self, name: str | None, error) -> list:
        """Remove the requests in flight on socket `name` (None: every socket), each failed with
        `error(op)`, for `complete`."""
        failed = []
        for rid, entry in list(self.pending.items()):
            if name is None or entry[2] == name:
                del self.pending[rid]
                self.busy[entry[2]] -= 1
                failed.append((entry, None, error(entry[4])))
        return failed


def replies(head, extra: list):
    """The replies of one received message: `head` its first frame's buffer, `extra` the
    buffers of the others (module docstring)."""
    if len(head):
        return ((head, extra),)
    return [(frame, []) for frame in extra]          # combined put replies: one map per frame


def complete(entry: tuple, env, frames, exc) -> None:
    """Resolve the future of `entry` (a cancelled one is left as it is)."""
    fut, _deadline, _name, transform, _op = entry
    try:
        if env is None:
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
    except _INVALID_STATE:
        pass                                         # cancelled by its owner


def service_endpoints(env: dict, front: str) -> dict:
    """name -> endpoint of the appender and the reader from a `hello` answer, reachable from
    this client (client_common.reachable_endpoint); ConnectionError for another protocol
    version or an endpoint missing."""
    if env.get("version") != PROTOCOL_VERSION:
        raise ConnectionError(f"the store speaks protocol version {env.get('version')!r}, "
                              f"this client {PROTOCOL_VERSION}")
    out = {}
    for name in ("appender", "reader"):
        endpoint = env.get(name)
        if not isinstance(endpoint, str):
            raise ConnectionError(f"hello reply without a {name} endpoint")
        out[name] = reachable_endpoint(endpoint, front)
    return out
