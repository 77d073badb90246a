"""Secure mode against a real `mqstore start --secure` (issue 32): who is admitted (no key, an
unknown key, a revoked key get no answer and store nothing), what each role may do (FORBIDDEN
beyond it), a key revoked while connected, the wire not readable (a tcp proxy written here
captures the bytes of a put), a raw pyzmq client with a key, the Python clients (blocking and
asyncio) and the CLI with keys, and replication between secure stores (a slave with an
unknown key cannot follow)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading

import pytest
import zmq.auth

import ipc
import ipc.aio
from ipc.protocol import ErrorCode
from tests.integration.harness import wait_for
from tests.integration.replicas import FAST_HA, ha_address
from tests.integration.secure_stores import CurveClient, SecureStore
from tests.integration.supervised import SupervisedStore, cli

NO_ANSWER_S = 1.5


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """One secure store for the module, with keys: admin, prod (put to any topic), cons
    (read `orders*` in any group), limited (put to `orders` only), gone (revoked before the
    start)."""
    s = SecureStore(tmp_path_factory.mktemp("sec"))
    s.keys = {"admin": s.new_key("admin", "admin"), "prod": s.new_key("prod", "producer"),
              "cons": s.new_key("cons", "consumer", "--topics", "orders*"),
              "limited": s.new_key("limited", "producer", "--topics", "orders"),
              "gone": s.new_key("gone", "producer")}
    s.revoke("gone")
    s.start()
    yield s
    s.ensure_stopped()


def _wrote(s: SecureStore) -> int:
    reply, _ = s.call("front", s.keys["admin"], "status")
    return reply["positions"]["wrote"]


def _unknown_key(tmp_path) -> str:
    _, secret = zmq.auth.create_certificates(str(tmp_path), "stranger")
    return secret


@pytest.mark.slow
def test_no_key_an_unknown_key_and_a_revoked_key_get_no_answer_and_store_nothing(secure, tmp_path):
    before = _wrote(secure)
    stranger = _unknown_key(tmp_path)
    requests = [(service, key, op, frames, fields)
                for key in (None, stranger, secure.keys["gone"])
                for service, op, frames, fields in (("front", "hello", (), {}),
                                                    ("appender", "put", (b"intruder",), {"topic": "orders"}),
                                                    ("reader", "topics", (), {}))]
    admitted = ("front", secure.keys["admin"], "hello", (), {})          # the one to be answered
    got = secure.answered(requests + [admitted], timeout=NO_ANSWER_S)     # each waited NO_ANSWER_S
    assert [request for request, _ in got] == [admitted], got
    assert got[0][1][0]["status"] == "OK"
    assert _wrote(secure) == before
    assert stat.S_IMODE(os.stat(os.path.join(secure.root, "run")).st_mode) == 0o700
    with open(os.path.join(secure.root, "logs", "supervisor.log")) as f:
        log = f.read()
    assert "refused a client" in log
    with pytest.raises(TimeoutError):                 # PeerUnreachable: the handshake never succeeds
        ipc.Admin(store=secure.root, key_file=stranger, timeout=NO_ANSWER_S).topics()


def test_a_producer_key_puts_but_cannot_read_administer_or_stop(secure):
    key = secure.keys["prod"]
    reply, _ = secure.call("appender", key, "put", b"from-prod", topic="orders")
    assert reply["status"] == "PUT_OK"
    for service, op, fields in (("reader", "pull", {"group": "g", "topic": "orders", "queue_id": 0, "offset": 0}),
                                ("reader", "query_by_key", {"topic": "orders", "key": "k"}),
                                ("reader", "view_by_id", {"msg_id": "00" * 16}),
                                ("appender", "create_topic", {"topic": "new", "queues": 2}),
                                ("front", "status", {}), ("front", "stop", {}),
                                ("front", "promote", {})):
        reply, _ = secure.call(service, key, op, **fields)
        assert reply["status"] == "ERROR" and reply["code"] == ErrorCode.FORBIDDEN, (op, reply)
    assert secure.store.proc.poll() is None
    with open(os.path.join(secure.root, "logs", "appender.log")) as f:
        assert "refused 'create_topic' from key prod" in f.read()


def test_a_topic_list_limits_a_producer(secure):
    key = secure.keys["limited"]
    assert secure.call("appender", key, "put", b"ok", topic="orders")[0]["status"] == "PUT_OK"
    before = _wrote(secure)
    reply, _ = secure.call("appender", key, "put_batch", b"nono", topic="payments", sizes=[2, 2])
    assert reply["code"] == ErrorCode.FORBIDDEN
    assert _wrote(secure) == before


def test_a_consumer_key_reads_its_topics_and_cannot_put(secure):
    key = secure.keys["cons"]
    before = _wrote(secure)
    reply, _ = secure.call("appender", key, "put", b"from-cons", topic="orders")
    assert reply["code"] == ErrorCode.FORBIDDEN
    assert _wrote(secure) == before
    reply, _ = secure.call("reader", key, "pull", group="g", topic="payments", queue_id=0, offset=0)
    assert reply["code"] == ErrorCode.FORBIDDEN
    secure.call("appender", secure.keys["prod"], "put", b"for-cons", topic="orders-eu", queue_id=0)
    assert wait_for(lambda: secure.call("reader", key, "pull", group="g", topic="orders-eu", queue_id=0,
                                        offset=0)[0]["status"] == "FOUND", 10, 0.05)
    reply, _ = secure.call("reader", key, "commit_offset", group="g", topic="orders-eu", queue_id=0, offset=1)
    assert reply["status"] == "OK"


def test_the_python_clients_with_keys(secure):
    with ipc.Producer(store=secure.root, key_file=secure.keys["prod"],
                      server_key_file=secure.server_key) as producer:
        result = producer.send("orders-py", b"python-client")
        assert result.status == "PUT_OK"
        refused = ipc.Producer(store=secure.root, key_file=secure.keys["cons"]).send("orders-py", b"x")
        assert refused.error_code == ErrorCode.FORBIDDEN
    consumer = ipc.Consumer(store=secure.root, group="py", topic="orders-py", queues=[result.queue_id],
                            key_file=secure.keys["cons"])
    try:
        bodies = []
        assert wait_for(lambda: bodies.extend(m.body for m in consumer.poll(500)) or bodies, 15, 0)
        assert bodies == [b"python-client"]
    finally:
        consumer.close()

    async def aio():
        async with ipc.aio.Producer(store=secure.root, key_file=secure.keys["prod"]) as p:
            assert (await p.send("orders-aio", b"async")).status == "PUT_OK"
        async with ipc.aio.Admin(store=secure.root, key_file=secure.keys["admin"]) as admin:
            assert "orders-aio" in await admin.topics()
    asyncio.run(asyncio.wait_for(aio(), 60))


def test_the_cli_with_a_key_and_with_the_stores_own(secure):
    done = cli("produce", "--store", secure.root, "--key", secure.keys["cons"], "--topic", "orders", "--body", "x")
    assert done.returncode == 1 and "FORBIDDEN" in done.stdout + done.stderr, (done.stdout, done.stderr)
    done = cli("produce", "--store", secure.root, "--key", secure.keys["prod"], "--topic", "orders", "--body", "x")
    assert done.returncode == 0, done.stderr
    done = cli("status", "--store", secure.root, "--json")        # the store's own key
    assert done.returncode == 0, done.stderr
    done = cli("status", "--address", secure.store.address, "--timeout", "1")
    assert done.returncode == 1


def test_a_key_revoked_while_connected_is_refused_at_its_next_request_and_connection(secure):
    key = secure.new_key("soon-gone", "producer")
    client = secure.client("appender", key)
    try:
        assert client.call("put", b"before", topic="orders")[0]["status"] == "PUT_OK"
        secure.revoke("soon-gone")
        reply, _ = client.call("put", b"after", topic="orders")
        assert reply["code"] == ErrorCode.FORBIDDEN
    finally:
        client.close()
    assert secure.call("appender", key, "put", b"again", topic="orders", timeout=NO_ANSWER_S) is None


def test_a_raw_pyzmq_client_with_a_key_as_protocol_md_says(secure):
    front = CurveClient(secure.store.address, secure.keys["admin"], secure.server_key)
    try:
        hello, _ = front.call("hello")
    finally:
        front.close()
    appender = CurveClient(hello["appender"], secure.keys["admin"], secure.server_key)
    reader = CurveClient(hello["reader"], secure.keys["admin"], secure.server_key)
    try:
        put, _ = appender.call("put", b"raw-curve", topic="raw", queue_id=0)
        assert put["status"] == "PUT_OK"
        assert wait_for(lambda: reader.call("pull", group="g", topic="raw", queue_id=0,
                                            offset=put["queue_offset"])[0]["status"] == "FOUND", 10, 0.05)
        _, (bodies,) = reader.call("pull", group="g", topic="raw", queue_id=0, offset=put["queue_offset"])
        assert bodies == b"raw-curve"
    finally:
        appender.close()
        reader.close()


class _Tap:
    """A tcp proxy on a free port that copies both directions and keeps every byte."""

    def __init__(self, target: str):
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self.target = (host.strip("[]"), int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "tcp://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.seen = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src, dst):
        try:
            while data := src.recv(65536):
                with self.lock:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


BODY = b"wire-secret-0123456789-abcdefghij"


def _put_through_tap(endpoint: str, key: str | None, server_key: str | None) -> bytes:
    tap = _Tap(endpoint)
    client = CurveClient(tap.address, key, server_key)
    try:
        reply, _ = client.call("put", BODY, topic="wiretopic", queue_id=0)
        assert reply["status"] == "PUT_OK"
    finally:
        client.close()
        tap.close()
    with tap.lock:
        return bytes(tap.seen)


def test_the_wire_of_a_secure_store_does_not_show_a_puts_body(secure, tmp_path):
    seen = _put_through_tap(secure.endpoints()["appender"], secure.keys["prod"], secure.server_key)
    assert len(seen) > len(BODY) and BODY not in seen and b"wiretopic" not in seen
    plain = SupervisedStore(tmp_path, "plain").start()          # the same tap sees it in clear
    try:
        with open(os.path.join(plain.root, "run", "endpoints.json")) as f:
            assert BODY in _put_through_tap(json.load(f)["appender"], None, None)
    finally:
        plain.ensure_stopped()


def test_an_admin_key_does_everything_and_stops_the_store(secure):
    key = secure.keys["admin"]
    assert secure.call("appender", key, "create_topic", topic="admin-made", queues=2)[0]["status"] == "OK"
    assert secure.call("appender", key, "put", b"adm", topic="admin-made", queue_id=1)[0]["status"] == "PUT_OK"
    assert secure.call("reader", key, "groups")[0]["status"] == "OK"
    assert secure.call("front", key, "status")[0]["status"] == "OK"
    assert secure.call("front", key, "stop")[0]["status"] == "OK"
    assert secure.store.wait_exit(60) == 0


# -- replication ---------------------------------------------------------------------------
def _slave(tmp_path, master: SecureStore, key_file: str) -> SupervisedStore:
    return SupervisedStore(tmp_path, "slave", ha_key_file=key_file,
                           ha_master_server_key_file=master.server_key, **FAST_HA).start(
        "--master", ha_address(master.store))


def _slave_state(slave: SupervisedStore) -> dict:
    return slave.status()["replication"]


@pytest.mark.slow
def test_a_replica_key_follows_a_secure_master_and_an_unknown_key_cannot(tmp_path):
    m = SecureStore(tmp_path, "master", broker_role="ASYNC_MASTER", **FAST_HA)
    replica = m.new_key("replica1", "replica")
    producer = m.new_key("prod", "producer")
    admin = m.new_key("admin", "admin")
    m.start()
    slave = None
    try:
        reply, _ = m.call("appender", producer, "put", b"replicated", topic="HA", queue_id=0)
        assert reply["status"] == "PUT_OK"
        end = reply["phys_offset"] + 1
        slave = _slave(tmp_path, m, replica)
        assert wait_for(lambda: slave.status()["positions"]["wrote"] >= end, 30, 0.05), _slave_state(slave)
        slave.ensure_stopped()

        # a producer key is admitted by the ZAP handler but is no replica: refused at the handshake
        not_replica = SupervisedStore(tmp_path, "slave2", ha_key_file=producer,
                                      ha_master_server_key_file=m.server_key, **FAST_HA)
        slave = not_replica.start("--master", ha_address(m.store))
        assert wait_for(lambda: "FORBIDDEN" in str(_slave_state(slave).get("reason")) or
                        "replica" in str(_slave_state(slave).get("reason")), 30, 0.1), _slave_state(slave)
        assert slave.status()["positions"]["wrote"] == 0
        slave.ensure_stopped()

        stranger = _unknown_key(tmp_path)
        slave = SupervisedStore(tmp_path, "slave3", ha_key_file=stranger,
                                ha_master_server_key_file=m.server_key, **FAST_HA).start(
            "--master", ha_address(m.store))
        assert wait_for(lambda: _slave_state(slave).get("reason"), 30, 0.1)
        state = _slave_state(slave)
        assert state["connected"] is False and slave.status()["positions"]["wrote"] == 0, state
        master_status, _ = m.call("front", admin, "status")
        assert master_status["replication"]["slaves_connected"] == 0
    finally:
        if slave is not None:
            slave.ensure_stopped()
        m.ensure_stopped()



@pytest.mark.slow
def test_promote_on_a_secure_store_needs_an_admin_key(tmp_path):
    s = SecureStore(tmp_path, "lone-slave", **FAST_HA)
    producer = s.new_key("prod", "producer")
    s.start("--role", "SLAVE")
    try:
        done = cli("promote", "--store", s.root, "--key", producer, "--timeout", "20")
        assert done.returncode == 1 and "admin" in done.stderr, done.stderr
        done = cli("promote", "--store", s.root, "--timeout", "60")          # the store's own key
        assert done.returncode == 0, done.stderr
        assert "promoted: role ASYNC_MASTER" in done.stdout
    finally:
        s.ensure_stopped()
