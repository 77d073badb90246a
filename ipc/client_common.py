"""What the client classes share: finding a store's front door (an address, or the
`run/address` file the supervisor writes into the store directory), the futures of requests,
the checks of the arguments they share (timeouts, counts and offsets), and the exceptions of
the client library. Statuses of puts and pulls are not exceptions (STYLE.md); these are for
error replies (`MQError`), for connections that went away (`ConnectionClosed`), and for
arguments no request could carry (TypeError or ValueError naming the argument, raised before
anything is sent)."""
from __future__ import annotations

import concurrent.futures
import math
import numbers
import os
import threading

from ipc.protocol import ERROR, ErrorCode

DEFAULT_STORE = "./store-data"


class MQError(Exception):
    """An error reply (status "ERROR") from a service: `code` (ErrorCode) and `reason`."""

    def __init__(self, code, reason: str, op: str | None = None):
        try:
            code = ErrorCode(code)
            name = code.name
        except ValueError:
            name = f"code {code}"
        super().__init__(f"{op + ': ' if op else ''}{name}: {reason}")
        self.code = code
        self.reason = reason
        self.op = op


class ConnectionClosed(ConnectionError):
    """The connection was closed, or a socket was replaced, before the reply came."""


class ConnectionLost(ConnectionError):
    """The connection to a service broke while the request was in flight (the service died or
    stopped): no reply will come. A put may or may not have been stored; a retry may store a
    second copy, which consumers tell by its UNIQ_KEY."""


class PeerUnreachable(TimeoutError):
    """A request's peer stayed unreachable until the request's deadline: nothing was sent."""


def _number(value, name: str, what: str):
    """`value` as an int or float, or TypeError saying what `name` must be (bool is no number)."""
    cls = value.__class__
    if cls is int or cls is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, not {type(value).__name__}")
    return float(value)


def check_timeout(value, name: str = "timeout") -> float:
    """`value` if it is a finite number of seconds above 0; else TypeError (no number) or
    ValueError. A request with no time to wait for its reply would still go out (and a send be
    tried again, each attempt stored), so such a timeout is refused before anything is sent."""
    what = "a number of seconds above 0"
    value = _number(value, name, what)
    if not 0 < value < math.inf:                   # NaN fails too
        raise ValueError(f"{name} must be {what}, not {value!r}")
    return value


def check_wait_ms(value, name: str = "timeout_ms") -> float:
    """`value` if it is a finite number of milliseconds >= 0 (0: do not wait); else TypeError
    or ValueError naming `name`."""
    what = "a number of milliseconds >= 0"
    value = _number(value, name, what)
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be {what}, not {value!r}")
    return value


def check_int(value, name: str, minimum: int = 0) -> int:
    """`value` as an int if it is an integer >= `minimum` (an int, or a type with `__index__`
    such as numpy's, but no bool, float or str); else TypeError or ValueError naming `name`."""
    if value.__class__ is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int >= {minimum}, not {type(value).__name__}")
        value = value.__index__()
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, not {value}")
    return value


def normalize_address(address: str) -> str:
    """`host:port` or `tcp://host:port` -> `tcp://host:port` (other transports kept as given)."""
    address = address.strip()
    if "://" in address:
        return address
    if address.isdigit():
        return f"tcp://127.0.0.1:{address}"
    return f"tcp://{address}"


_WILDCARDS = ("0.0.0.0", "[::]", "*", "[::0]")


def reachable_endpoint(endpoint: str, front: str) -> str:
    """An endpoint from `hello` as this client can reach it: a store that listens on every
    interface (`--host 0.0.0.0` or `::`) names its services by that wildcard, which is no
    address to connect to from elsewhere, so the host the client reached the front door at
    takes its place (`tcp://0.0.0.0:10913` via `tcp://10.1.2.3:10911` -> `tcp://10.1.2.3:10913`)."""
    scheme, sep, rest = endpoint.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "tcp" or not sep or host not in _WILDCARDS:
        return endpoint
    front_host = front.partition("://")[2].rpartition(":")[0]
    return f"tcp://{front_host}:{port}" if front_host and front_host not in _WILDCARDS else endpoint


def resolve_address(address: str | None = None, store: str | None = None) -> str:
    """The front door's address: `address` when given, else `<store>/run/address`
    (`store` defaults to ./store-data, as `mqstore start` does)."""
    if address:
        return normalize_address(address)
    root = store or DEFAULT_STORE
    path = os.path.join(root, "run", "address")
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        raise ConnectionError(f"no running store at {root!r}: {path} does not exist "
                              f"(start one with `mqstore start --store {root}`, or pass an address)") from None
    if not text:
        raise ConnectionError(f"{path} is empty: the store at {root!r} is still starting")
    return normalize_address(text)


def raise_for_error(env: dict, op: str | None = None) -> dict:
    """Return `env`, or raise MQError when it is an error reply."""
    if env.get("status") == ERROR:
        raise MQError(env.get("code", int(ErrorCode.INTERNAL)), str(env.get("reason", "")), op)
    return env


_FINISHED = concurrent.futures._base.FINISHED
_DONE = (concurrent.futures._base.CANCELLED, concurrent.futures._base.CANCELLED_AND_NOTIFIED,
         _FINISHED)


class ReplyFuture(concurrent.futures.Future):
    """A `concurrent.futures.Future` whose `result()` and `exception()` drive the connection's
    sockets while they wait, so a waiting caller reads its reply itself (no thread hop).
    `done()` and the result of a finished future are read without the future's lock: the state
    becomes FINISHED after the result is stored, and a read of one attribute is atomic."""

    def __init__(self, conn):
        super().__init__()
        self._conn = conn

    def done(self) -> bool:
        return self._state in _DONE

    def result(self, timeout=None):
        if self._state == _FINISHED and self._exception is None:
            return self._result
        if not self.done():
            self._conn.wait(self.done, timeout)
        return super().result(0)

    def exception(self, timeout=None):
        if not self.done():
            self._conn.wait(self.done, timeout)
        return super().exception(0)


_SHARED_CONDITION = threading.Condition()      # reentrant: concurrent.futures.wait takes it per future
_PENDING = concurrent.futures._base.PENDING


class MessageFuture(ReplyFuture):
    """A ReplyFuture without a lock of its own: all of them share one Condition, so that the
    future of each auto-batched message costs an object rather than a Condition and its RLock
    (timeit on the 2-core VM: 3.8 us to make and complete a ReplyFuture, 1.9 us for this one).
    Waiting goes through the
    connection (ReplyFuture.result), never through the shared condition's wait, so a wakeup
    meant for another future cannot end a wait early; concurrent.futures.wait and
    as_completed still work (they take each future's condition, the same reentrant one)."""

    def __init__(self, conn):                   # Future.__init__ is not called: no Condition
        self._condition = _SHARED_CONDITION
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []
        self._conn = conn


def settle_all(futures: list, values, exc) -> None:
    """Complete `futures` (MessageFutures of one batch) with `values` (one each) or all with
    `exc`, taking their shared condition once instead of once per future; a cancelled one is
    left as it is. Done callbacks run after, outside the condition, as Future.set_result runs
    them."""
    called = []
    with _SHARED_CONDITION:
        for i, fut in enumerate(futures):
            if fut._state is not _PENDING:          # cancelled by its owner
                continue
            if exc is None:
                fut._result = values[i]
                fut._state = _FINISHED
                for waiter in fut._waiters:
                    waiter.add_result(fut)
            else:
                fut._exception = exc
                fut._state = _FINISHED
                for waiter in fut._waiters:
                    waiter.add_exception(fut)
            if fut._done_callbacks:
                called.append(fut)
        _SHARED_CONDITION.notify_all()
    for fut in called:
        fut._invoke_callbacks()
