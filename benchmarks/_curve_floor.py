"""The CurveZMQ floor beside pipeline.py's CURVE rows: raw pyzmq round trips of a batch-sized
request (100 x 1 KiB) and a small reply, 50 in flight, over tcp loopback between two threads,
without and then with CURVE (libzmq's encryption, pyzmq's thread authenticator admitting any
key). Its ratio is what encryption alone leaves of a transport that does nothing else, the
bound a store's CURVE/no-CURVE ratio for batched puts can be held against.

Measured here (2-core VM shared with other work, `python benchmarks/_curve_floor.py`): 10.7k
requests/s without, 4.0k with (0.38); another run 16.6k and 3.5k (0.21)."""
from __future__ import annotations

import os
import threading
import time

import zmq
import zmq.auth

IN_FLIGHT = 50


def round_trips(curve: bool, size: int, seconds: float) -> float:
    """Requests per second of `size` bytes, IN_FLIGHT in flight, for `seconds`."""
    ctx = zmq.Context()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    auth = None
    if curve:
        from zmq.auth.thread import ThreadAuthenticator
        spub, ssec = zmq.curve_keypair()
        cpub, csec = zmq.curve_keypair()
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
        server.curve_server, server.curve_secretkey, server.curve_publickey = True, ssec, spub
        client.curve_publickey, client.curve_secretkey, client.curve_serverkey = cpub, csec, spub
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    stop = threading.Event()

    def echo():
        while not stop.is_set():
            if server.poll(100):
                ident, _ = server.recv_multipart(copy=False)
                server.send_multipart([ident, b"ok"])
    t = threading.Thread(target=echo)
    t.start()
    body, n, in_flight = os.urandom(size), 0, 0
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        while in_flight < IN_FLIGHT:
            client.send(body)
            in_flight += 1
        client.recv()
        in_flight -= 1
        n += 1
    elapsed = time.monotonic() - start
    stop.set()
    t.join()
    if auth is not None:
        auth.stop()
    ctx.destroy(0)
    return n / elapsed


def floor(size: int = 100 * 1024, seconds: float = 2.0) -> dict:
    off = round_trips(False, size, seconds)
    on = round_trips(True, size, seconds)
    return {"size": size, "off_rps": off, "curve_rps": on, "ratio": on / off}


if __name__ == "__main__":
    f = floor()
    print(f"{f['size']} B requests/s: without CURVE {f['off_rps']:.0f}, with {f['curve_rps']:.0f}: {f['ratio']:.2f}")
