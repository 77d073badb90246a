"""Socket helpers shared by services and clients: endpoint names under a store's `run/`
directory, and sockets set up the way DESIGN.md section 4 requires (ROUTER_MANDATORY, raised
high-water marks, no linger on close) and able to bind and connect to IPv6 addresses as well as
IPv4 ones (ZMQ_IPV6: without it ZeroMQ refuses a `tcp://[::1]:P` endpoint), with the CURVE
keys of secure mode when they are given (`curve`: an ipc.curve.CurveKeys, server or client)."""
from __future__ import annotations

import hashlib
import os

import zmq

HWM = 100_000
MAX_IPC_PATH = 100            # a unix socket path must fit in sockaddr_un (108 bytes)


def ipc_endpoint(run_dir: str, name: str) -> str:
    """`ipc://<run>/<name>.sock`, or an abstract-namespace name when that path is too long."""
    path = os.path.join(os.path.abspath(run_dir), f"{name}.sock")
    if len(path) <= MAX_IPC_PATH:
        return f"ipc://{path}"
    digest = hashlib.sha1(os.path.abspath(run_dir).encode()).hexdigest()[:16]
    return f"ipc://@mqstore-{digest}-{name}"


def make_socket(ctx: zmq.Context, kind: int, *, router_mandatory: bool = True,
                curve=None) -> zmq.Socket:
    sock = ctx.socket(kind)
    if curve is not None:
        curve.apply(sock)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    sock.setsockopt(zmq.IPV6, 1)
    if kind == zmq.ROUTER and router_mandatory:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    return sock


def bind_tcp(sock: zmq.Socket, host: str, port: int = 0) -> str:
    """Bind to host:port (0 = any free port) and return the endpoint clients should use."""
    if port:
        sock.bind(f"tcp://{host}:{port}")
    else:
        sock.bind_to_random_port(f"tcp://{host}")
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def bind_ipc(sock: zmq.Socket, endpoint: str) -> None:
    if endpoint.startswith("ipc://") and not endpoint.startswith("ipc://@"):
        try:
            os.unlink(endpoint[len("ipc://"):])
        except FileNotFoundError:
            pass
    sock.bind(endpoint)
