"""Faults on replicating stores (real `mqstore start` processes): a slave killed by SIGKILL
while the master streams and started again catches up; the ha process killed by SIGKILL on
either side is restarted by the supervisor and replication resumes with nothing lost; garbage
frames on the master's replication port get error answers and crash nothing; and the handshake's
safety rules (a store's own id, a log without history, an acknowledgement beyond what was
sent, a peer with a newer epoch fencing the master); a slave whose disk fills stops
acknowledging, the master reports it behind, and it catches up once space is back."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import msgpack
import pytest
import zmq

from tests.integration.harness import RawClient, wait_for
from tests.integration.replicas import (  # noqa: F401 (stores: the fixture)
    stores, connected_pair, wait_connected,
    commitlog_bytes, endpoint, ha_address, master, positions, pull_bodies, put, slave_of, wait_caught_up,
)
from tests.integration.supervised import TINY_TOML, pid_gone

SEGMENT = TINY_TOML["mapped_file_size_commitlog"]


def put_range(store, topic: str, lo: int, hi: int, pad: int = 200) -> None:
    client = RawClient(endpoint(store, "appender"))
    try:
        for i in range(lo, hi):
            reply = put(client, topic, b"%06d" % i + b"-" * pad, wait=False)
            assert reply["status"] == "PUT_OK", reply
    finally:
        client.close()


def bodies(lo: int, hi: int, pad: int = 200) -> list[bytes]:
    return [b"%06d" % i + b"-" * pad for i in range(lo, hi)]


@pytest.mark.slow
def test_a_slave_killed_mid_stream_catches_up_when_started_again(tmp_path, stores):
    m = master(tmp_path, role="ASYNC_MASTER")
    stores.append(m)
    s = slave_of(tmp_path, m)
    stores.append(s)
    writer = threading.Thread(target=put_range, args=(m, "K", 0, 3000))
    writer.start()
    assert wait_for(lambda: positions(s)["wrote"] > 4 * SEGMENT, 60, 0.01)
    s.kill()                                         # mid-stream: the whole slave at once
    writer.join(120)
    s.start("--master", ha_address(m))
    end = wait_caught_up(s, m, timeout=120)
    assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
    assert pull_bodies(s, "K") == bodies(0, 3000)


@pytest.mark.parametrize("side", ["master", "slave"])
@pytest.mark.slow
def test_the_ha_process_killed_is_restarted_and_replication_resumes(tmp_path, stores, side):
    m, s = connected_pair(tmp_path, stores, role="SYNC_MASTER")
    put_range(m, "H", 0, 500)
    victim = m if side == "master" else s
    pid = victim.service("ha")["pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: pid_gone(pid), 10, 0.01)
    put_range(m, "H", 500, 1000)                     # WAIT false: stored while ha is down
    victim.wait_service("ha", "RUNNING", timeout=60)
    assert wait_for(lambda: m.status()["replication"]["slaves_connected"] == 1, 60, 0.05)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert put(client, "H", b"synced again")["status"] == "PUT_OK"
    finally:
        client.close()
    end = wait_caught_up(s, m)
    assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
    assert pull_bodies(s, "H") == bodies(0, 1000) + [b"synced again"]
    assert victim.service("ha")["restarts"] >= 1


GARBAGE = [
    [b"\xff\x00not msgpack"],
    [msgpack.packb([1, 2, 3])],
    [msgpack.packb({"op": "handshake", "rid": 1})],
    [msgpack.packb({"op": "handshake", "rid": 2, "version": 1, "store_id": "x", "epochs": [[5, 0]],
                    "max_offset": 0})],
    [msgpack.packb({"op": "handshake", "rid": 3, "version": 99, "store_id": "x", "epochs": [], "max_offset": 0})],
    [msgpack.packb({"op": "handshake", "rid": 4, "version": 1, "store_id": "x", "epochs": [],
                    "max_offset": -5})],
    [msgpack.packb({"op": "ack", "rid": 0, "offset": 10**15})],
    [msgpack.packb({"op": "ack", "rid": 0, "offset": "many"})],
    [msgpack.packb({"op": "nonsense", "rid": 5})],
    [b""],
    [msgpack.packb({"op": "ack", "rid": 0, "offset": 1}), b"extra frame"],
]


def test_garbage_on_the_replication_port_crashes_nothing(tmp_path, stores):
    m = master(tmp_path, role="SYNC_MASTER")
    stores.append(m)
    pid = m.service("ha")["pid"]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{ha_address(m)}")
    answers = []
    try:
        for frames in GARBAGE:
            sock.send_multipart(frames)
            if sock.poll(2000):
                answers.append(msgpack.unpackb(sock.recv_multipart()[0]))
    finally:
        sock.close(0)
    assert answers and all(a.get("status") == "ERROR" or a.get("op") == "reset" for a in answers), answers
    host, port = ha_address(m).rsplit(":", 1)
    raw = socket.create_connection((host, int(port)))
    raw.sendall(os.urandom(4096))                    # not even ZMTP
    raw.close()
    assert m.service("ha")["pid"] == pid and m.service("ha")["state"] == "RUNNING"
    s = slave_of(tmp_path, m)                        # and a real slave is still served
    stores.append(s)
    wait_connected(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert put(client, "G", b"after garbage")["status"] == "PUT_OK"
    finally:
        client.close()
    assert m.service("ha")["pid"] == pid


def _handshake(sock, rid: int, store_id: str, epochs, max_offset: int) -> dict:
    sock.send_multipart([msgpack.packb({"op": "handshake", "rid": rid, "version": 1, "store_id": store_id,
                                        "epochs": epochs, "max_offset": max_offset})])
    while True:
        assert sock.poll(5000), "no answer to the handshake"
        msg = msgpack.unpackb(sock.recv_multipart()[0])
        if msg.get("rid") == rid:
            return msg


def test_handshake_safety_rules(tmp_path, stores):
    from core.log.epochs import EpochFile
    from core.files.fileops import REAL_FILE_OPS
    m = master(tmp_path, role="ASYNC_MASTER")
    stores.append(m)
    put_range(m, "S", 0, 10)
    own = EpochFile(m.path("config"), REAL_FILE_OPS).load()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://{ha_address(m)}")
    try:
        itself = _handshake(sock, 1, own.store_id, [], 0)
        assert itself["status"] == "ERROR" and "itself" in itself["reason"]
        stranger = _handshake(sock, 2, "stranger", [], 500)          # a log, no history
        assert stranger["status"] == "ERROR" and "no epoch history" in stranger["reason"]
        fresh = _handshake(sock, 3, "fresh", [], 0)
        assert fresh["status"] == "OK" and fresh["start"] == 0 and fresh["epoch"] == 1
        sock.send_multipart([msgpack.packb({"op": "ack", "rid": 0, "offset": 10**12})])   # never sent
        while True:
            assert sock.poll(5000)
            msg = msgpack.unpackb(sock.recv_multipart()[0])
            if msg.get("op") == "reset":
                assert "beyond" in msg["reason"]
                break
        assert wait_for(lambda: m.status()["replication"]["slaves_connected"] == 0, 10, 0.05)
        client = RawClient(endpoint(m, "appender"))
        try:
            assert put(client, "S", b"still a master")["status"] == "PUT_OK"
        finally:
            client.close()
        newer = _handshake(sock, 4, "usurper", [[1, 0, own.store_id], [2, 100, "usurper"]], 200)
        assert newer["status"] == "ERROR" and "newer" in newer["reason"]
    finally:
        sock.close(0)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert put(client, "S", b"fenced")["status"] == "SERVICE_NOT_AVAILABLE"
    finally:
        client.close()
    assert m.status()["replication"]["fenced"] is True
    assert m.status()["puts"] == "refused (fenced)"
    with open(m.path("logs", "ha.log")) as f:
        text = f.read()
    assert "refused slave usurper" in text and "this master is stale" in text


@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_a_slave_whose_disk_fills_stops_acknowledging_and_resumes_when_space_is_back(tmp_path, stores):
    from tests.integration.harness import small_tmpfs
    from tests.integration.supervised import SupervisedStore
    m = master(tmp_path, role="ASYNC_MASTER")
    stores.append(m)
    with small_tmpfs(tmp_path, "4m") as mnt:
        filler = mnt / "filler"
        filler.write_bytes(b"\xaa" * (2560 << 10))
        s = SupervisedStore(tmp_path, "slave", root=str(mnt / "slave"), clean_file_forcibly_enable=False,
                            ha_send_heartbeat_interval=200, ha_housekeeping_interval=1500)
        s.start("--master", ha_address(m))
        stores.append(s)
        put_range(m, "Full", 0, 3000, pad=1000)          # about 3 MiB: more than the slave has
        end = positions(m)["wrote"]
        assert wait_for(lambda: "disk_full" in s.status()["flags"], 60, 0.05)
        time.sleep(1.0)
        behind = m.status()["replication"]["slaves"]
        assert behind and behind[0]["acked"] < end and behind[0]["lag_bytes"] > 0
        still = m.status()["replication"]["slaves"]
        assert not still or still[0]["acked"] == behind[0]["acked"]          # it stopped acknowledging
        assert s.service("ha")["state"] == "RUNNING"                         # no crash
        filler.unlink()                                                      # space is back
        wait_caught_up(s, m, timeout=120)
        assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
        assert pull_bodies(s, "Full") == bodies(0, 3000, pad=1000)
        assert s.stop() == 0
