"""`--port 0` picks the store's four ports below the kernel's ephemeral range, so that no
outgoing connection made between the pick and the service's bind can take one of them
(the cause of an occasional "Address already in use" at start)."""
from __future__ import annotations

import socket

from supervisor.ports import ephemeral_range, free_port, plan_endpoints


def test_picked_ports_are_free_distinct_and_outside_the_ephemeral_range():
    lo, _ = ephemeral_range()
    endpoints = plan_endpoints("127.0.0.1", 0)
    ports = [int(e.rpartition(":")[2]) for e in endpoints.values()]
    assert len(set(ports)) == 4          # front door, appender, reader, ha
    for port in ports:
        assert 1024 <= port < lo
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))                 # still free


def test_a_port_in_use_or_taken_is_not_picked():
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port("127.0.0.1")))
        busy = held.getsockname()[1]
        picked = {free_port("127.0.0.1", taken=(busy - 1, busy + 1)) for _ in range(300)}
    assert not picked & {busy, busy - 1, busy + 1}
