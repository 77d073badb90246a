"""The master's metadata files on its slaves (real `mqstore start` stores): consumer offsets
committed on the master are served by the slave's reader within seconds, a topic created on the
master is known to the slave's reader and appender, and after the master is killed by SIGKILL
and the slave promoted, the new master resumes consumers from the replicated offsets and
delivers the delayed messages still pending from the replicated delayOffset.json (those the
old master delivered are not delivered again) and the timer messages still pending (its wheel
rebuilt from the replicated timer queue). A fake master's garbage or oversized `config`
pushes are refused by a real slave, which keeps following."""
from __future__ import annotations

import pytest

import json
import os
import time

import msgpack
import zmq

from tests.integration.harness import RawClient, wait_for
from tests.integration.replicas import (  # noqa: F401 (stores: the fixture)
    stores, connected_pair, put_all, wait_connected,
    FAST_HA, endpoint, master, pull_bodies, put, slave_of, wait_caught_up,
)
from tests.integration.supervised import SupervisedStore, cli

DELAYS = "1s 2s 8s"


def call(store, service: str, op: str, **fields) -> dict:
    client = RawClient(endpoint(store, service))
    try:
        reply, _ = client.call(op, **fields)
        return reply
    finally:
        client.close()


def fetched(store, group: str, topic: str, queue_id: int) -> int:
    reply = call(store, "reader", "fetch_offset", group=group, topic=topic, queue_id=queue_id)
    assert reply["status"] == "OK", reply
    return reply["offset"]


def topics_of(store) -> dict:
    return {t["topic"]: t["queues"] for t in call(store, "reader", "topics")["topics"]}


def delay_offsets(store) -> dict:
    try:
        with open(store.path("config", "delayOffset.json")) as f:
            return json.load(f)["offsetTable"]
    except (FileNotFoundError, ValueError):
        return {}


@pytest.mark.slow
def test_offsets_and_topics_committed_on_the_master_are_the_slaves(tmp_path, stores):
    m, s = connected_pair(tmp_path, stores, role="ASYNC_MASTER")
    put_all(m, "C", [b"c%d" % i for i in range(10)])
    assert call(m, "appender", "create_topic", topic="Fresh", queues=6)["status"] == "OK"
    assert call(m, "reader", "commit_offset", group="g", topic="C", queue_id=0, offset=7)["status"] == "OK"
    wait_caught_up(s, m)
    assert wait_for(lambda: fetched(s, "g", "C", 0) == 7, 10, 0.1), fetched(s, "g", "C", 0)
    assert wait_for(lambda: topics_of(s).get("Fresh") == 6, 10, 0.1), topics_of(s)
    assert wait_for(lambda: call(s, "appender", "topic_info", topic="Fresh").get("queues") == 6, 10, 0.1)
    # a commit on the slave is the slave's memory only: the master's next copy replaces it
    assert call(s, "reader", "commit_offset", group="g", topic="C", queue_id=0, offset=2)["status"] == "OK"
    assert fetched(s, "g", "C", 0) == 2
    assert call(m, "reader", "commit_offset", group="g", topic="C", queue_id=0, offset=9)["status"] == "OK"
    assert wait_for(lambda: fetched(s, "g", "C", 0) == 9, 10, 0.1)
    with open(m.path("config", "consumer_offsets.json"), "rb") as f:
        assert open(s.path("config", "consumer_offsets.json"), "rb").read() == f.read()
    refused = call(s, "appender", "create_topic", topic="OnSlave", queues=2)
    assert refused["status"] == "ERROR" and "slave" in refused["reason"], refused
    assert s.status()["replication"]["configs_refused"] == 0


@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_promoted_slave_resumes_offsets_and_delivers_pending_delayed_messages(tmp_path, stores):
    m = master(tmp_path, role="SYNC_MASTER", message_delay_level=DELAYS)
    stores.append(m)
    s = slave_of(tmp_path, m, message_delay_level=DELAYS)
    stores.append(s)
    wait_connected(m)
    early = [b"early-%d" % i for i in range(5)]
    late = [b"late-%d" % i for i in range(20)]
    timers = [b"timer-%d" % i for i in range(5)]
    client = RawClient(endpoint(m, "appender"))
    try:
        for body in early:
            assert put(client, "D", body, properties={"DELAY": "1"})["status"] == "PUT_OK"
        # delivered by the master, and the master's delayOffset.json copied to the slave
        assert wait_for(lambda: pull_bodies(m, "D") == early, 20, 0.1), pull_bodies(m, "D")
        assert wait_for(lambda: delay_offsets(s).get("1") == len(early), 10, 0.1), delay_offsets(s)
        for body in late:
            assert put(client, "D", body, properties={"DELAY": "3"})["status"] == "PUT_OK"   # 8 s
        at = int(time.time() * 1000) + 8000
        for body in timers:
            assert put(client, "TM", body, properties={"TIMER_DELIVER_MS": str(at)})["status"] == "PUT_OK"
    finally:
        client.close()
    assert call(m, "reader", "commit_offset", group="cg", topic="D", queue_id=0, offset=3)["status"] == "OK"
    assert wait_for(lambda: fetched(s, "cg", "D", 0) == 3, 10, 0.1)
    wait_caught_up(s, m)
    assert pull_bodies(m, "D") == early and pull_bodies(m, "TM") == []   # the rest still pending
    m.kill()                                         # the whole tree, SIGKILL
    out = cli("promote", "--store", s.root)
    assert out.returncode == 0, out.stdout + out.stderr
    assert fetched(s, "cg", "D", 0) == 3             # consumers resume where they committed
    assert wait_for(lambda: len(pull_bodies(s, "D")) >= len(early) + len(late), 30, 0.2), pull_bodies(s, "D")
    got = pull_bodies(s, "D")
    assert got[:len(early)] == early and sorted(got[len(early):]) == sorted(late), got
    assert got.count(b"early-0") == 1                # the replicated offsets: not delivered again
    # timers: the promoted slave rebuilds its wheel from the replicated timer queue
    assert wait_for(lambda: sorted(pull_bodies(s, "TM")) == timers, 30, 0.2), pull_bodies(s, "TM")
    assert wait_for(lambda: delay_offsets(s).get("3") == len(late), 10, 0.1), delay_offsets(s)
    # the new master's own commits persist again
    assert call(s, "reader", "commit_offset", group="cg", topic="D", queue_id=0, offset=20)["status"] == "OK"
    assert wait_for(lambda: json.load(open(s.path("config", "consumer_offsets.json")))
                    ["offsetTable"].get("D@cg", {}).get("0") == 20, 10, 0.1)


def _config_push(name, data: bytes, length=None) -> list:
    return [msgpack.packb({"op": "config", "name": name, "length": len(data) if length is None else length}),
            data]


@pytest.mark.slow
def test_a_slave_refuses_bad_metadata_from_its_master_and_keeps_following(tmp_path, stores):
    ctx = zmq.Context.instance()
    fake = ctx.socket(zmq.ROUTER)
    fake.setsockopt(zmq.LINGER, 0)
    port = fake.bind_to_random_port("tcp://127.0.0.1")
    try:
        s = SupervisedStore(tmp_path, "slave", **FAST_HA).start("--master", f"127.0.0.1:{port}")
        stores.append(s)
        pid = s.service("ha")["pid"]
        assert fake.poll(20000), "the slave never hand-shook"
        identity, frame0 = fake.recv_multipart()
        hs = msgpack.unpackb(frame0)
        assert hs["op"] == "handshake"
        fake.send_multipart([identity, msgpack.packb(
            {"rid": hs["rid"], "status": "OK", "store_id": "fake-master", "epoch": 1,
             "epochs": [[1, 0, "fake-master"]], "max_offset": hs["max_offset"], "start": hs["max_offset"]})])
        topics = json.dumps({"topicConfigTable": {"Bad": {"topicName": "Bad", "readQueueNums": 3,
                                                          "writeQueueNums": 3, "perm": 6}}}).encode()
        bad = [
            _config_push("topics.json", b"{torn"),                                # not JSON
            _config_push("consumer_offsets.json", b'{"offsetTable": 5}'),          # not a table
            _config_push("epochs.json", b"[]"),                                   # not replicated
            _config_push("../run/endpoints.json", b"{}"),                         # a path
            _config_push("topics.json", b"x", length=64 * 1024 * 1024),           # says oversized
            _config_push("topics.json", b" " * (16 * 1024 * 1024 + 1)),           # is oversized
            _config_push(None, topics),
            [msgpack.packb({"op": "config", "name": "topics.json", "length": len(topics)}), topics, b"extra"],
        ]
        for frames in bad:
            fake.send_multipart([identity, *frames])
        assert wait_for(lambda: s.status()["replication"].get("configs_refused", 0) >= len(bad), 20, 0.1), \
            s.status()["replication"]
        assert not os.path.exists(s.path("config", "topics.json")) or "Bad" not in topics_of(s)
        fake.send_multipart([identity, *_config_push("topics.json", topics)])    # a good copy is taken
        assert wait_for(lambda: topics_of(s).get("Bad") == 3, 10, 0.1), topics_of(s)
        assert wait_for(lambda: s.status()["replication"].get("configs_taken") == 1, 10, 0.1)
        repl = s.status()["replication"]
        assert repl["state"] == "following" and repl["configs_refused"] == len(bad), repl
        assert s.service("ha")["pid"] == pid and s.service("ha")["state"] == "RUNNING"
        shown = cli("status", "--store", s.root).stdout
        assert f"metadata files taken from the master 1, refused {len(bad)}" in shown, shown
    finally:
        fake.close(0)
