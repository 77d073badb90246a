"""The master side of the `ha` process (docs/SERVICES.md, ha): a ROUTER on `ha_listen_port`
that serves slaves RocketMQ's HA protocol (ipc/ha_protocol.py).

Per connection (a slave's DEALER identity) it keeps where the next chunk starts, the ends of
the chunks sent and not yet acknowledged (at most WINDOW_CHUNKS: ZeroMQ drops nothing, but an
unbounded send queue would hold the whole log in memory for a slave that does not read), the
highest acknowledged offset, and when it last heard from the slave.

- `handshake`: answered with `core.log.epochs.follow_point` (start, truncate_to or a refusal,
  logged with its reason). A refusal because the peer has a newer epoch sets HA_FENCED: this
  master is stale, and its appender refuses puts from then on.
- `bye`: the slave stopped; its connection is dropped at once.
- `ack`: beyond what was sent closes the connection (logged); otherwise it raises the
  connection's acknowledged offset, the slot's word, HA_ACKED, and publishes
  `{"acked": offset}` on ipc `ha.pub`, where a SYNC_MASTER appender waits for it.
- Chunks: [next, COMMITTED) read through a read-only CommitLog view, at most
  `ha_transfer_batch_size` bytes, never across a segment. A heartbeat when nothing was sent
  for `ha_send_heartbeat_interval` ms; a connection silent for `ha_housekeeping_interval` ms
  is dropped.
- Metadata (RocketMQ's SlaveSynchronize, core.meta.config_sync): every CONFIG_CHECK_S the master's
  config/topics.json, consumer_offsets.json and delayOffset.json are looked at (a stat, and a
  read when one moved); each connection is sent, as a `config` push, every file whose content
  differs from what it was last sent: all of them after its handshake, then each change. Sent
  without blocking between chunks; a copy the socket does not take now is sent at the next
  check, so the CommitLog stream never waits for it.
- A message from an identity without a handshake (the slave of a previous process, a dropped
  connection) is answered with `reset`.
"""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field as dc_field

import zmq

from core.meta.config_sync import ConfigSnapshot
from core.log.epochs import follow_point
from core.files.fileops import REAL_FILE_OPS
from core.read.views import CommitLogView
from ipc import ha_protocol as wire
from ipc.control_block import HA_SLAVE_SLOTS, Word
from ipc.protocol import OK, ErrorCode, Handlers, ProtocolError, error_reply, pack, reply
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket

log = logging.getLogger("mqstore.ha")
WINDOW_CHUNKS = 64
MAX_MESSAGES = 1024          # requests taken per loop
CONFIG_CHECK_S = 1.0         # how often the metadata files are looked at (RocketMQ's slave: 10 s)


@dataclass
class Connection:
    identity: bytes
    slot: int
    store_id: str
    address: str
    next: int                               # where the next chunk starts
    acked: int
    heard: float
    sent_at: float
    inflight: collections.deque = dc_field(default_factory=collections.deque)
    sent_bytes: int = 0
    acked_at_ms: int = 0
    config_sent: dict = dc_field(default_factory=dict)     # file name -> digest last sent


class MasterSide:
    def __init__(self, loop):
        self.loop = loop
        self.cb = loop.cb
        self.config = cfg = loop.config
        self.epochs = loop.epochs
        self.batch = cfg.ha_transfer_batch_size
        self.heartbeat_s = cfg.ha_send_heartbeat_interval / 1000
        self.housekeeping_s = cfg.ha_housekeeping_interval / 1000
        self.conns: dict[bytes, Connection] = {}
        self.sent_total = 0
        self.metadata = ConfigSnapshot(cfg.config_dir, REAL_FILE_OPS)
        self.config_check_at = 0.0
        self.handlers = Handlers()
        self.handlers.op("handshake")(self._handshake)
        self.handlers.op("ack")(self._ack)
        self.handlers.op("bye")(self._bye)

    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.view = CommitLogView(cfg.commitlog_dir, cfg.mapped_file_size_commitlog, cfg.max_mapped_files)
        wrote = cb.get(Word.WROTE)
        first = self.view.get_min_offset()
        epoch = self.epochs.become_master(wrote, max(first, cb.get(Word.MIN_PHY), 0) if first >= 0 else wrote)
        cb.set(Word.HA_EPOCH, epoch)
        cb.set(Word.HA_SLAVES, 0)
        self.pub = make_socket(self.loop.ctx, zmq.PUB)
        bind_ipc(self.pub, ipc_endpoint(self.loop.run_dir, "ha.pub"))
        self.wake = make_socket(self.loop.ctx, zmq.PULL)
        bind_ipc(self.wake, ipc_endpoint(self.loop.run_dir, "ha"))
        self.sock = make_socket(self.loop.ctx, zmq.ROUTER, curve=self.loop.server_keys(self.handlers))
        self.sock.bind(self.loop.endpoint)
        self.loop.poller.register(self.sock, zmq.POLLIN)
        self.loop.poller.register(self.wake, zmq.POLLIN)
        log.info("master of epoch %d, serving slaves at %s from offset %d", epoch, self.loop.endpoint, wrote)

    # -- requests ------------------------------------------------------------------------
    def run_once(self) -> None:
        self.loop.take_wakeups(self.wake)
        now = time.monotonic()
        for _ in range(MAX_MESSAGES):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            if len(frames) < 2:
                continue
            identity = frames[0].bytes
            self._peer = (identity, frames[1], now)
            user = frames[0].get("User-Id") if self.handlers.guard is not None else None
            out = self.handlers.handle([f.buffer for f in frames[1:]], identity, log, user)
            if out is not None:
                self._send(identity, out)
        self._stream(now)
        if now >= self.config_check_at:
            self._push_config(now)

    def _handshake(self, env, frames, identity):
        hs = wire.parse_handshake(env)
        rid = env["rid"]
        old = self.conns.pop(identity, None)
        if old is not None:
            self._closed(old, "hand-shook again")
        address = self._address()
        cb = self.cb
        end = cb.get(Word.COMMITTED)
        first = self.view.get_min_offset()
        point = follow_point(self.epochs.store_id, self.epochs.entries, first if first >= 0 else end, end,
                             hs.store_id, hs.epochs, hs.max_offset)
        if point.refused:
            log.warning("refused slave %s at %s: %s", hs.store_id, address, point.refused)
            if point.newer and not cb.get(Word.HA_FENCED):
                cb.set(Word.HA_FENCED, 1)
                log.error("a peer was master of a newer epoch: this store no longer takes puts "
                          "(make it follow the new master: mqstore follow)")
            return error_reply(rid, ErrorCode.UNAVAILABLE, point.refused)
        fields = {"store_id": self.epochs.store_id, "epoch": self.epochs.epoch,
                  "epochs": [list(e) for e in self.epochs.entries], "max_offset": end}
        if point.truncate_to is not None:
            log.warning("slave %s at %s diverged at %d (its log ends at %d): told to truncate",
                        hs.store_id, address, point.truncate_to, hs.max_offset)
            return reply(rid, OK, {**fields, "truncate_to": point.truncate_to})
        if any(c.store_id == hs.store_id for c in self.conns.values()):
            dup = next(c for c in self.conns.values() if c.store_id == hs.store_id)
            self._drop(dup, f"store {hs.store_id} connected again from {address}")
        slot = self._free_slot()
        if slot is None:
            return error_reply(rid, ErrorCode.UNAVAILABLE, f"already {HA_SLAVE_SLOTS} slaves connected")
        now = time.monotonic()
        conn = Connection(identity, slot, hs.store_id, address, point.start, point.start, now, 0.0)
        self.conns[identity] = conn
        self.cb.set(Word.HA_SLAVE_ACK_BASE + slot, point.start)
        self._count()
        log.info("slave %s at %s follows from %d (slot %d)", hs.store_id, address, point.start, slot)
        self.config_check_at = 0.0                # its metadata files at the next loop
        return reply(rid, OK, {**fields, "start": point.start})

    def _ack(self, env, frames, identity):
        offset = wire.parse_ack(env)
        conn = self.conns.get(identity)
        if conn is None:
            return wire.reset("no handshake on this connection: hand-shake again")
        conn.heard = time.monotonic()
        if offset > conn.next:
            self._drop(conn, f"acknowledged {offset}, beyond the {conn.next} bytes sent")
            return wire.reset(f"acknowledged {offset}, beyond what was sent ({conn.next})")
        if offset > conn.acked:
            conn.acked = offset
            conn.acked_at_ms = int(time.time() * 1000)
            while conn.inflight and conn.inflight[0] <= offset:
                conn.inflight.popleft()
            cb = self.cb
            cb.set(Word.HA_SLAVE_ACK_BASE + conn.slot, offset)
            if offset > cb.get(Word.HA_ACKED):
                cb.set(Word.HA_ACKED, offset)
                try:
                    self.pub.send(pack({"acked": offset}), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
        return None

    def _bye(self, env, frames, identity):
        conn = self.conns.get(identity)
        if conn is not None:
            self._drop(conn, "the slave stopped")
        return None

    def _address(self) -> str:
        try:
            return self._peer[1].get("Peer-Address")
        except (zmq.ZMQError, AttributeError):
            return "?"

    # -- streaming -----------------------------------------------------------------------
    def _stream(self, now: float) -> None:
        end = self.cb.get(Word.COMMITTED)
        self.view.set_min(max(self.cb.get(Word.MIN_PHY), 0))
        self.view.set_end(end)
        size = self.view.file_size
        for conn in list(self.conns.values()):
            if now - conn.heard > self.housekeeping_s:
                self._drop(conn, f"silent for {now - conn.heard:.1f} s (ha_housekeeping_interval)")
                continue
            sent = False
            while conn.next < end and len(conn.inflight) < WINDOW_CHUNKS:
                n = min(self.batch, end - conn.next, size - conn.next % size)
                chunk = self.view.read(conn.next, n)
                if chunk is None:
                    log.error("cannot read [%d, %d) for slave %s: dropping it", conn.next, conn.next + n,
                              conn.store_id)
                    self._drop(conn, "its bytes are not readable here")
                    break
                if not self._send(conn.identity, wire.data(conn.next, chunk, end)):
                    self._drop(conn, "unreachable")
                    break
                conn.next += n
                conn.inflight.append(conn.next)
                conn.sent_bytes += n
                self.sent_total += n
                sent = True
            if sent:
                conn.sent_at = now
            elif now - conn.sent_at >= self.heartbeat_s and conn.identity in self.conns:
                conn.sent_at = now
                self._send(conn.identity, wire.heartbeat(conn.next, end, self.epochs.epoch))

    def _push_config(self, now: float) -> None:
        """Send each connection the metadata files it does not have as they are now."""
        self.config_check_at = now + CONFIG_CHECK_S
        self.metadata.refresh()
        for conn in list(self.conns.values()):
            for name, (digest, data) in self.metadata.files.items():
                if conn.config_sent.get(name) != digest and self._send(conn.identity, wire.config_file(name, data)):
                    conn.config_sent[name] = digest

    def _send(self, identity: bytes, frames: list) -> bool:
        try:
            self.sock.send_multipart([identity, *frames], zmq.NOBLOCK)
            return True
        except zmq.ZMQError as e:              # gone (ROUTER_MANDATORY) or not reading
            log.info("send to a slave failed: %s", e)
            return False

    # -- connection table ----------------------------------------------------------------
    def _free_slot(self) -> int | None:
        used = {c.slot for c in self.conns.values()}
        return next((i for i in range(HA_SLAVE_SLOTS) if i not in used), None)

    def _drop(self, conn: Connection, why: str) -> None:
        if self.conns.pop(conn.identity, None) is not None:
            self._closed(conn, why)

    def _closed(self, conn: Connection, why: str) -> None:
        log.warning("connection of slave %s at %s closed: %s", conn.store_id, conn.address, why)
        self._count()

    def _count(self) -> None:
        self.cb.set(Word.HA_SLAVES, len(self.conns))
        self.loop.status_now()

    def describe(self) -> dict:
        end = self.cb.get(Word.WROTE)
        now_ms = int(time.time() * 1000)
        return {"role": "MASTER", "epoch": self.epochs.epoch, "address": self.loop.endpoint,
                "fenced": bool(self.cb.get(Word.HA_FENCED)), "bytes_sent": self.sent_total,
                "acked": self.cb.get(Word.HA_ACKED),
                "slaves": [{"store_id": c.store_id, "address": c.address, "acked": c.acked, "sent": c.next,
                            "lag_bytes": max(0, end - c.acked),
                            "lag_s": round((now_ms - c.acked_at_ms) / 1000, 3) if end > c.acked and c.acked_at_ms
                            else 0.0} for c in self.conns.values()]}

    def close(self) -> None:
        self.cb.set(Word.HA_SLAVES, 0)
        for s in (self.sock, self.pub, self.wake):
            s.close(0)
        self.view.shutdown()
