"""The transport floor of a one-in-flight put, measured in the same run as the put probe: a
bare pyzmq round trip between two Python processes on this machine, with nothing of the
store in it.

`EchoServer` is a ROUTER in a process of its own that answers every request with a reply of
a put reply's size. `echo_worker` (run in a producer process of the benchmark's pool, as the
put probe is) sends one request at a time (or keeps a window of them in flight: the floor of
an unbatched row at that concurrency), a DEALER frame of a put envelope's size and a body
frame, and times each send to reply. A put over ZeroMQ pays at least this: two processes
woken per request, the body over loopback TCP both ways, pyzmq's calls. The put probe's p99
beside this one's says how much of it is the store and how much is the machine (on the small
shared VMs we run on, a bare echo's p99 itself moves between 0.2 and 1.5 ms from run to run).
"""
from __future__ import annotations

import multiprocessing
import time

ENVELOPE_BYTES = 90          # a put's msgpack envelope (op, rid, topic, properties with UNIQ_KEY)
REPLY_BYTES = 110            # a put's reply (status, msg_id, offsets, store timestamp)
WARM_UP = 200
STOP = b"stop"


def _serve(port_out) -> None:
    import zmq
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port_out.send(sock.bind_to_random_port("tcp://127.0.0.1"))
    port_out.close()
    reply = b"r" * REPLY_BYTES
    try:
        while True:
            frames = sock.recv_multipart()
            if frames[1:] == [STOP]:
                return
            sock.send_multipart([frames[0], reply])
    finally:
        sock.close(0)
        ctx.term()


class EchoServer:
    """The echo ROUTER in a spawned process; `address` once started; a context manager."""

    def __init__(self):
        self.address = None
        self._proc = None

    def __enter__(self) -> "EchoServer":
        ctx = multiprocessing.get_context("spawn")
        port_in, port_out = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_serve, args=(port_out,), name="echo-floor", daemon=True)
        self._proc.start()
        port_out.close()
        with port_in:
            if not port_in.poll(60):
                self._proc.kill()
                raise RuntimeError("the echo server did not start in 60 s")
            self.address = f"tcp://127.0.0.1:{port_in.recv()}"
        return self

    def __exit__(self, *exc) -> None:
        import zmq
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(self.address)
        sock.send(STOP)
        sock.close()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()


def echo_worker(address: str, body_size: int, seconds: float, window: int = 1,
                start_at: float | None = None) -> dict:
    """Round trips with `window` requests in flight (the echo answers in order), for `seconds`
    after a warm-up, from `start_at` (time.monotonic, system-wide) when given: their count,
    latencies (seconds, send to reply, in order) and the time of the last reply."""
    import collections
    import zmq
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    envelope, body = b"e" * ENVELOPE_BYTES, b"b" * body_size
    lat = []
    sent: collections.deque = collections.deque()
    try:
        for _ in range(WARM_UP):
            sock.send_multipart([envelope, body])
            sock.recv_multipart()
        while start_at is not None and time.monotonic() < start_at:
            time.sleep(min(0.001, max(0.0, start_at - time.monotonic())))
        end = time.monotonic() + seconds
        while time.monotonic() < end or sent:
            while len(sent) < window and time.monotonic() < end:
                sent.append(time.perf_counter())
                sock.send_multipart([envelope, body])
            sock.recv_multipart()
            lat.append(time.perf_counter() - sent.popleft())
        last = time.monotonic()
    finally:
        sock.close()
    return {"round_trips": len(lat), "latencies": lat, "last": last}
