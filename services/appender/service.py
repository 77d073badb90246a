"""The appender process: owns CommitLog writes on a master and `config/topics.json`
(docs/SERVICES.md, appender; docs/PROTOCOL.md, `put`, `put_batch`, `create_topic`,
`topic_info`).

It appends through `core.log.commitlog.CommitLog`, whose allocator callable
(services/appender/allocate) asks the allocator process for each new segment and waits 5 s
(then CREATE_MAPPED_FILE_FAILED).
Group commit: each `run_once` takes every waiting request (up to MAX_GROUP), appends them,
publishes WROTE (and COMMITTED without the pool, CONFIRM under ASYNC_FLUSH without the pool),
then replies; under SYNC_FLUSH it also does so within the round every SYNC_STEP_BYTES, so
that the flusher starts on the first requests while the rest are appended; under ASYNC_FLUSH
as soon as one client has EARLY_REPLIES requests in the round, so that a producer with a
window in flight sends again meanwhile. Under SYNC_FLUSH the replies
of `wait` puts are parked (services/appender/waiters.py) and the flusher is woken through the `flush`
FIFO (ipc/wakeup.py); they are answered when the FLUSHED word passes their records, read when
the flusher's `flushed` FIFO wakes the appender and at every poll interval while replies are
parked (which catches a lost wakeup), or FLUSH_DISK_TIMEOUT after `sync_flush_timeout` ms or at
once when FLUSH_FAILED is set.
With the transient pool it writes into the shared-memory buffer lent to the segment and pushes
`commit` wakeups every `commit_commitlog_least_pages` pages.

Startup (services/appender/startup): segments positioned from WROTE, everything past WROTE
zeroed durably, [DISPATCHED, WROTE) re-validated, the topic-queue table rebuilt from the
consume queues (read-only) and those records, the pool buffer of the current segment
re-attached; the endpoint is bound only then.

A SYNC_MASTER answers a waiting put once a slave acknowledged it (services/appender/replica),
after the flush under SYNC_FLUSH; while slaves are connected each round that wrote pushes a
`wrote` wakeup to the ha process. On a slave (SLAVE at start) it opens no segment and refuses
every put; a role change restarts it (supervisor/replication.py). `create_topic` and
`topic_info` are services/appender/topics.

Put replies to a client that asks for it (`"coalesce": true`) are held to the end of the round
and sent together (services/appender/outbox).

Every second it emits a `stats` event: `puts` and `bytes` ({topic: n}) stored since the last
event, and `latency` ({status: {bucket_ms: count}}) of the put requests answered since then
(services/histogram.PutStats says how buckets count).
"""
from __future__ import annotations

import json
import logging
import os
import time

import zmq

from core.record.batch_encode import encode_batch
from core.delay.put import delay_rules, delayed_put
from core.record.encode import encode_record
from core.log.commitlog import CommitLog, append_status_to_put
from core.files.fileops import PAGE_SIZE, REAL_FILE_OPS
from core.record import refusal as why
from core.status import AppendMessageStatus, PutMessageStatus, take_reason
from core.meta.topics import TopicTable
from ipc.control_block import ServiceState, Word
from ipc.protocol import ERROR, ErrorCode, Handlers, ProtocolError, pack, unpack
from ipc.sockets import ipc_endpoint, make_socket
from ipc.wakeup import Wakeup
from services.appender import startup
from services.appender.allocate import AllocatorClient
from services.appender.outbox import ReplyOutbox
from services.transient_pool import SharedPool
from services.appender.request import (IllegalMessage, MsgIdArray, PeerHosts, pack_reply, parse_put,
                                     parse_put_batch)
from services.appender.replica import ReplicaWait
from services.appender.topics import create_new_topics, register_topic_ops, reload_topics
from services.appender.waiters import FlushWaiters, Parked
from services.histogram import PutStats
from services.base import ServiceLoop, run_service

log = logging.getLogger("mqstore.appender")
MAX_GROUP = 1024
# Under SYNC_FLUSH a round hands what it appended to the flusher every this many bytes, so
# that the fdatasync of its first requests overlaps the appending of the rest.
SYNC_STEP_BYTES = 256 << 10
# Under ASYNC_FLUSH a client with this many requests appended in a round gets their replies
# at once, not at the round's end: a producer with a window of requests in flight then sends
# again while the rest of the round is appended, instead of the two taking turns. Clients with
# fewer in the round (many producers, few requests each) still get one message per round.
EARLY_REPLIES = 8
PUT_OK = PutMessageStatus.PUT_OK.value
FLUSH_DISK_TIMEOUT = PutMessageStatus.FLUSH_DISK_TIMEOUT.value
NOT_AVAILABLE = PutMessageStatus.SERVICE_NOT_AVAILABLE.value
ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL.value
IDLE_INTERVAL_MS = 100    # the loop's poll timeout with no reply parked (requests wake it)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK


class Appender(ServiceLoop):
    name = "appender"
    interval_ms = 10

    def __init__(self, config, cb):
        super().__init__(config, cb)
        self.sync = bool(cb.get(Word.SYNC_FLUSH))
        self.timeout_s = config.sync_flush_timeout / 1000
        self.replica = ReplicaWait(config, cb) if config.is_sync_master else None
        self.is_slave = bool(cb.get(Word.SLAVE))
        self.max_size = config.max_message_size
        self.delay_rules = delay_rules(config)
        self.pool = (SharedPool(cb, config.transient_store_pool_size, config.mapped_file_size_commitlog)
                     if cb.get(Word.POOL_ENABLED) else None)
        self.allocator = AllocatorClient(self.ctx, self.run_dir)
        self.commitlog = CommitLog(config, REAL_FILE_OPS, self.allocator, self.pool)
        self.store_host = self.commitlog.store_host_bytes     # what CommitLog.prepare passes
        if self.pool is not None:
            self.pool.segment_of_next_borrow = lambda: self.commitlog.queue.files[-1].file_from_offset
        self.topics: TopicTable | None = None
        self.waiters = FlushWaiters()
        self.outbox = ReplyOutbox()
        self.stats = PutStats()
        self.handlers = Handlers()
        self.handlers.op("put", body_frames=None)(self._put)              # parse_put checks them
        self.handlers.op("put_batch", body_frames=None)(self._put_batch)  # parse_put_batch too
        register_topic_ops(self.handlers, self)
        self.group: list = []              # (identity, fields, end, wait, received) appended this round
        self.round_counts: dict = {}       # identity -> its requests appended this round
        self.round_robin: dict[str, int] = {}
        self.peers = PeerHosts(config.store_host_tuple)
        self.wrote = cb.get(Word.WROTE)
        self.flushed = cb.get(Word.FLUSHED)
        self.last_store_ts = 0
        self.commit_woken = self.wrote
        self.commit_step = max(1, config.commit_commitlog_least_pages) * PAGE_SIZE
        self.next_stats = time.monotonic() + 1.0
        self._identity = b""
        self._frames = None
        self._is_put = False

    # -- start ---------------------------------------------------------------------------
    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.flush_wakeup = Wakeup(self.run_dir, "flush")
        self.commit_push = self._connect(zmq.PUSH, "committer") if self.pool is not None else None
        self.flushed_wakeup = Wakeup(self.run_dir, "flushed")
        self.ha_push = self._connect(zmq.PUSH, "ha")
        if self.replica is not None:
            self.replica.subscribe(self._connect(zmq.SUB, "ha.pub"), self.poller)
        if self.is_slave:
            self._setup_slave()
            return
        queue = self.commitlog.queue
        wrote = self.wrote
        ahead = startup.open_segments(queue, wrote)
        last = queue.files[-1] if queue.files else None
        if self.pool is not None and last is not None and not last.is_full:
            last.write_buffer = self.pool.buffer_for(last.file_from_offset)
        startup.zero_past_wrote(queue, ahead, wrote)
        start = max(cb.get(Word.DISPATCHED), queue.files[0].file_from_offset if queue.files else 0)
        self.set_state(ServiceState.RECOVERING, done=0, total=wrote - start)
        seen = startup.revalidate(queue, self.pool, start, wrote, self._progress)
        cq_max = startup.consume_queue_max_offsets(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue)
        self.commitlog.topic_queue_table = startup.topic_queue_table(cq_max, seen)
        self.topics = TopicTable.load(cfg.config_dir)
        if self.topics.ensure_covers(self.commitlog.topic_queue_table, cfg.default_topic_queue_nums):
            self._topics_changed()
        log.info("appender ready: WROTE %d, %d queues, %d topics, pool %s, %s, %s", wrote,
                 len(self.commitlog.topic_queue_table), len(self.topics),
                 "on" if self.pool is not None else "off", "SYNC_FLUSH" if self.sync else "ASYNC_FLUSH",
                 self.config.broker_role)
        self._bind()

    def _setup_slave(self) -> None:
        """A slave's: no segment touched (the ha process writes them), puts refused."""
        self.topics = TopicTable.load(self.config.config_dir)
        self._bind()

    def _bind(self) -> None:
        self.front = make_socket(self.ctx, zmq.ROUTER, curve=self.server_keys(self.handlers))
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            self.front.bind(json.load(f)["appender"])
        self.poller.register(self.front, zmq.POLLIN)
        self.poller.register(self.flushed_wakeup.fileno(), zmq.POLLIN)

    def _progress(self, done: int, total: int) -> None:
        self.report_progress(done, total)
        now = time.monotonic()
        if now >= self.next_stats:
            self.next_stats = now + 1.0
            self.emit("recovering", done=done, total=total)

    def _connect(self, kind: int, name: str) -> zmq.Socket:
        sock = make_socket(self.ctx, kind)
        if kind == zmq.PUSH:
            sock.setsockopt(zmq.SNDTIMEO, 0)
        sock.connect(ipc_endpoint(self.run_dir, name))
        return sock

    # -- the loop ------------------------------------------------------------------------
    def wait_for_running(self, timeout_ms: float) -> None:
        """Poll every interval_ms while replies are parked (their flush deadlines), else every
        IDLE_INTERVAL_MS: an idle appender wakes 10 times a second, for its heartbeat."""
        parked = self.waiters or (self.replica is not None and self.replica.waiters)
        super().wait_for_running(timeout_ms if parked else IDLE_INTERVAL_MS)

    def run_once(self) -> None:
        self._take_requests()
        self._end_round()
        now = time.monotonic()
        if now >= self.next_stats:
            self.next_stats = now + 1.0
            self.emit("stats", **self.stats.take(),
                      **(self.replica.take_stats() if self.replica is not None else {}))
            if self.is_slave:                 # the master's topics.json, as the ha process wrote it
                reload_topics(self)

    def _take_requests(self) -> None:
        sock = self.front
        handle, secure = self.handlers.handle, self.handlers.guard is not None
        taken = []
        for _ in range(MAX_GROUP):
            try:
                head = sock.recv(_NOBLOCK, copy=False)
            except zmq.Again:
                break
            received = time.perf_counter()
            frames = [head]
            more = head.more                     # Frame.more: no RCVMORE option call per frame
            while more:
                frame = sock.recv(_NOBLOCK, copy=False)
                frames.append(frame)
                more = frame.more
            taken.append((head, frames, received))
        if len(taken) > 1:
            create_new_topics(self, taken)
        for head, frames, received in taken:
            self._identity = identity = head.bytes
            self._frames = frames
            self._is_put = False
            out = handle([f.buffer for f in frames[1:]], received, log, head.get("User-Id") if secure else None)
            if out is not None:
                self._send(identity, out)
                if self._is_put:
                    self.stats.replied(unpack(out[0]).get("status", ERROR), time.perf_counter() - received)
            if self.sync:
                if self.group and self.group[-1][2] - self.wrote >= SYNC_STEP_BYTES:
                    self._end_round()            # park, publish WROTE, wake the flusher
            elif self.round_counts.get(identity, 0) >= EARLY_REPLIES:
                self._finish_group()             # publish WROTE, answer what is appended
                self.outbox.send_to(identity, self._send)
                self.round_counts[identity] = 0

    def _end_round(self) -> None:
        """Answer or park what was appended, answer what the flusher released, send."""
        self._finish_group()
        self._answer_waiters()
        self.outbox.send(self._send)
        self.round_counts.clear()

    def _finish_group(self) -> None:
        """Publish the positions of this round's appends, then answer or park their replies."""
        group = self.group
        if not group:
            return
        self.group = []
        self._publish_positions()
        parked = False
        deadline = time.monotonic() + self.timeout_s
        for identity, fields, end, wait, received in group:
            if self.sync and wait:
                self.waiters.park(Parked(end, deadline, identity, fields, received))
                parked = True
            elif wait and self.replica is not None:
                self._wait_replica(Parked(end, 0.0, identity, fields, received))
            else:
                self._reply_put(identity, fields, PUT_OK, received)
        if parked:
            self.flush_wakeup.notify()

    def _publish_positions(self) -> None:
        wrote = self.commitlog.queue.get_max_wrote_position()
        if wrote <= self.wrote:
            return
        words = self.cb.words
        self.wrote = wrote
        words[Word.WROTE] = wrote
        if self.pool is None:
            words[Word.COMMITTED] = wrote
            if not self.sync:
                words[Word.CONFIRM] = wrote
        if self.last_store_ts:                 # after the positions: see services/flusher.py
            words[Word.LAST_STORE_TS] = self.last_store_ts
        if words[Word.HA_SLAVES]:
            self._push(self.ha_push, {"op": "wrote", "upto": wrote})   # stream it to the slaves now
        if self.pool is not None and wrote - self.commit_woken >= self.commit_step:
            self.commit_woken = wrote
            self._push(self.commit_push, {"op": "commit", "upto": wrote})

    def _answer_waiters(self) -> None:
        if self.ready.get(self.flushed_wakeup.fileno()):
            self.flushed_wakeup.drain()       # then FLUSHED, below: the flusher wrote it first
        if self.replica is not None:
            for p, status in self.replica.answers(self.ready):
                self._reply_put(p.identity, p.fields, status, p.received)
        if not self.waiters:
            return
        self.flushed = max(self.flushed, self.cb.get(Word.FLUSHED))
        for p in self.waiters.release(self.flushed):
            if self.replica is not None:
                self._wait_replica(p)
            else:
                self._reply_put(p.identity, p.fields, PUT_OK, p.received)
        late = self.waiters.take_all() if self.cb.get(Word.FLUSH_FAILED) else \
            self.waiters.expire(time.monotonic())
        for p in late:
            self._reply_put(p.identity, p.fields, FLUSH_DISK_TIMEOUT, p.received)

    def _wait_replica(self, p: Parked) -> None:
        """A SYNC_MASTER's stored (and, under SYNC_FLUSH, flushed) put: answered now when a
        slave has it or none can have it soon, else parked until one acknowledges it."""
        status = self.replica.park(p, self.wrote)
        if status is not None:
            self._reply_put(p.identity, p.fields, status, p.received)

    # -- replies -------------------------------------------------------------------------
    def _reply_put(self, identity: bytes, fields: dict, status: str, received: float) -> None:
        fields["status"] = status
        if identity in self.outbox.coalescing:
            self.outbox.hold(identity, pack_reply(fields))   # sent at the end of the round
        else:
            self._send(identity, [pack_reply(fields)])
        self.stats.replied(status, time.perf_counter() - received)

    def _send(self, identity: bytes, frames: list) -> None:
        sock = self.front
        try:
            sock.send(identity, _SNDMORE_NOBLOCK)
            for frame in frames[:-1]:
                sock.send(frame, _SNDMORE_NOBLOCK)
            sock.send(frames[-1], _NOBLOCK)
        except zmq.ZMQError as e:            # the client is gone (EHOSTUNREACH) or not reading
            log.warning("reply dropped: %s", e)

    @staticmethod
    def _push(sock, msg: dict) -> None:
        try:
            sock.send(pack(msg), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass                              # the receiver polls the control block as well

    # -- handlers ------------------------------------------------------------------------
    def _put(self, env, frames, received):
        return self._store(env, frames, received, parse_put, False)

    def _put_batch(self, env, frames, received):
        return self._store(env, frames, received, parse_put_batch, True)

    def _store(self, env: dict, frames, received: float, parse, batch: bool):
        self._is_put = True
        if env.get("coalesce") is True:
            self.outbox.asked(self._identity)
        rid = env.get("rid", 0)
        first = self._frames[1] if len(self._frames) > 1 else None
        req = parse(env, frames, self.peers.of(self._identity, first), time.time_ns() // 1_000_000,
                    self.max_size)
        if req.__class__ is IllegalMessage:   # a put status, after the store's own refusals
            if self._refusing():
                return [pack({"rid": rid, "status": NOT_AVAILABLE})]
            return [pack({"rid": rid, "status": ILLEGAL, "code": int(req.code), "reason": req.reason})]
        if self._refusing():
            return [pack({"rid": rid, "status": NOT_AVAILABLE})]
        try:
            qid = self._queue_for(req.topic, req.queue_id)
        except OSError as e:                  # a new topic's topics.json: a full disk is a status
            log.error("cannot create topic %s: %s", req.topic, e)
            return [pack({"rid": rid, "status": NOT_AVAILABLE})]
        if batch and req.body_bytes > self.max_size:        # a batch is one unit of at most this
            return [pack({"rid": rid, "status": ILLEGAL,
                          "reason": why.batch_too_large(req.body_bytes, self.max_size)})]
        recs = self._prepare(req, qid, batch)
        if recs.__class__ is PutMessageStatus:
            return [pack({"rid": rid, "status": recs.value, "reason": take_reason()})]
        result = self.commitlog.append_batch(recs) if batch else self.commitlog.append_encoded(*recs)
        if result.status is not AppendMessageStatus.PUT_OK:
            fields = {"rid": rid, "status": append_status_to_put(result.status).value}
            if result.status is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED:
                fields["reason"] = why.over_segment(batch, self.commitlog.file_size)
            return [pack(fields)]
        self.last_store_ts = result.store_timestamp
        self.stats.stored(req.topic, req.count, req.body_bytes)
        if not batch:                         # a delayed put: its schedule queue (core.delay.put)
            qid = req.messages[0].queue_id
        fields = {"rid": rid, "status": PUT_OK, "queue_id": qid, "queue_offset": result.logics_offset,
                  "phys_offset": result.wrote_offset, "store_timestamp": result.store_timestamp}
        if batch:
            if req.id_offsets:                # the client makes the ids (docs/PROTOCOL.md)
                fields["phys_offsets"], fields["store_host"] = result.offsets_bytes(), result.store_host
            else:
                fields["msg_ids"] = MsgIdArray.of(result)
            fields["count"] = req.count
        else:
            fields["msg_id"] = result.msg_id
        self.group.append((self._identity, fields, result.next_offset, req.wait, received))
        self.round_counts[self._identity] = self.round_counts.get(self._identity, 0) + 1
        return None

    def _refusing(self) -> bool:
        """SERVICE_NOT_AVAILABLE unless WRITABLE and no FLUSH_FAILED, DISK_FULL, SPACE_FULL,
        SLAVE, DRAINING, HA_FENCED (a newer master exists)."""
        w = self.cb.words
        return (self.stopped or w[Word.WRITABLE] != 1 or w[Word.FLUSH_FAILED] != 0 or w[Word.DISK_FULL] != 0
                or w[Word.SPACE_FULL] != 0 or w[Word.SLAVE] != 0 or w[Word.DRAINING] != 0
                or w[Word.HA_FENCED] != 0 or self.is_slave)

    def _queue_for(self, topic: str, qid: int | None) -> int:
        """The queue of a put: the one asked for (below the topic's count) or round robin. A new
        topic is created with default_topic_queue_nums queues once the request is valid."""
        queues = self.topics.get(topic)
        known = queues is not None
        if not known:
            queues = self.config.default_topic_queue_nums
        if qid is None:
            n = self.round_robin.get(topic, 0)
            self.round_robin[topic] = n + 1
            qid = n % queues
        elif qid >= queues:
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"field 'queue_id' {qid} is out of range: topic {topic} has {queues} queues")
        if not known:
            try:
                self.topics.ensure(topic, queues)
            except OSError:
                self.topics.topics.pop(topic, None)   # not saved: the next put tries again
                raise
            self._topics_changed()
        return qid

    def _prepare(self, req, qid: int, batch: bool):
        """The engine's prepared records of a request (of a single put: its record's bytes, as
        `encode_record` gives them), or the PutMessageStatus refusing it."""
        msgs = req.messages
        max_size, host, crc = self.max_size, self.store_host, self.commitlog.prop_crc
        if req.bodies is None and not batch:                  # one message: its record's bytes
            msgs[0].queue_id = qid
            if msgs[0].properties:
                stored = delayed_put(msgs[0], self.delay_rules)     # DELAY or a timer
                if stored.__class__ is PutMessageStatus:
                    return stored
                msgs[0] = stored
            return encode_record(msgs[0], max_size, host, crc)
        for m in msgs:
            m.queue_id = qid
        return encode_batch(msgs, max_size, host, crc, req.bodies, req.uniq_keys, req.block, req.sizes)

    def _topics_changed(self) -> None:
        self.cb.set(Word.TOPICS_VERSION, self.cb.get(Word.TOPICS_VERSION) + 1)

    # -- stop ----------------------------------------------------------------------------
    def drain(self) -> None:
        """Answer what is queued (puts are refused now), then the parked replies: flushed,
        or FLUSH_DISK_TIMEOUT at their deadline."""
        self._take_requests()
        self._finish_group()
        self.outbox.send(self._send)
        while self.waiters or (self.replica is not None and self.replica.waiters):
            self.wait_for_running(self.interval_ms)
            self._take_requests()
            self._answer_waiters()
            self.outbox.send(self._send)
        self.emit("stats", **self.stats.take())
        self.commitlog.shutdown()

    def close(self) -> None:
        for sock in (getattr(self, n, None) for n in
                     ("front", "commit_push", "ha_push")):
            if sock is not None:
                sock.close(0)
        for wakeup in (getattr(self, n, None) for n in ("flush_wakeup", "flushed_wakeup")):
            if wakeup is not None:
                wakeup.close()
        if self.replica is not None:
            self.replica.close()
        self.allocator.close()
        if self.pool is not None:
            for mf in self.commitlog.queue.files:
                mf.write_buffer = None
            try:
                self.pool.close()
            except BufferError as e:
                log.warning("pool buffers still in use at exit: %s", e)
        super().close()

