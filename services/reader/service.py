"""The reader process: serves pulls, queries and consumer offsets (docs/PROTOCOL.md, reader
table) on a ROUTER at the `reader` tcp endpoint of run/endpoints.json.

It writes no store file: the CommitLog, consume queues and index are read-only views
(core.read.views) that pick up segments the other processes create. Each loop it reads
CONFIRM (nothing past it is ever served), MIN_PHY and TOPICS_VERSION from the control block,
takes the reput process's arrivals from its SUB socket (`reput.pub`), serves every waiting
request, and wakes held pulls:
- the number of held pulls is in the control block (PULLS_HELD): reput publishes arrivals
  only while it is not 0, so a store without waiting consumers does not wake the reader on
  every dispatch;
- a pull that finds nothing with `poll_ms` > 0 is held (services.reader.longpoll) and run
  again when an arrival moves its queue past the pull's cursor; it is answered when it finds
  something or at its deadline (with what is there then);
- as a safety net for arrivals missed (a restarted reput, the SUB socket still connecting),
  held queues are re-scanned every `SWEEP_S` when DISPATCHED moved.
Consumer offsets go to config/consumer_offsets.json at most every 100 ms and at drain. On a
slave (the SLAVE word is 1) that file and topics.json are the master's, written by the slave's
ha process: the reader writes no offsets then, and every `REPLICATED_CHECK_S` merges the
master's offsets (core.meta.consumer_offsets.take_replicated) and reloads the topic table when the
files changed; once more when the word drops to 0 (a promotion), after which its table is the
store's own again and is persisted as on any master. A commit served on a slave changes only the
slave's memory, until the master's next copy of that group replaces it (RocketMQ's rule: a
slave's consumer offsets are its master's).
Consumer groups' members are kept in memory (services.reader.groups, core.meta.consumer_groups).

Usage (started by the supervisor): python -m services.reader --store ROOT
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import time

import zmq

from core.files.cache_window import UnmapBehind
from core.read.views import CommitLogView, ConsumeQueueStoreView, IndexView
from core.status import GetMessageResult, GetMessageStatus
from core.meta.topics import TopicTable, TopicTableError
from ipc.control_block import Word
from ipc.protocol import ErrorCode, Handlers, error_reply, unpack
from ipc.sockets import ipc_endpoint, make_socket
from services.base import ServiceLoop, run_service
from services.reader.longpoll import HeldPull, PullHoldTable
from core.meta.consumer_offsets import ConsumerOffsetStore
from services.reader.groups import GroupOps
from services.reader.ops import ReadOps, name_field, wait_cursor

log = logging.getLogger("reader")
MAX_REQUESTS_PER_WAKEUP = 512
_SNDMORE_NOBLOCK = zmq.SNDMORE | zmq.NOBLOCK
SWEEP_S = 0.05
REPLICATED_CHECK_S = 0.2
BIND_RETRY_S = 10.0


class Reader(ServiceLoop):
    name = "reader"
    interval_ms = 50

    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.commitlog = CommitLogView(cfg.commitlog_dir, cfg.mapped_file_size_commitlog,
                                       cfg.max_mapped_files)
        self.unmap = UnmapBehind(self.commitlog.queue, cfg.page_cache_window_commitlog)
        self.cqs = ConsumeQueueStoreView(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue,
                                         # entries are trusted only for records this view of
                                         # the log can read (its end is CONFIRM as last synced)
                                         dispatched=lambda: min(cb.get(Word.DISPATCHED),
                                                                self.commitlog.get_max_offset()),
                                         min_phy=lambda: cb.get(Word.MIN_PHY))
        self.index = (IndexView(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num,
                                cfg.max_msgs_num_batch) if cfg.message_index_enable else None)
        self.offsets = ConsumerOffsetStore(cfg.config_dir)
        self.offsets.load()
        self._slave = bool(cb.get(Word.SLAVE))
        self._replicated_at = 0.0
        self.topics = TopicTable(os.path.join(cfg.config_dir, "topics.json"))
        self._topics_version = None
        self.holds = PullHoldTable()
        self.ops = ReadOps(cfg, cb, self.commitlog, self.cqs, self.index, self.offsets,
                           self.topics, self._hold)
        self.handlers = Handlers()
        self.ops.register(self.handlers)
        self.ops.groups = GroupOps(name_field, self.ops.queue_count)
        self.ops.groups.register(self.handlers)
        self._damage_reported = (0, 0)          # (damaged reads, re-derived entries)
        self._sync_bounds()
        self._swept_dispatched = -1
        self._next_sweep = 0.0
        self._advertised = 0                 # PULLS_HELD as last written
        cb.set(Word.PULLS_HELD, 0)
        self.sub = make_socket(self.ctx, zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.connect(ipc_endpoint(self.run_dir, "reput.pub"))
        self.router = make_socket(self.ctx, zmq.ROUTER, curve=self.server_keys(self.handlers))
        self._bind(self.router, self._endpoint())
        self.poller.register(self.sub, zmq.POLLIN)
        self.poller.register(self.router, zmq.POLLIN)

    def _endpoint(self) -> str:
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            return json.load(f)["reader"]

    @staticmethod
    def _bind(sock, endpoint: str) -> None:
        """Bind, retrying while a previous reader's port is still being released."""
        deadline = time.monotonic() + BIND_RETRY_S
        while True:
            try:
                sock.bind(endpoint)
                return
            except zmq.ZMQError as e:
                if e.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # -- the loop ------------------------------------------------------------------------
    def wait_for_running(self, timeout_ms: float) -> None:
        now = time.monotonic()
        wait = timeout_ms / 1000
        deadline = self.holds.next_deadline()
        if deadline is not None:
            wait = min(wait, deadline - now, SWEEP_S)
        due = None if self._slave else self.offsets.due_in(now)   # a slave writes no offsets
        if due is not None:
            wait = min(wait, due)
        super().wait_for_running(max(0, math.ceil(wait * 1000)))

    def run_once(self) -> None:
        woken = self._take_arrivals() if self.sub in self.ready else {}
        self._sync_bounds()
        if self.router in self.ready:
            self._serve()
        if len(self.holds):
            now = time.monotonic()
            for key, max_offset in woken.items():
                self._wake(key, max_offset)
            self._sweep(now)
            self._rerun(self.holds.take_expired(now), final=True)
        self._advertise_holds()
        if self._follows_master():
            return
        self.offsets.persist_if_due()
        self._report_damage()

    def _report_damage(self) -> None:
        """A `stats` event with the records reads refused as damaged since the last one and
        the damaged consume-queue entries whose records reads served (metrics
        mqstore_damaged_reads and mqstore_rederived_entries; core.read.check logs each)."""
        damage = self.ops.store_reader.damage
        now = (damage.count, damage.entries)
        if now != self._damage_reported:
            before = self._damage_reported
            self.emit("stats", damaged_reads=now[0] - before[0], rederived_entries=now[1] - before[1])
            self._damage_reported = now

    def _follows_master(self) -> bool:
        """On a slave, take the master's offsets and topics as the ha process wrote them (every
        REPLICATED_CHECK_S, and once more at a promotion); True while this store is a slave."""
        slave = bool(self.cb.get(Word.SLAVE))
        now = time.monotonic()
        if (slave and now >= self._replicated_at) or self._slave != slave:
            self._replicated_at = now + REPLICATED_CHECK_S
            self.offsets.take_replicated()
            self._reload_topics()
        self._slave = slave
        return slave

    def _advertise_holds(self) -> None:
        """Tell reput how many pulls are held (PULLS_HELD): it publishes arrivals only then.
        When pulls start being held, reput may have dispatched past them just before it read
        the word and published nothing: sweep at once, as for a missed arrival."""
        held = len(self.holds)
        if held == self._advertised:
            return
        self.cb.set(Word.PULLS_HELD, held)
        if held and not self._advertised:
            self._next_sweep = 0.0
            self._sweep(time.monotonic())
        self._advertised = held

    def _sync_bounds(self) -> None:
        cb = self.cb
        self.commitlog.set_min(cb.get(Word.MIN_PHY))
        confirm = cb.get(Word.CONFIRM)
        self.commitlog.set_end(confirm)
        self.unmap.advance(confirm)
        version = cb.get(Word.TOPICS_VERSION)
        if version != self._topics_version:
            self._topics_version = version
            self._reload_topics()

    def _reload_topics(self) -> None:
        try:
            self.topics.reload_if_changed()
        except (OSError, TopicTableError) as e:
            log.error("topics.json not reloaded, keeping the previous table: %s", e)

    def _serve(self) -> None:
        """Answer every request waiting on the router (at most MAX_REQUESTS_PER_WAKEUP): a
        pipelining client keeps several there, so one wakeup serves a batch."""
        router, handlers, send = self.router, self.handlers, self._send
        secure = handlers.guard is not None
        for _ in range(MAX_REQUESTS_PER_WAKEUP):
            try:
                first = router.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            frames = []                      # Frame.more, not a RCVMORE option call per frame
            more = first.more
            while more:
                frame = router.recv(zmq.NOBLOCK, copy=False)
                frames.append(frame.bytes)
                more = frame.more
            peer = first.bytes
            out = handlers.handle(frames, peer, log, first.get("User-Id") if secure else None)
            if out is not None:
                send(peer, out)

    def _send(self, peer: bytes, frames: list) -> None:
        """Send a reply, every frame copied by ZeroMQ during the call: a raw pull's frame may
        be a view of a mapped segment (services.reader.pull), which must not be kept."""
        router = self.router
        try:
            router.send(peer, _SNDMORE_NOBLOCK)
            for frame in frames[:-1]:
                router.send(frame, _SNDMORE_NOBLOCK)
            router.send(frames[-1], zmq.NOBLOCK)
        except zmq.ZMQError as e:
            if e.errno == errno.EHOSTUNREACH:       # a consumer that left, e.g. with a pull held
                log.debug("reply to a disconnected peer dropped")
            elif e.errno == errno.EAGAIN:           # connected but not reading: worth a word
                log.warning("reply to a peer whose queue is full dropped (%s)", e.strerror)
            else:
                raise

    # -- arrivals and long polling -------------------------------------------------------
    def _take_arrivals(self) -> dict:
        """Raise the known max offset of each queue named in the arrivals; return those with
        held pulls and their new max."""
        woken = {}
        queues, held = self.cqs.queues, self.holds
        while True:
            try:
                msg = self.sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return woken
            try:
                arrivals = unpack(msg)["arrivals"]
                for topic, queue_id, max_offset in arrivals:
                    cq = queues.get((topic, queue_id))
                    if cq is not None:
                        cq.learn_max(max_offset)
                    if held.has((topic, queue_id)):
                        woken[topic, queue_id] = max(woken.get((topic, queue_id), 0), max_offset)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring a malformed arrivals message: %s", e)

    def _hold(self, peer, rid, request, result, cursor) -> None:
        deadline = time.monotonic() + request.poll_ms / 1000
        self.holds.hold(HeldPull(peer, rid, request, cursor, deadline))

    def _wake(self, key, max_offset: int) -> None:
        cq = self.cqs.find(*key)
        if cq is not None:
            cq.learn_max(max_offset)
            self._rerun(self.holds.take(key, cq.max_entries))

    def _sweep(self, now: float) -> None:
        dispatched = self.cb.get(Word.DISPATCHED)
        if dispatched == self._swept_dispatched or now < self._next_sweep:
            return
        self._swept_dispatched, self._next_sweep = dispatched, now + SWEEP_S
        for key in self.holds.queues():
            cq = self.cqs.find(*key)
            if cq is not None:
                cq.refresh_max(dispatched)
                self._rerun(self.holds.take(key, cq.max_entries))

    def _rerun(self, pulls, final: bool = False) -> None:
        """Run held pulls again; answer those that found something (or all, when `final`)."""
        for pull in pulls:
            try:
                frames = self._answer(pull, final)
            except Exception as e:                       # a bug: answer, log, keep serving
                log.exception("held pull failed")
                frames = error_reply(pull.rid, ErrorCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")
            if frames is not None:
                self._send(pull.peer, frames)

    def _answer(self, pull: HeldPull, final: bool) -> list | None:
        """The reply to a held pull, or None when it is held again."""
        req = pull.request
        result = self.ops.run_pull(req, pull.cursor)
        cursor = wait_cursor(result, pull.cursor)
        if cursor is not None and not final and time.monotonic() < pull.deadline:
            pull.cursor = cursor
            self.holds.hold(pull)
            return None
        if cursor is not None and cursor > req.offset:
            # Entries from the requested offset to `cursor` matched no tag: say so, so that
            # the consumer moves past them.
            result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, cursor,
                                      result.min_offset, result.max_offset)
        return self.ops.pull_reply(pull.rid, req, result)

    # -- stop ----------------------------------------------------------------------------
    def drain(self) -> None:
        self._sync_bounds()
        self._rerun(self.holds.take_all(), final=True)
        if not self.cb.get(Word.SLAVE):
            self.offsets.persist()

    def close(self) -> None:
        for sock in (self.router, self.sub):
            self.poller.unregister(sock)
            sock.close(0)
        for view in (self.commitlog, self.cqs, self.index):
            if view is not None:
                view.shutdown()
        super().close()

