"""The store host of a supervised store (RocketMQ: the broker's own address and listening port)
is the address it listens at (the front door's, given to clients), so that every record's
STOREHOST and every offset message id (4 bytes IPv4 + 4 bytes port + 8 bytes CommitLog
offset, as hex) carry the port the store was started with; a store_host set in the
configuration wins; and a restart on another port is not refused."""
from __future__ import annotations

import json
import socket

import pytest

from ipc.admin import Admin
from tests.integration.supervised import SupervisedStore, free_port_block
from tests.integration.supervised import supervised_stores  # noqa: F401 (the `store` fixture)



def decode_msg_id(msg_id: str) -> tuple[str, int, int]:
    raw = bytes.fromhex(msg_id)
    assert len(raw) == 16, msg_id
    return socket.inet_ntoa(raw[:4]), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")


def appender_port(s: SupervisedStore) -> int:
    hello, _ = s.call("hello")
    return int(hello["appender"].rpartition(":")[2])


def stored_host(s: SupervisedStore, msg_id: str) -> tuple:
    """The store_host of the message with `msg_id`, read back by id."""
    with Admin(s.address) as admin:
        msg = admin.view_by_id(msg_id)
    assert msg is not None and msg.msg_id == msg_id.upper()
    return msg.store_host


def sent_and_stored(s: SupervisedStore, topic: str) -> tuple[tuple, tuple, str]:
    """((ip, port, offset) of a put's msg_id, the store_host of that message read back, the id)."""
    reply = s.put(topic, b"where was I stored")
    assert reply["status"] == "PUT_OK", reply
    ip, port, offset = decode_msg_id(reply["msg_id"])
    assert offset == reply["phys_offset"]
    return (ip, port, offset), stored_host(s, reply["msg_id"]), reply["msg_id"]


@pytest.mark.slow
def test_msg_id_and_store_host_carry_the_port_the_store_listens_at(store):
    port = free_port_block()
    s = store().start("--port", str(port))
    assert s.address == f"tcp://127.0.0.1:{port}" and appender_port(s) == port + 2
    (ip, id_port, _), host, first_id = sent_and_stored(s, "Here")
    assert (ip, id_port) == ("127.0.0.1", port)
    assert host == ("127.0.0.1", port)
    with open(s.path("run", "config.json")) as f:
        assert json.load(f)["store_host"] == f"127.0.0.1:{port}"
    assert s.stop() == 0

    other = free_port_block()                  # a restart on another port is not refused
    s.start("--port", str(other))
    (_, new_port, _), new_host, _ = sent_and_stored(s, "Here")
    assert new_port == other and new_host == ("127.0.0.1", other)
    assert stored_host(s, first_id) == ("127.0.0.1", port)         # a record keeps its host
    assert s.stop() == 0


@pytest.mark.slow                              # three store starts; CI runs it with the slow cases
def test_port_0_stamps_the_port_picked_and_a_configured_store_host_wins(store):
    s = store("picked").start()                # --port 0: free ports picked at start
    (ip, id_port, _), host, _ = sent_and_stored(s, "Picked")
    assert (ip, id_port) == ("127.0.0.1", int(s.address.rpartition(":")[2])) and host == (ip, id_port)
    assert s.stop() == 0

    fixed = store("fixed", store_host="10.1.2.3:9876").start()
    (ip, id_port, _), host, _ = sent_and_stored(fixed, "Fixed")
    assert (ip, id_port) == ("10.1.2.3", 9876) and host == ("10.1.2.3", 9876)
    assert fixed.stop() == 0
