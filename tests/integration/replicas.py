"""Real master/slave stores for replication tests: `mqstore start` processes (SupervisedStore)
with tiny segments, short HA intervals so that a dead peer is noticed within a second or
two, helpers to put, pull from any store, read a CommitLog's bytes and wait for a slave, and
the `stores` fixture (a list the test appends its stores to; all are stopped after it)."""
from __future__ import annotations

import json
import os

import pytest

from tests.integration.harness import RawClient, wait_for
from tests.integration.supervised import SupervisedStore, stop_all

FAST_HA = {"ha_send_heartbeat_interval": 200, "ha_housekeeping_interval": 1500, "slave_timeout": 1000}


@pytest.fixture
def stores():
    started = []
    yield started
    stop_all(started)


def master(tmp_path, name="master", role="SYNC_MASTER", **config) -> SupervisedStore:
    return SupervisedStore(tmp_path, name, broker_role=role, **{**FAST_HA, **config}).start()


def slave_of(tmp_path, of: SupervisedStore, name="slave", **config) -> SupervisedStore:
    return SupervisedStore(tmp_path, name, **{**FAST_HA, **config}).start("--master", ha_address(of))


def ha_address(store: SupervisedStore) -> str:
    """HOST:PORT of the store's ha process (run/endpoints.json)."""
    with open(store.path("run", "endpoints.json")) as f:
        return json.load(f)["ha"].removeprefix("tcp://")


def wait_connected(master_: SupervisedStore, slaves: int = 1, timeout: float = 30.0) -> None:
    """Wait until the master counts `slaves` hand-shaken slaves."""
    assert wait_for(lambda: master_.status()["replication"]["slaves_connected"] == slaves,
                    timeout, 0.05), master_.status()["replication"]


def connected_pair(tmp_path, stores: list, **master_config) -> tuple:
    """A master (`master(tmp_path, **master_config)`) and a slave of it, both in `stores`, once
    the master counts the slave."""
    m = master(tmp_path, **master_config)
    stores.append(m)
    s = slave_of(tmp_path, m)
    stores.append(s)
    wait_connected(m)
    return m, s


def put_all(store: SupervisedStore, topic: str, bodies) -> list[dict]:
    """Put each body through the store's appender, one `put` at a time; every reply PUT_OK."""
    client = RawClient(endpoint(store, "appender"))
    try:
        replies = [put(client, topic, body) for body in bodies]
    finally:
        client.close()
    assert [r["status"] for r in replies] == ["PUT_OK"] * len(replies), replies
    return replies


def endpoint(store: SupervisedStore, name: str) -> str:
    hello, _ = store.call("hello")
    return hello[name]


def put(client: RawClient, topic: str, body: bytes, **fields) -> dict:
    reply, _ = client.call("put", [body], topic=topic, queue_id=0, **fields)
    return reply


def pull_bodies(store: SupervisedStore, topic: str, queue_id: int = 0) -> list[bytes]:
    """Every body of a queue, pulled from `store`'s reader in order."""
    client = RawClient(endpoint(store, "reader"))
    out, offset = [], 0
    try:
        while True:
            rep, frames = client.call("pull", group="g", topic=topic, queue_id=queue_id, offset=offset,
                                      max_msgs=256)
            if rep["status"] == "FOUND":
                pos = 0
                for meta in rep["messages"]:
                    out.append(bytes(frames[0][pos:pos + meta["body_size"]]))
                    pos += meta["body_size"]
            elif rep["status"] != "NO_MATCHED_MESSAGE":
                return out
            offset = rep["next_begin_offset"]
    finally:
        client.close()


def positions(store: SupervisedStore) -> dict:
    return store.status()["positions"]


def wait_caught_up(slave: SupervisedStore, master_: SupervisedStore, timeout: float = 60.0) -> int:
    """Wait until the slave's log (and its consume queues) reach the master's WROTE; that offset."""
    end = positions(master_)["wrote"]
    assert wait_for(lambda: positions(slave)["dispatched"] >= end, timeout, 0.05), \
        (positions(slave), end, slave.status().get("replication"))
    return end


def commitlog_bytes(root: str, upto: int, segment: int) -> bytes:
    """The CommitLog's bytes [0, upto) of the store at `root`."""
    out = bytearray()
    start = 0
    while start < upto:
        with open(os.path.join(root, "commitlog", f"{start:020d}"), "rb") as f:
            out += f.read(min(segment, upto - start))
        start += segment
    return bytes(out)
