"""services.base._exit_now: a service ends without the interpreter's teardown, but a message
queued on a socket closed with a linger (the HA slave's `bye`) still reaches its peer."""
from __future__ import annotations

import os
import subprocess
import sys

import zmq

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SENDER = """
import sys, zmq
from services.base import _exit_now
sock = zmq.Context.instance().socket(zmq.PUSH)
sock.connect(sys.argv[1])
left_open = zmq.Context.instance().socket(zmq.PUSH)     # never closed: must not hold the exit
left_open.connect(sys.argv[1] + "0")
for i in range(16):
    sock.send(bytes([i]) * (16 << 20), zmq.NOBLOCK)
sock.close(5000)
_exit_now(3)
"""


def test_messages_on_a_lingering_socket_reach_the_peer_before_the_process_ends():
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        r = subprocess.run([sys.executable, "-c", _SENDER, f"tcp://127.0.0.1:{port}"], cwd=REPO,
                           capture_output=True, timeout=60)
        assert r.returncode == 3, r.stderr
        got = []
        while pull.poll(2000):
            got.append(pull.recv())
        assert [(len(m), m[0]) for m in got] == [(16 << 20, i) for i in range(16)]
    finally:
        pull.close(0)
        ctx.term()
