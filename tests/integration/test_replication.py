"""Master/slave replication between real stores (`mqstore start` processes) on localhost:
RocketMQ's HATest scenarios (10 puts read back from the slave; SYNC_MASTER with and without a
slave; ASYNC_MASTER), a slave that outlives its master's restart, replication metrics, a
slave started empty against a master of many segments, a slave
serving pulls in queue order, and the CommitLogs byte-identical."""
from __future__ import annotations

import time

import pytest

from tests.integration.harness import RawClient, wait_for
from tests.integration.replicas import (  # noqa: F401 (stores: the fixture)
    stores, put_all, wait_connected,
    commitlog_bytes, endpoint, master, positions, pull_bodies, put, slave_of, wait_caught_up,
)
from tests.integration.supervised import TINY_TOML, cli

SEGMENT = TINY_TOML["mapped_file_size_commitlog"]


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.slow
def test_ten_puts_are_read_back_from_the_slave_and_the_logs_are_identical(tmp_path, stores, flush):
    m = master(tmp_path, role="SYNC_MASTER", flush_disk_type=flush)
    stores.append(m)
    s = slave_of(tmp_path, m, flush_disk_type=flush)
    stores.append(s)
    wait_connected(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        replies = [put(client, "HA", b"message %d" % i) for i in range(10)]
    finally:
        client.close()
    assert [r["status"] for r in replies] == ["PUT_OK"] * 10, replies
    assert [r["queue_offset"] for r in replies] == list(range(10))
    end = wait_caught_up(s, m)
    assert pull_bodies(s, "HA") == [b"message %d" % i for i in range(10)]
    assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
    repl = s.status()["replication"]
    assert repl["role"] == "SLAVE" and repl["connected"] and repl["epoch"] == 1
    assert wait_for(lambda: [x["acked"] for x in m.status()["replication"].get("slaves", [])] == [end], 10, 0.05)
    slave_put = s.put("HA", b"refused", queue_id=0)
    assert slave_put["status"] == "SERVICE_NOT_AVAILABLE"
    shown = cli("status", "--store", s.root).stdout
    assert "replication: SLAVE  epoch 1" in shown and "following, 0 B behind" in shown, shown
    shown = cli("status", "--store", m.root).stdout
    assert "replication: SYNC_MASTER  epoch 1" in shown and f"{end} B" not in shown, shown


@pytest.mark.slow
def test_sync_master_without_its_slave_never_answers_put_ok(tmp_path, stores):
    m = master(tmp_path, role="SYNC_MASTER")
    stores.append(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert put(client, "NoSlave", b"alone")["status"] == "SLAVE_NOT_AVAILABLE"
        assert put(client, "NoSlave", b"no wait", wait=False)["status"] == "PUT_OK"
        s = slave_of(tmp_path, m)
        stores.append(s)
        wait_connected(m)
        assert put(client, "NoSlave", b"with a slave")["status"] == "PUT_OK"
        s.kill()                                   # the slave's whole store goes at once
        statuses, gone = set(), 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "SLAVE_NOT_AVAILABLE" not in statuses:
            statuses.add(put(client, "NoSlave", b"slave gone", timeout=15)["status"])
            gone += 1
        assert statuses <= {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"}, statuses
        assert "SLAVE_NOT_AVAILABLE" in statuses      # once the connection is dropped
    finally:
        client.close()
    # Every message was stored all the same, and is dispatched soon after its answer (the
    # reput runs on its own: under CI's load the last ones were not in the queue yet).
    assert wait_for(lambda: len(pull_bodies(m, "NoSlave")) >= 3 + gone, 20, 0.05)
    bodies = pull_bodies(m, "NoSlave")
    assert bodies[:3] == [b"alone", b"no wait", b"with a slave"] and set(bodies[3:]) == {b"slave gone"}


def test_async_master_answers_put_ok_with_or_without_a_slave(tmp_path, stores):
    m = master(tmp_path, role="ASYNC_MASTER")
    stores.append(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert [put(client, "A", b"%d" % i)["status"] for i in range(5)] == ["PUT_OK"] * 5
        s = slave_of(tmp_path, m)
        stores.append(s)
        assert [put(client, "A", b"%d" % i)["status"] for i in range(5, 10)] == ["PUT_OK"] * 5
        wait_caught_up(s, m)
        assert pull_bodies(s, "A") == [b"%d" % i for i in range(10)]
        s.kill()
        assert [put(client, "A", b"%d" % i)["status"] for i in range(10, 15)] == ["PUT_OK"] * 5
    finally:
        client.close()


@pytest.mark.slow
def test_an_empty_slave_catches_up_a_master_of_many_segments_and_serves_every_queue(tmp_path, stores):
    # 1 KiB chunks: records split across chunks, and far more chunks than the window of
    # unacknowledged ones (services/ha/master.WINDOW_CHUNKS)
    m = master(tmp_path, role="ASYNC_MASTER", ha_transfer_batch_size=1000)
    stores.append(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        for i in range(2000):                      # about 16 segments of 16 KiB
            reply, _ = client.call("put", [b"b%05d" % i + b"." * 100], topic="Many", queue_id=i % 3)
            assert reply["status"] == "PUT_OK", reply
    finally:
        client.close()
    assert positions(m)["wrote"] > 10 * SEGMENT
    s = slave_of(tmp_path, m)
    stores.append(s)
    end = wait_caught_up(s, m)
    assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
    for q in range(3):
        assert pull_bodies(s, "Many", q) == [b"b%05d" % i + b"." * 100 for i in range(q, 2000, 3)]
    check = s.stop()
    assert check == 0
    result = cli("check", "--store", s.root)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_replication_metrics(tmp_path, stores):
    import urllib.request
    from tests.integration.replicas import FAST_HA
    from tests.integration.supervised import SupervisedStore
    m = SupervisedStore(tmp_path, "master", broker_role="SYNC_MASTER", **FAST_HA).start("--metrics-port", "0")
    stores.append(m)
    s = slave_of(tmp_path, m)
    stores.append(s)
    wait_connected(m)
    put_all(m, "Met", [b"%d" % i for i in range(20)])
    url = m.status()["supervisor"]["metrics"]

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    assert wait_for(lambda: "mqstore_replication_slaves 1.0" in scrape()
                    and 'operation="replica",service="appender"' in scrape(), 20, 0.2), scrape()
    text = scrape()
    assert "mqstore_replication_epoch 1.0" in text and "mqstore_replication_lag_bytes{" in text
    assert 'mqstore_replication_bytes_total{direction="sent"}' in text


@pytest.mark.slow
def test_a_slave_survives_its_masters_restart(tmp_path, stores):
    from tests.integration.replicas import FAST_HA
    from tests.integration.supervised import SupervisedStore, free_port_block
    port = free_port_block()
    while not _free(port + 1):
        port = free_port_block()
    m = SupervisedStore(tmp_path, "master", broker_role="SYNC_MASTER", **FAST_HA).start("--port", str(port))
    stores.append(m)
    s = slave_of(tmp_path, m)
    stores.append(s)
    wait_connected(m)
    put_all(m, "R", [b"%d" % i for i in range(20)])
    assert m.stop() == 0
    m.start("--port", str(port))
    wait_connected(m)
    client = RawClient(endpoint(m, "appender"))
    try:
        assert [put(client, "R", b"%d" % i)["status"] for i in range(20, 40)] == ["PUT_OK"] * 20
    finally:
        client.close()
    end = wait_caught_up(s, m)
    assert commitlog_bytes(s.root, end, SEGMENT) == commitlog_bytes(m.root, end, SEGMENT)
    assert pull_bodies(s, "R") == [b"%d" % i for i in range(40)]
    assert m.status()["replication"]["epoch"] == 1          # a restart is no new epoch


def _free(port: int) -> bool:
    import socket
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
