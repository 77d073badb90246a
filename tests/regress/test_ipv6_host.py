"""Regression: `mqstore start --host ::1` could not start ("cannot listen on tcp://[::1]:P: No
such device"): ZeroMQ binds and connects to IPv6 addresses only on sockets with ZMQ_IPV6 set,
and no socket set it, although docs/OPERATIONS.md stamps a `--host` IP address (IPv6 included:
56-digit message ids) as the store host, and the supervisor plans `[::1]` endpoints. Now every
socket sets it (it keeps IPv4 working), so a store listens on an IPv6 loopback and the clients
and commands reach it."""
from __future__ import annotations

import socket

import pytest

from ipc import Admin, Consumer, Producer
from tests.integration.supervised import cli
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_store_on_ipv6_loopback_serves_clients_and_commands(store):
    s = store().start("--host", "::1")
    assert s.address.startswith("tcp://[::1]:"), s.address
    port = int(s.address.rpartition(":")[2])
    with Producer(s.address) as p:
        sent = p.send("Six", b"over ipv6", tags="T", keys="k6")
    assert sent.ok, sent
    assert len(sent.msg_id) == 56                       # an IPv6 store host: 16 + 4 + 8 bytes
    with Admin(s.address) as admin:
        assert admin.hello()["appender"].startswith("tcp://[::1]:")
        got = admin.view_by_id(sent.msg_id)
        assert got is not None and got.body == b"over ipv6" and got.store_host == ("::1", port)
    with Consumer(s.address, "g", "Six", long_poll_ms=0) as c:
        msgs = []
        for _ in range(20):
            msgs += c.poll(200)
            if msgs:
                break
        assert [bytes(m.body) for m in msgs] == [b"over ipv6"]
    out = cli("query", "--topic", "Six", "--key", "k6", "--store", s.root)
    assert out.returncode == 0 and "over ipv6" in out.stdout, out.stdout + out.stderr
    out = cli("stop", "--store", s.root)
    assert out.returncode == 0, out.stderr
    assert s.wait_exit() == 0
