"""Per-key permissions of a request in secure mode (RocketMQ 5's ACL in small; the roles and
records are ipc/keyring.py's). `AccessGuard.check(env, user)` runs in `Handlers.handle` after
the envelope is checked and before the op's handler: a request beyond its key's rights is
answered ERROR FORBIDDEN, logged, and never reaches the engine.

`user` is the ZAP User-Id of the connection the request came on (the client's Z85 public key,
set by ipc/curve.py's authenticator; `zmq.Frame.get("User-Id")`). The key's record is looked
up at each request (the table is looked at again every 0.1 s, ipc/keyring.py), so a key
revoked while its connection is open is refused from 0.1 s after the revocation.

Which right each op needs (`RULES`): puts need `put` on the topic; reads, queries, offsets and
group membership need `read` on the topic (and the group when there is one); `view_by_id` and
`look_by_offset` name no topic before the read, so they need read on every topic (`*`);
`hello`, `topics` and `topic_info` any admitted key; `create_topic`, `status`, `stop`,
`promote`, `follow`, `groups` admin; the ha port's `handshake`, `ack`, `bye` a replica key.
An op not listed needs admin (an admin then gets UNKNOWN_OP for a name no service has).
A topic or group field that is not a string is left to the handler, which refuses it.
"""
from __future__ import annotations

import logging

from ipc.keyring import KeyDirectory, KeyRights
from ipc.protocol import ErrorCode, ProtocolError


def _any(rights: KeyRights, env: dict):
    return None


def _admin(rights: KeyRights, env: dict):
    return None if rights.admin else "needs an admin key"


def _replica(rights: KeyRights, env: dict):
    return None if rights.replica else "needs a key registered as a replica"


def _put(rights: KeyRights, env: dict):
    topic = env.get("topic")
    if isinstance(topic, str) and not rights.may_put(topic):
        return f"may not put to topic {topic!r}"
    return None


def _read(rights: KeyRights, env: dict):
    topic = env.get("topic")
    if isinstance(topic, str) and not rights.may_read(topic):
        return f"may not read topic {topic!r}"
    group = env.get("group")
    if isinstance(group, str) and not rights.may_use_group(group):
        return f"may not use group {group!r}"
    return None


def _read_all(rights: KeyRights, env: dict):
    return None if rights.admin or "*" in rights.read else "needs read on every topic (*)"


def _describe(rights: KeyRights, env: dict):
    topic = env.get("topic")
    if isinstance(topic, str) and not (rights.may_put(topic) or rights.may_read(topic)):
        return f"may neither put to nor read topic {topic!r}"
    return None


RULES = {
    "hello": _any, "topics": _any, "topic_info": _describe,
    "put": _put, "put_batch": _put,
    "pull": _read, "query_by_key": _read, "offset_by_time": _read, "queue_offsets": _read,
    "commit_offset": _read, "fetch_offset": _read, "consumer_lag": _read,
    "join_group": _read, "heartbeat": _read, "leave_group": _read,
    "view_by_id": _read_all, "look_by_offset": _read_all,
    "create_topic": _admin, "status": _admin, "stop": _admin, "promote": _admin,
    "follow": _admin, "groups": _admin,
    "handshake": _replica, "ack": _replica, "bye": _replica,
}


class AccessGuard:
    """The permission check of one service's requests."""

    def __init__(self, keys: KeyDirectory, log: logging.Logger):
        self.keys = keys
        self.log = log

    def check(self, env: dict, user: str | None) -> None:
        op = env["op"]
        rights = self.keys.lookup(user) if user else None
        if rights is None:
            why = "its key is unknown or revoked"
        else:
            why = RULES.get(op, _admin)(rights, env)
            if why is None:
                return
        name = rights.name if rights is not None else (user or "(no key)")
        self.log.warning("refused %r from key %s: %s", op, name, why)
        raise ProtocolError(ErrorCode.FORBIDDEN, f"key {name!r} {why}" if rights is not None
                            else f"op {op!r} refused: {why}")
