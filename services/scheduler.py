"""The scheduler process: delivers delayed messages when due (docs/SERVICES.md, scheduler).

It hosts core.delay.schedule.DelayScheduler (delay levels) and core.delay.timer_job.TimerScheduler (timer
messages), the jobs the embedded store runs in its schedule thread. Around them:
- read-only views of the CommitLog (up to CONFIRM) and of the schedule queues (entries of
  records below DISPATCHED), as the reader has them;
- a DEALER to the appender's endpoint (run/endpoints.json): each re-put is a `put` (the messages
  for one queue a `put_batch`) as any client sends it (docs/PROTOCOL.md), so it is
  flushed, replicated and dispatched as any put; a pass's requests are sent together and their
  replies awaited for `REPLY_TIMEOUT_S` (a put not answered by then is not acknowledged, and is
  sent again later);
- it writes config/delayOffset.json and timerqueue/ (the timer wheel's window files and its
  checkpoint), and nothing else; on a slave nothing at all.
While the control block's SLAVE word is 1 it delivers nothing; when the word goes to 0 (a
promotion) it reads the offsets file again, as replicated, and carries on from there.
Every second it emits a `stats` event: `delay_pending` ({level: entries not delivered}),
`timer_pending` (timer messages not delivered), `delay_delivered`, `delay_skipped`,
`delay_refused` (counts since the previous event, delay levels and timers together) and
`delivery_latency` (a latency map: ms from due time to acknowledged delivery).

Usage (started by the supervisor): python -m services.scheduler --store ROOT
"""
from __future__ import annotations

import json
import logging
import os
import time

import zmq

from core.record.codec import SCHEDULE_TOPIC
from core.delay.offsets import DelayOffsetStore
from core.delay.put import TIMER_TOPIC
from core.delay.reput_record import ReputRules
from core.record.decode import decode_message
from core.read.views import CommitLogView, ConsumeQueueStoreView
from core.delay.schedule import ACKED, DelayScheduler, batch_groups
from core.delay.timer_job import TimerScheduler
from core.status import PutMessageStatus
from ipc.control_block import Word
from ipc.protocol import ErrorCode, pack, unpack
from ipc.sockets import make_socket
from services.histogram import BUCKETS_MS, SUM_KEY
from services.base import ServiceLoop, run_service

log = logging.getLogger("mqstore.scheduler")
REPLY_TIMEOUT_S = 5.0
# Error replies no retry changes (a queue id beyond the real topic's queues, a bad topic):
# taken as MESSAGE_ILLEGAL, which the jobs skip (core.delay.schedule.NEVER).
PERMANENT_ERRORS = (int(ErrorCode.BAD_FIELD), int(ErrorCode.BAD_TOPIC))
SLAVE_POLL_MS = 200


def _host_text(host: tuple) -> str:
    return f"[{host[0]}]:{host[1]}" if ":" in host[0] else f"{host[0]}:{host[1]}"


def _fields(msg) -> dict:
    return {"flag": msg.flag, "tags": msg.tags, "keys": msg.keys, "properties": msg.properties,
            "born_timestamp": msg.born_timestamp}


def wire_put(msgs: list, rid: int) -> list:
    """The request frames (docs/PROTOCOL.md) of one message (`put`) or of a run of messages of
    one topic, queue and born host (`put_batch`, each message's fields in `messages`)."""
    first = msgs[0]
    env = {"rid": rid, "topic": first.topic, "queue_id": first.queue_id,
           "born_host": _host_text(first.born_host)}
    if len(msgs) == 1:
        env.update(op="put", **_fields(first))
        return [pack(env), first.body]
    env.update(op="put_batch", sizes=[len(m.body) for m in msgs],
               messages=[_fields(m) for m in msgs], id_format="offsets")
    return [pack(env), b"".join(m.body for m in msgs)]


def lag_histogram(lags: list) -> dict:
    """Lags in ms as a latency map (services/histogram's buckets, `sum_ms`)."""
    out: dict = {}
    for lag in lags:
        bucket = next((b for b in BUCKETS_MS if lag <= b), "inf")
        out[bucket] = out.get(bucket, 0) + 1
    if out:
        out[SUM_KEY] = sum(lags)
    return out


class Scheduler(ServiceLoop):
    name = "scheduler"
    interval_ms = 100

    def setup(self) -> None:
        cfg, cb = self.config, self.cb
        self.commitlog = CommitLogView(cfg.commitlog_dir, cfg.mapped_file_size_commitlog,
                                       cfg.max_mapped_files)
        self.cqs = ConsumeQueueStoreView(cfg.consumequeue_dir, cfg.mapped_file_size_consume_queue,
                                         dispatched=lambda: min(cb.get(Word.DISPATCHED),
                                                                self.commitlog.get_max_offset()),
                                         min_phy=lambda: cb.get(Word.MIN_PHY))
        rules = ReputRules(max_message_size=cfg.max_message_size)   # the appender encodes them
        self.job = DelayScheduler(cfg.delay_levels_ms, DelayOffsetStore(cfg.config_dir),
                                  self._queue_of, self.commitlog.read, self._put_all, rules=rules)
        self.timers = TimerScheduler(cfg.store_path_root_dir, self._arrivals,
                                     self.commitlog.read, self._put_all, rules=rules,
                                     precision_ms=cfg.timer_precision_ms)
        with open(os.path.join(self.run_dir, "endpoints.json")) as f:
            endpoint = json.load(f)["appender"]
        self.dealer = make_socket(self.ctx, zmq.DEALER, curve=self.internal_client_keys())
        self.dealer.connect(endpoint)
        self.rid = 0
        self.slave = bool(cb.get(Word.SLAVE))
        if not self.slave:                         # a slave reads them once promoted
            self.job.load()
            self.timers.load()
        self.wait_ms = 0
        self.counted = (0, 0, 0)
        self.next_stats = 0.0

    # -- the job's callables -------------------------------------------------------------
    def _queue_of(self, queue_id: int, topic: str = SCHEDULE_TOPIC):
        cq = self.cqs.find(topic, queue_id)
        if cq is not None:
            cq.refresh_max(self.cqs.dispatched())
        return cq

    def _arrivals(self):
        return self._queue_of(0, TIMER_TOPIC)

    def _put_all(self, deliveries) -> list:
        """Re-put `deliveries` (core.delay.reput_record.Delivery records, read back as messages for
        the wire), each group of core.delay.schedule.batch_groups as one `put_batch`, and wait
        for the replies; the messages of a batch that is refused are sent again one by one. A
        status per message, None for one not answered in time."""
        msgs = [decode_message(d.data) for d in deliveries]
        groups = batch_groups(msgs, self.config.max_message_size)
        answers = self._send_runs([[msgs[i] for i in g] for g in groups])
        statuses: list = [None] * len(msgs)
        retry = []
        for group, status in zip(groups, answers):
            if len(group) > 1 and status is not None and status not in ACKED:
                retry += group
            for i in group:
                statuses[i] = status
        for i, status in zip(retry, self._send_runs([[msgs[i]] for i in retry])):
            statuses[i] = status
        return statuses

    def _send_runs(self, runs: list) -> list:
        """Send one request per run, then wait for every reply; a status per run."""
        first = self.rid + 1
        for run in runs:
            self.rid += 1
            self.dealer.send_multipart(wire_put(run, self.rid), copy=False)
        statuses: dict = {}
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while len(statuses) < len(runs):
            left = deadline - time.monotonic()
            if left <= 0 or self.stopped or not self.dealer.poll(int(left * 1000) + 1):
                break
            reply = unpack(self.dealer.recv_multipart()[0])
            rid = reply.get("rid") if isinstance(reply, dict) else None
            if isinstance(rid, int) and first <= rid <= self.rid:
                try:
                    statuses[rid] = PutMessageStatus(reply.get("status"))
                except ValueError:                  # an error reply: not stored
                    statuses[rid] = (PutMessageStatus.MESSAGE_ILLEGAL
                                     if reply.get("code") in PERMANENT_ERRORS else None)
        return [statuses.get(first + i) for i in range(len(runs))]

    # -- the loop ------------------------------------------------------------------------
    def wait_for_running(self, timeout_ms: float) -> None:
        super().wait_for_running(SLAVE_POLL_MS if self.slave else min(timeout_ms, self.wait_ms))

    def run_once(self) -> None:
        slave = bool(self.cb.get(Word.SLAVE))
        if slave != self.slave:
            self.slave = slave
            if not slave:                          # promoted: the offsets as replicated
                log.info("master now: delivering from %s", self.job.offsets.path)
                self.job.load()
                self.timers.load()
        if slave:
            return
        self.commitlog.set_min(self.cb.get(Word.MIN_PHY))
        self.commitlog.set_end(self.cb.get(Word.CONFIRM))
        self.wait_ms = min(self.job.run_once(), self.timers.run_once())
        self._emit_stats()

    def _emit_stats(self) -> None:
        now = time.monotonic()
        if now < self.next_stats:
            return
        self.next_stats = now + 1.0
        job, timers = self.job, self.timers
        counts = (job.delivered + timers.delivered, job.skipped + timers.skipped,
                  job.refused + timers.refused)
        delivered, skipped, refused = (a - b for a, b in zip(counts, self.counted))
        self.counted = counts
        lags, job.lag_ms, timers.lag_ms = job.lag_ms + timers.lag_ms, [], []
        fields = {"delay_pending": {str(k): v for k, v in job.pending().items()},
                  "timer_pending": timers.pending(),
                  "delay_delivered": delivered, "delay_skipped": skipped, "delay_refused": refused}
        if lags:
            fields["delivery_latency"] = lag_histogram(lags)
        self.emit("stats", **fields)

    def drain(self) -> None:
        if not self.slave:
            self.job.offsets.persist()
            self.timers.persist(force=True)

    def close(self) -> None:
        sock = getattr(self, "dealer", None)
        if sock is not None:
            sock.close(0)
        if getattr(self, "commitlog", None) is not None:
            self.commitlog.shutdown()
        super().close()


if __name__ == "__main__":
    raise SystemExit(run_service(Scheduler))
