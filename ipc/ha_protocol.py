"""The replication wire (docs/PROTOCOL.md, "Replication"): what a slave's `ha` process (a
DEALER) and its master's (a ROUTER on `ha_listen_port`) send each other, RocketMQ's HA
protocol (reference section 10) in the envelope of every other socket here.

Slave -> master, frame 0 a msgpack map with `op` and `rid`:
- `handshake`: `version`, `store_id`, `epochs` ([[epoch, start_offset, store_id], ...]),
  `max_offset` (where its log ends). Answered by a reply (`rid`, `status`): OK with the
  master's `store_id`, `epoch`, `epochs`, `max_offset` and either `start` (the offset the
  chunks begin at: the slave's max offset) or `truncate_to` (the slave's log diverged: cut it
  there durably, then hand-shake again); or ERROR with `code` and `reason` (refused).
- `ack`: `offset`, the slave's max offset (every byte below it is written). Sent after each
  chunk written and every `ha_send_heartbeat_interval`; never answered.
- `bye`: the slave stops (a clean stop or a role change); the master drops it at once instead
  of after `ha_housekeeping_interval`. Never answered.

Master -> slave, pushed after an OK handshake:
- `data`: `offset`, `length`, `max_offset` (the master's), then one raw frame of exactly
  `length` CommitLog bytes that start at `offset`; at most `ha_transfer_batch_size` bytes and
  never across a segment.
- `heartbeat`: `offset` (where the next chunk starts), `max_offset`, `epoch`; when idle.
- `reset`: `reason`; the master does not know this connection (it restarted, or closed it):
  hand-shake again.
- `config`: `name` (one of core.meta.config_sync.SYNCED_FILES: topics.json,
  consumer_offsets.json, delayOffset.json), `length`, then one raw frame of exactly `length`
  bytes (at most core.meta.config_sync.MAX_FILE_BYTES): the whole content of the master's
  `config/<name>`. Sent once after each OK handshake for every file the master has, then when a
  file's content changed; never answered. A bad `config` push raises `ConfigRejected` (a
  ProtocolError): the slave refuses that copy and keeps following.

`parse_from_master` / `parse_from_slave` turn frames into these shapes or raise
`ProtocolError` naming what is wrong; a peer that sends garbage is answered (or dropped) and
never stops the process.
"""
from __future__ import annotations

from dataclasses import dataclass

from core.meta.config_sync import MAX_FILE_BYTES, SYNCED_FILES
from core.log.epochs import EpochFileError, check_entries
from ipc.protocol import ErrorCode, ProtocolError, decode_frame0, field, pack

HA_VERSION = 1
NO_RID = 0


@dataclass(frozen=True)
class Handshake:
    store_id: str
    epochs: list
    max_offset: int


@dataclass(frozen=True)
class Chunk:
    offset: int
    data: bytes
    master_max: int


@dataclass(frozen=True)
class Heartbeat:
    offset: int
    master_max: int
    epoch: int


@dataclass(frozen=True)
class Reset:
    reason: str


@dataclass(frozen=True)
class ConfigFile:
    name: str
    data: bytes


class ConfigRejected(ProtocolError):
    """A `config` push that is not one: its copy is refused, the connection is kept."""


# -- slave -> master ----------------------------------------------------------------------
def handshake(rid: int, store_id: str, epochs, max_offset: int) -> list:
    return [pack({"op": "handshake", "rid": rid, "version": HA_VERSION, "store_id": store_id,
                  "epochs": [list(e) for e in epochs], "max_offset": max_offset})]


def ack(offset: int) -> list:
    return [pack({"op": "ack", "rid": NO_RID, "offset": offset})]


def bye() -> list:
    return [pack({"op": "bye", "rid": NO_RID})]


def parse_handshake(env: dict) -> Handshake:
    version = field(env, "version", int)
    if version != HA_VERSION:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"replication version {version}: this master speaks {HA_VERSION}")
    store_id = field(env, "store_id", str)
    if not store_id:
        raise ProtocolError(ErrorCode.BAD_FIELD, "field 'store_id' is empty")
    try:
        epochs = check_entries(field(env, "epochs", list))
    except EpochFileError as e:
        raise ProtocolError(ErrorCode.BAD_FIELD, f"field 'epochs': {e}") from None
    return Handshake(store_id, epochs, field(env, "max_offset", int, minimum=0))


def parse_ack(env: dict) -> int:
    return field(env, "offset", int, minimum=0)


# -- master -> slave ----------------------------------------------------------------------
def data(offset: int, chunk, master_max: int) -> list:
    return [pack({"op": "data", "offset": offset, "length": len(chunk), "max_offset": master_max}), chunk]


def heartbeat(offset: int, master_max: int, epoch: int) -> list:
    return [pack({"op": "heartbeat", "offset": offset, "max_offset": master_max, "epoch": epoch})]


def reset(reason: str) -> list:
    return [pack({"op": "reset", "reason": reason})]


def config_file(name: str, data) -> list:
    return [pack({"op": "config", "name": name, "length": len(data)}), data]


def _parse_config(env: dict, frames: list) -> ConfigFile:
    try:
        name = field(env, "name", str)
        length = field(env, "length", int, minimum=0)
    except ProtocolError as e:
        raise ConfigRejected(e.code, e.reason) from None
    if name not in SYNCED_FILES:
        raise ConfigRejected(ErrorCode.BAD_FIELD, f"config {name!r} is not a replicated file")
    if length > MAX_FILE_BYTES:
        raise ConfigRejected(ErrorCode.BODY_TOO_LARGE, f"config {name}: {length} bytes, over {MAX_FILE_BYTES}")
    if len(frames) != 2 or len(frames[1]) != length:
        raise ConfigRejected(ErrorCode.TOO_MANY_FRAMES, f"a config push of {length} bytes must carry "
                             "exactly one frame of that length")
    return ConfigFile(name, bytes(frames[1]))


def parse_from_master(frames: list):
    """A push (Chunk, Heartbeat, Reset, ConfigFile) or a reply (the map, with its `rid` and `status`)."""
    env = decode_frame0(frames)
    op = env.get("op")
    if op is None:
        if not isinstance(env.get("status"), str):
            raise ProtocolError(ErrorCode.BAD_FIELD, "a reply without 'status'")
        return env
    if op == "data":
        offset = field(env, "offset", int, minimum=0)
        length = field(env, "length", int, minimum=1)
        master_max = field(env, "max_offset", int, minimum=0)
        if len(frames) != 2 or len(frames[1]) != length:
            raise ProtocolError(ErrorCode.TOO_MANY_FRAMES, f"a data push of {length} bytes must carry "
                                "exactly one frame of that length")
        return Chunk(offset, frames[1], master_max)
    if op == "config":
        return _parse_config(env, frames)
    if len(frames) != 1:
        raise ProtocolError(ErrorCode.TOO_MANY_FRAMES, f"a {op!r} push takes no body frame")
    if op == "heartbeat":
        return Heartbeat(field(env, "offset", int, minimum=0), field(env, "max_offset", int, minimum=0),
                         field(env, "epoch", int, minimum=0))
    if op == "reset":
        return Reset(field(env, "reason", str, ""))
    raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown push {op!r}")
