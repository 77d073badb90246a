"""The slave side of the `ha` process (docs/SERVICES.md, ha): a DEALER to
`ha_master_address` that follows the master's CommitLog (ipc/ha_protocol.py), and the one
CommitLog writer of a slave.

At start it positions the segments at WROTE and zeroes, durably, everything past it (the part
of a record a previous process had received: services/appender/startup, as a restarted appender
does), then hand-shakes: its store id, its epoch history (config/epochs.json) and WROTE.
- OK with `start`: it adopts the master's history (`EpochFile.adopt`, as far as its log
  reaches), sets HA_EPOCH and follows: each `data` chunk is written at the log's end through
  `core.log.replica_log.ReplicaLog`, WROTE and COMMITTED (and CONFIRM under ASYNC_FLUSH) go to the
  end of the last whole record, LAST_STORE_TS to its store timestamp, a `flush` wakeup goes to
  the flusher under SYNC_FLUSH, and an `ack` with the bytes written goes back once the chunks
  read together are written (as RocketMQ's slave reports after each read of its socket).
- OK with `truncate_to`: the log diverged from the master's. It asks the supervisor, with a
  `truncate` event, to cut the store there durably (supervisor/replication.py stops every
  service, truncates CommitLog, consume queues and index as recovery does, and starts them
  again) and waits.
- ERROR (refused): logged with the master's reason; it tries again every RETRY_S.
A `config` push (one of the master's metadata files, core.meta.config_sync) is checked by its
format's parser and written atomically to this store's config/ when its content is new; the
reader takes consumer_offsets.json and topics.json from there, the appender topics.json, the
scheduler delayOffset.json at a promotion. A copy that is not such a file (garbage, too big, a
name not replicated) is refused with a logged reason and the slave keeps following.
A chunk that does not start where the log ends, a `reset`, a reply it did not ask for, or
silence from the master for `ha_housekeeping_interval` ms closes the socket; a new one
hand-shakes again after RETRY_S (RocketMQ's slave reconnects every 5 s). A chunk it cannot
write (no segment: a full disk) is held, with those behind it, and tried again every
RETRY_S; the slave keeps acknowledging what it has written, so the master keeps it connected
and reports it behind until space is back.
"""
from __future__ import annotations

import collections
import logging
import time

import zmq

from core.meta import config_sync
from core.log.commitlog import CommitLog
from core.log.epochs import check_entries, clip, last_epoch
from core.files.fileops import REAL_FILE_OPS
from core.log.replica_log import ReplicaDamaged, ReplicaLog
from ipc import ha_protocol as wire
from ipc.control_block import Word
from ipc.curve import CurveKeys
from ipc.protocol import OK, ProtocolError, pack
from ipc.sockets import ipc_endpoint, make_socket
from services.appender import startup
from services.appender.allocate import AllocatorClient

log = logging.getLogger("mqstore.ha")
RETRY_S = 1.0
HANDSHAKE_TIMEOUT_S = 5.0
MAX_MESSAGES = 256
BYE_LINGER_MS = 200          # how long a stopping slave lets its `bye` reach the master


class SlaveSide:
    def __init__(self, loop):
        self.loop = loop
        self.cb = loop.cb
        self.config = cfg = loop.config
        self.epochs = loop.epochs
        self.heartbeat_s = cfg.ha_send_heartbeat_interval / 1000
        self.housekeeping_s = cfg.ha_housekeeping_interval / 1000
        self.master = f"tcp://{cfg.ha_master_address}" if cfg.ha_master_address else ""
        self.sock = None
        self.state = "idle"
        self.rid = 0
        self.retry_at = 0.0
        self.heard = self.acked_at = 0.0
        self.master_entries: list = []
        self.received_total = 0
        self.reason = ""
        self.backlog: collections.deque = collections.deque()   # chunks not written yet (disk full)
        self.write_retry_at = 0.0
        self.unacked = False
        self.configs_taken = self.configs_refused = 0

    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.allocator = AllocatorClient(self.loop.ctx, self.loop.run_dir)
        self.commitlog = CommitLog(cfg, REAL_FILE_OPS, self.allocator)
        wrote = cb.get(Word.WROTE)
        ahead = startup.open_segments(self.commitlog.queue, wrote)
        startup.zero_past_wrote(self.commitlog.queue, ahead, wrote)
        self.log = ReplicaLog(self.commitlog, wrote)
        self.flush_push = make_socket(self.loop.ctx, zmq.PUSH)
        self.flush_push.setsockopt(zmq.SNDTIMEO, 0)
        self.flush_push.connect(ipc_endpoint(self.loop.run_dir, "flusher"))
        self.sync = bool(cb.get(Word.SYNC_FLUSH))
        cb.set(Word.HA_CONNECTED, 0)
        if not self.master:
            log.warning("slave with no ha_master_address: waiting (mqstore follow --master HOST:PORT)")
        else:
            log.info("slave of %s, log ends at %d", self.master, wrote)

    # -- connection ----------------------------------------------------------------------
    def _connect(self, now: float) -> None:
        cfg = self.config
        curve = CurveKeys.client(cfg.ha_key_file, cfg.ha_master_server_key_file) if cfg.ha_key_file else None
        self.sock = make_socket(self.loop.ctx, zmq.DEALER, curve=curve)
        self.sock.connect(self.master)
        self.loop.poller.register(self.sock, zmq.POLLIN)
        self.rid += 1
        mine = clip(self.epochs.entries, self.log.boundary)
        self.sock.send_multipart(wire.handshake(self.rid, self.epochs.store_id, mine, self.log.boundary))
        self.state, self.heard = "handshaking", now

    def _disconnect(self, why: str, now: float) -> None:
        if self.sock is not None:
            log.warning("replication from %s stops: %s; again in %.0f s", self.master, why, RETRY_S)
            self.loop.poller.unregister(self.sock)
            self.sock.close(0)
            self.sock = None
        self.reason = why
        self.state = "idle"
        self.backlog.clear()
        self.retry_at = now + RETRY_S
        self.cb.set(Word.HA_CONNECTED, 0)

    # -- the loop ------------------------------------------------------------------------
    def run_once(self) -> None:
        now = time.monotonic()
        if self.sock is None:
            if self.master and self.state == "idle" and now >= self.retry_at:
                self._connect(now)
            return
        for _ in range(MAX_MESSAGES):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            now = time.monotonic()
            self.heard = now
            try:
                msg = wire.parse_from_master(frames)
            except wire.ConfigRejected as e:
                self._refuse_config(e.reason)
                continue
            except ProtocolError as e:
                self._disconnect(f"the master sent a bad frame: {e.reason}", now)
                return
            if not self._take(msg, now):
                return
        if self.unacked:                  # every chunk of the batch read is written: one ack
            self._ack(now)
        if self.backlog and now >= self.write_retry_at:
            self._write_backlog(now)
        limit = HANDSHAKE_TIMEOUT_S if self.state == "handshaking" else self.housekeeping_s
        if self.state in ("handshaking", "following") and now - self.heard > limit:
            self._disconnect(f"nothing heard for {now - self.heard:.1f} s", now)
        elif self.state == "following" and now - self.acked_at >= self.heartbeat_s:
            self._ack(now)

    def _take(self, msg, now: float) -> bool:
        """Handle one message from the master; False once the connection was closed."""
        if isinstance(msg, dict):
            if self.state != "handshaking" or msg.get("rid") != self.rid:
                self._disconnect(f"an unexpected reply {msg!r}", now)
                return False
            return self._welcome(msg, now)
        if isinstance(msg, wire.Reset):
            self._disconnect(f"the master reset the connection: {msg.reason}", now)
            return False
        if self.state != "following":
            self._disconnect(f"a {type(msg).__name__.lower()} before the handshake's answer", now)
            return False
        if isinstance(msg, wire.ConfigFile):
            self._install_config(msg)
            return True
        self.cb.set(Word.HA_MASTER_MAX, msg.master_max)
        if isinstance(msg, wire.Heartbeat):
            return True
        expected = self.backlog[-1].offset + len(self.backlog[-1].data) if self.backlog else self.log.written
        if msg.offset != expected:
            self._disconnect(f"a chunk at {msg.offset}, but the log ends at {expected}", now)
            return False
        self.received_total += len(msg.data)
        self.backlog.append(msg)
        if len(self.backlog) == 1:
            return self._write_backlog(now, ack=False)   # acknowledged after the batch read
        return True

    def _install_config(self, msg: wire.ConfigFile) -> None:
        try:
            if config_sync.install(self.config.config_dir, msg.name, msg.data, REAL_FILE_OPS):
                self.configs_taken += 1
                log.info("took the master's %s (%d bytes)", msg.name, len(msg.data))
        except config_sync.ConfigFileError as e:
            self._refuse_config(str(e))
        except OSError as e:
            log.error("cannot write the master's %s: %s; kept the previous copy", msg.name, e)

    def _refuse_config(self, why: str) -> None:
        self.configs_refused += 1
        log.warning("refused a metadata file from the master: %s", why)

    def _write_backlog(self, now: float, ack: bool = True) -> bool:
        """Write the chunks held, in order. A chunk that cannot be written for want of a segment
        (the allocator cannot create one: a full disk) stays held with the ones behind it (the
        master's window bounds them) and is tried again after RETRY_S; meanwhile the slave keeps
        acknowledging what it has, so the master keeps it connected and reports it behind."""
        moved = False
        while self.backlog:
            msg = self.backlog[0]
            try:
                boundary = self.log.apply(msg.offset, msg.data)
            except ReplicaDamaged as e:
                log.error("the master's bytes are not records: %s", e)
                self._disconnect(str(e), now)
                return False
            except ValueError as e:
                self._disconnect(f"cannot write the chunk at {msg.offset}: {e}", now)
                return False
            except OSError as e:
                if self.reason != "disk":
                    log.error("cannot write the chunk at %d (%s): holding %d chunks, trying again every "
                              "%.0f s", msg.offset, e, len(self.backlog), RETRY_S)
                self.reason = "disk"
                self.write_retry_at = now + RETRY_S
                break
            self.backlog.popleft()
            moved = True
            self._publish(boundary)
        if moved:
            if self.reason == "disk":
                log.info("chunks are written again from %d", self.log.written)
                self.reason = ""
            self.unacked = True
            if ack:
                self._ack(now)
        return True

    def _welcome(self, msg: dict, now: float) -> bool:
        if msg.get("status") != OK:
            self._disconnect(f"refused by the master: {msg.get('reason')}", now)
            return False
        try:
            entries = check_entries(msg.get("epochs"))
            epoch = int(msg["epoch"])
        except (ValueError, KeyError, TypeError) as e:
            self._disconnect(f"a bad handshake answer: {e}", now)
            return False
        if isinstance(msg.get("truncate_to"), int):
            self._request_truncate(msg["truncate_to"], now)
            return False
        if msg.get("start") != self.log.written:
            self._disconnect(f"the master starts at {msg.get('start')}, the log ends at {self.log.written}", now)
            return False
        mine = clip(self.epochs.entries, self.log.boundary)
        if last_epoch(mine) > epoch:
            self._disconnect(f"the master's epoch {epoch} is older than this store's {last_epoch(mine)}", now)
            return False
        self.master_entries = entries
        self.epochs.adopt(entries, self.log.boundary)
        self.cb.set(Word.HA_EPOCH, epoch)
        self.cb.set(Word.HA_MASTER_MAX, int(msg.get("max_offset", 0)))
        self.cb.set(Word.HA_CONNECTED, 1)
        self.state, self.reason = "following", ""
        log.info("following %s (epoch %d) from %d", self.master, epoch, self.log.written)
        self._ack(now)
        return True

    def _request_truncate(self, offset: int, now: float) -> None:
        log.warning("this log diverged from the master's: asking the supervisor to truncate it to %d "
                    "(it ends at %d)", offset, self.log.boundary)
        self.loop.emit("truncate", offset=offset)
        self._disconnect(f"waiting for the truncation to {offset}", now)
        self.state = "truncating"

    def _publish(self, boundary: int) -> None:
        w = self.cb.words
        if boundary > w[Word.WROTE]:
            w[Word.WROTE] = boundary
            w[Word.COMMITTED] = boundary
            if not self.sync:
                w[Word.CONFIRM] = boundary
            if self.log.last_store_ts:
                w[Word.LAST_STORE_TS] = self.log.last_store_ts
            if self.sync:
                try:
                    self.flush_push.send(pack({"op": "flush", "upto": boundary}), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
        if self.master_entries and len(self.epochs.entries) < len(self.master_entries):
            self.epochs.adopt(self.master_entries, boundary)

    def _ack(self, now: float) -> None:
        self.acked_at = now
        self.unacked = False
        try:
            self.sock.send_multipart(wire.ack(self.log.written), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def describe(self) -> dict:
        master_max = self.cb.get(Word.HA_MASTER_MAX)
        return {"role": "SLAVE", "epoch": self.cb.get(Word.HA_EPOCH), "master": self.config.ha_master_address,
                "state": self.state, "connected": self.state == "following", "reason": self.reason,
                "written": self.log.written, "master_max": master_max, "held_chunks": len(self.backlog),
                "lag_bytes": max(0, master_max - self.log.written), "bytes_received": self.received_total,
                "configs_taken": self.configs_taken, "configs_refused": self.configs_refused,
                "last_heard_s": round(time.monotonic() - self.heard, 3) if self.heard else None}

    def close(self) -> None:
        self.cb.set(Word.HA_CONNECTED, 0)
        if self.sock is not None:
            if self.state == "following":        # tell the master now, not at its housekeeping
                try:
                    self.sock.send_multipart(wire.bye(), zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
            self.sock.close(BYE_LINGER_MS)
        self.flush_push.close(0)
        self.commitlog.shutdown()
        self.allocator.close()
