"""Failover by hand between real stores: the master's whole process tree killed by SIGKILL,
the slave promoted (`mqstore promote`), every acknowledged message readable on it and its
CommitLog byte-identical to the old master's up to the last acknowledged offset; then the old
master rejoins (`mqstore follow`), truncates the tail no slave acknowledged, and both logs are
byte-identical. And three stores: two slaves of one master, one promoted, the other follows it."""
from __future__ import annotations

import json
import random
import threading
import time

import pytest

from core.log.epochs import EpochFile
from core.files.fileops import REAL_FILE_OPS
from tests.integration.harness import RawClient, wait_for
from tests.integration.replicas import (  # noqa: F401 (stores: the fixture)
    stores, connected_pair, put_all,
    commitlog_bytes, endpoint, ha_address, master, positions, pull_bodies, put, slave_of, wait_caught_up,
)
from tests.integration.supervised import TINY_TOML, SupervisedStore, cli

SEGMENT = TINY_TOML["mapped_file_size_commitlog"]


def epochs(store) -> list:
    return [list(e) for e in EpochFile(store.path("config"), REAL_FILE_OPS).load().entries]


def promote(store, *extra) -> None:
    out = cli("promote", "--store", store.root, *extra)
    assert out.returncode == 0, out.stdout + out.stderr


def follow(store, of) -> None:
    out = cli("follow", "--store", store.root, "--master", ha_address(of))
    assert out.returncode == 0, out.stdout + out.stderr


def produce(address: str, acked: list, stop: threading.Event, topic: str) -> None:
    """Put until stopped or the store is gone; record (body, end offset) of every PUT_OK."""
    client = RawClient(address)
    i = 0
    try:
        while not stop.is_set():
            body = b"m%06d" % i
            try:
                reply = put(client, topic, body, timeout=5)
            except TimeoutError:
                return
            if reply["status"] == "PUT_OK":
                acked.append((body, reply["phys_offset"]))
            i += 1
    finally:
        client.close()


@pytest.mark.slow
def test_master_killed_slave_promoted_old_master_rejoins(tmp_path, stores):
    m, s = connected_pair(tmp_path, stores, role="SYNC_MASTER")
    acked, stop = [], threading.Event()
    producer = threading.Thread(target=produce, args=(endpoint(m, "appender"), acked, stop, "F"))
    producer.start()
    assert wait_for(lambda: len(acked) >= 300, 60, 0.01)
    time.sleep(random.uniform(0, 0.5))
    m.kill()                                     # the supervisor; its services die with it
    stop.set()
    producer.join(30)
    last_acked = acked[-1][1]                    # where the last acknowledged record starts
    promote(s)
    repl = s.status()["replication"]
    assert repl["role"] == "ASYNC_MASTER" and repl["epoch"] == 2
    assert epochs(s)[-1][0] == 2
    bodies = pull_bodies(s, "F")
    assert bodies[:len(acked)] == [b for b, _ in acked]          # every acknowledged one, in order
    wrote = positions(s)["wrote"]
    assert wrote > last_acked                    # the whole last acknowledged record is there
    assert commitlog_bytes(s.root, wrote, SEGMENT) == commitlog_bytes(m.root, wrote, SEGMENT)
    put_all(s, "F", [b"new master %d" % i for i in range(20)])
    # the old master comes back as a master on its own, then follows the new one
    old = SupervisedStore(tmp_path, "master", root=m.root, broker_role="ASYNC_MASTER",
                          ha_send_heartbeat_interval=200, ha_housekeeping_interval=1500)
    old.start()
    stores.append(old)
    follow(old, s)
    end = wait_caught_up(old, s)
    assert commitlog_bytes(old.root, end, SEGMENT) == commitlog_bytes(s.root, end, SEGMENT)
    assert pull_bodies(old, "F") == pull_bodies(s, "F")
    assert epochs(old) == epochs(s)


@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_diverged_tail_is_truncated_when_the_old_master_follows(tmp_path, stores):
    m, s = connected_pair(tmp_path, stores, role="SYNC_MASTER")
    client = RawClient(endpoint(m, "appender"))
    try:
        assert [put(client, "D", b"shared %d" % i)["status"] for i in range(10)] == ["PUT_OK"] * 10
        shared_end = wait_caught_up(s, m)
        assert s.stop() == 0                    # the slave goes (and says so: `bye`)...
        assert wait_for(lambda: m.status()["replication"]["slaves_connected"] == 0, 1.0, 0.02)
        tail = [put(client, "D", b"never acknowledged %d" % i)["status"] for i in range(6)]
        assert set(tail) == {"SLAVE_NOT_AVAILABLE"}, tail       # ...and the master takes puts alone
    finally:
        client.close()
    diverged_end = positions(m)["wrote"]
    assert diverged_end > shared_end
    m.kill()
    s.start("--master", ha_address(m))           # the slave again, its master dead...
    promote(s)                                   # ...so it is promoted: epoch 2 from shared_end
    assert epochs(s)[-1][:2] == [2, shared_end]
    put_all(s, "D", [b"epoch two %d" % i for i in range(50)])
    old = SupervisedStore(tmp_path, "master", root=m.root, broker_role="ASYNC_MASTER",
                          ha_send_heartbeat_interval=200, ha_housekeeping_interval=1500)
    old.start()
    stores.append(old)
    follow(old, s)
    end = wait_caught_up(old, s, timeout=90)
    assert commitlog_bytes(old.root, end, SEGMENT) == commitlog_bytes(s.root, end, SEGMENT)
    expected = [b"shared %d" % i for i in range(10)] + [b"epoch two %d" % i for i in range(50)]
    assert pull_bodies(old, "D") == expected == pull_bodies(s, "D")
    with open(old.path("logs", "supervisor.log")) as f:
        assert f"truncate it to {shared_end}" in f.read()
    check = old.stop()
    assert check == 0
    result = cli("check", "--store", old.root)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_three_stores_one_slave_promoted_the_other_follows_it(tmp_path, stores):
    m = master(tmp_path, role="ASYNC_MASTER")
    stores.append(m)
    a = slave_of(tmp_path, m, "a")
    b = slave_of(tmp_path, m, "b")
    stores += [a, b]
    assert wait_for(lambda: m.status()["replication"]["slaves_connected"] == 2, 30, 0.05)
    put_all(m, "Three", [b"%d" % i for i in range(100)])
    wait_caught_up(a, m)
    wait_caught_up(b, m)
    m.kill()
    promote(a)
    follow(b, a)
    client = RawClient(endpoint(a, "appender"))
    try:
        assert [put(client, "Three", b"%d" % i)["status"] for i in range(100, 150)] == ["PUT_OK"] * 50
    finally:
        client.close()
    end = wait_caught_up(b, a)
    assert commitlog_bytes(b.root, end, SEGMENT) == commitlog_bytes(a.root, end, SEGMENT)
    assert pull_bodies(b, "Three") == [b"%d" % i for i in range(150)]
    assert json.dumps(epochs(b)) == json.dumps(epochs(a))


def produce_async(address: str, acked: list, stop: threading.Event, topic: str, count: int) -> None:
    """`count` puts through the client library with a window in flight; every PUT_OK body is
    recorded with its physical offset. Stops at the first failure once the store is gone."""
    from ipc import Producer
    with Producer(address) as p:
        pending = []
        for i in range(count):
            if stop.is_set():
                break
            try:
                pending.append((b"s%06d" % i, p.send_async(topic, b"s%06d" % i, queue_id=0, timeout=10)))
            except (TimeoutError, ConnectionError):
                break
            while len(pending) > 256 or (pending and pending[0][1].done()):
                body, fut = pending.pop(0)
                try:
                    result = fut.result(30)
                except Exception:
                    return
                if result.status.name == "PUT_OK":
                    acked.append((body, result.phys_offset))
        for body, fut in pending:
            try:
                result = fut.result(30)
            except Exception:
                return
            if result.status.name == "PUT_OK":
                acked.append((body, result.phys_offset))


@pytest.mark.slow
def test_50k_sync_master_puts_master_killed_at_random_nothing_acknowledged_lost(tmp_path, stores):
    m, s = connected_pair(tmp_path, stores, role="SYNC_MASTER")
    acked, stop = [], threading.Event()
    producer = threading.Thread(target=produce_async, args=(m.address, acked, stop, "Big", 50_000))
    producer.start()
    kill_at = random.randint(5_000, 45_000)
    assert wait_for(lambda: len(acked) >= kill_at or not producer.is_alive(), 600, 0.01)
    m.kill()
    stop.set()
    producer.join(120)
    assert len(acked) >= kill_at
    promote(s)
    bodies = pull_bodies(s, "Big")
    assert bodies[:len(acked)] == [b for b, _ in acked]
    wrote = positions(s)["wrote"]
    assert wrote > acked[-1][1]
    assert commitlog_bytes(s.root, wrote, SEGMENT) == commitlog_bytes(m.root, wrote, SEGMENT)
