"""The key directory and permission records (ipc/keyring.py) and the per-op guard
(ipc/access.py): files made with pyzmq, the secret owner-only, registration, revocation seen
by a running reader of the table, the roles' rights, and the guard's rule for every op of
every service."""
from __future__ import annotations

import logging
import os
import stat

import pytest
from hypothesis import given, strategies as st

from core.config import ConfigError, StoreConfig
from ipc.access import RULES, AccessGuard
from ipc.keyring import INTERNAL, KeyDirectory, KeyringError, make_pair, read_pair, read_public, \
    rights_for_role
from ipc.protocol import ErrorCode, ProtocolError


LOG = logging.getLogger("test")


def _register(keys: KeyDirectory, out, name: str, role: str, topics=None, groups=None) -> str:
    public_path, secret_path = make_pair(str(out), name)
    keys.register(rights_for_role(name, read_public(public_path).decode(), role, topics, groups))
    return read_public(public_path).decode()


def test_a_pair_is_pyzmqs_certificate_format_and_the_secret_is_owner_only(tmp_path):
    public_path, secret_path = make_pair(str(tmp_path), "alice")
    assert os.path.basename(public_path) == "alice.key" and secret_path.endswith("alice.key_secret")
    assert stat.S_IMODE(os.stat(secret_path).st_mode) == 0o600
    public, secret = read_pair(secret_path)
    assert len(public) == 40 and len(secret) == 40 and read_public(public_path) == public
    with pytest.raises(KeyringError):
        read_pair(public_path)                      # no secret in the public file
    with pytest.raises(KeyringError):
        make_pair(str(tmp_path), "alice")           # never overwrites


def test_the_server_pair_is_made_once_in_an_owner_only_directory(tmp_path):
    keys = KeyDirectory(str(tmp_path))
    assert keys.ensure_server_pair() is True
    first = keys.server_pair()
    assert keys.ensure_server_pair() is False and keys.server_pair() == first
    assert stat.S_IMODE(os.stat(keys.path).st_mode) == 0o700
    assert keys.lookup(first[0].decode()) is INTERNAL


def test_register_lookup_and_revoke_seen_by_a_reader_of_the_table(tmp_path, wait_until):
    keys = KeyDirectory(str(tmp_path))
    reader = KeyDirectory(str(tmp_path))            # another process's view
    public = _register(keys, tmp_path / "out", "p1", "producer", ["orders"])
    assert reader.lookup(public).name == "p1"
    with pytest.raises(KeyringError):
        _register(keys, tmp_path / "out2", "p1", "producer")      # the name is taken
    keys.revoke("p1")
    assert wait_until(lambda: reader.lookup(public) is None, 2.0)     # within RECHECK_S
    assert keys.records()["p1"].revoked
    with pytest.raises(KeyringError):
        keys.revoke("nobody")
    assert reader.lookup("x" * 40) is None


@pytest.mark.parametrize("name", ["", "server", "a b", "x" * 65, "é"])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(KeyringError):
        KeyDirectory(str(tmp_path)).register(rights_for_role(name, "k" * 40, "producer"))


def test_roles(tmp_path):
    prod = rights_for_role("p", "k" * 40, "producer", ["orders*"])
    assert prod.may_put("orders-eu") and not prod.may_put("payments") and not prod.may_read("orders")
    cons = rights_for_role("c", "k" * 40, "consumer", ["orders"], ["g1"])
    assert cons.may_read("orders") and not cons.may_read("orders2") and cons.may_use_group("g1")
    assert not cons.may_use_group("g2") and not cons.may_put("orders")
    admin = rights_for_role("a", "k" * 40, "admin")
    assert admin.admin and admin.may_put("x") and admin.may_read("y") and not admin.replica
    replica = rights_for_role("r", "k" * 40, "replica")
    assert replica.replica and not replica.may_put("x") and not replica.may_read("x")
    with pytest.raises(KeyringError):
        rights_for_role("z", "k" * 40, "root")


def _guard(tmp_path):
    keys = KeyDirectory(str(tmp_path))
    ids = {role: _register(keys, tmp_path / role, role, role, ["orders"] if role in ("producer", "consumer") else None)
           for role in ("admin", "producer", "consumer", "replica")}
    return AccessGuard(keys, LOG), ids


def _allowed(guard, user, **env) -> bool:
    try:
        guard.check({"rid": 1, **env}, user)
        return True
    except ProtocolError as e:
        assert e.code == ErrorCode.FORBIDDEN
        return False


def test_the_guard_by_role(tmp_path):
    guard, ids = _guard(tmp_path)
    put = {"op": "put", "topic": "orders"}
    pull = {"op": "pull", "topic": "orders", "group": "g"}
    assert _allowed(guard, ids["producer"], **put) and not _allowed(guard, ids["producer"], **pull)
    assert _allowed(guard, ids["consumer"], **pull) and not _allowed(guard, ids["consumer"], **put)
    assert not _allowed(guard, ids["producer"], op="put", topic="payments")
    for op in ("stop", "status", "create_topic", "promote", "follow", "groups", "frobnicate"):
        assert _allowed(guard, ids["admin"], op=op)
        assert not any(_allowed(guard, ids[r], op=op) for r in ("producer", "consumer", "replica"))
    for op in ("handshake", "ack", "bye"):
        assert _allowed(guard, ids["replica"], op=op) and not _allowed(guard, ids["admin"], op=op)
    assert not _allowed(guard, ids["consumer"], op="view_by_id")        # its topics are not all
    assert _allowed(guard, ids["consumer"], op="topic_info", topic="orders")
    assert not _allowed(guard, None, op="hello") and not _allowed(guard, "y" * 40, op="hello")


def test_every_op_a_service_registers_has_a_rule():
    from services.reader.groups import GroupOps
    from services.reader.ops import ReadOps
    from ipc.protocol import Handlers
    h = Handlers()
    ReadOps.register(type("R", (), {**{n: None for n in dir(ReadOps) if n.startswith("op_")}})(), h)
    GroupOps.register(type("G", (), {**{n: None for n in dir(GroupOps) if n.startswith("op_")}})(), h)
    wanted = set(h.names()) | {"put", "put_batch", "create_topic", "topic_info", "hello", "status",
                               "topics", "stop", "promote", "follow", "handshake", "ack", "bye"}
    assert wanted <= set(RULES)


@given(st.text(alphabet="abcxyz-*", min_size=1, max_size=6), st.text(alphabet="abcxyz-", min_size=1, max_size=6))
def test_a_producer_never_reads_and_a_consumer_never_puts(pattern, topic):
    prod = rights_for_role("p", "k" * 40, "producer", [pattern])
    cons = rights_for_role("c", "k" * 40, "consumer", [pattern])
    assert not prod.may_read(topic) and not cons.may_put(topic)
    assert prod.may_put(topic) == cons.may_read(topic)


def test_the_security_config_key():
    assert StoreConfig().security == "none"
    assert StoreConfig(security="CURVE").security == "curve"
    with pytest.raises(ConfigError) as e:
        StoreConfig(security="tls")
    assert e.value.key == "security"
    with pytest.raises(ConfigError) as e:
        StoreConfig(ha_key_file="/x/slave.key_secret")
    assert e.value.key == "ha_key_file"
    assert StoreConfig.from_sources(env={"MQSTORE_SECURITY": "curve"}).security == "curve"


def test_the_keys_command(tmp_path, capsys):
    from supervisor.cli import main
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    os.makedirs(root)
    assert main(["keys", "--store", root, "--new", "billing", "--role", "producer", "--topics",
                 "orders,pay*", "--out", out]) == 0
    assert os.path.exists(os.path.join(out, "billing.key_secret"))
    assert os.path.exists(os.path.join(root, "config", "keys", "server.key"))
    for argv in (["--new", "bad name"], ["--new", "billing"], ["--revoke", "nobody"],
                 ["--new", "c", "--role", "producer", "--groups", "g"],
                 ["--new", "r", "--role", "replica", "--topics", "t"]):
        capsys.readouterr()
        assert main(["keys", "--store", root, "--out", out, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("mqstore keys: ") and err.count("\n") == 1, err
    assert main(["keys", "--store", root, "--revoke", "billing"]) == 0
    capsys.readouterr()
    assert main(["keys", "--store", root, "--list"]) == 0
    listed = capsys.readouterr().out
    assert "billing" in listed and "REVOKED" in listed and "put orders,pay*" in listed
    assert main(["keys", "--store", str(tmp_path / "none"), "--list"]) == 2
