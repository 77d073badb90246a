"""SIGKILL of the appender, the reader, the reput dispatcher and the flusher, one after the
other, while producers keep sending and a consumer keeps reading (DESIGN.md section 7: the
supervisor restarts a dead service and the new process resumes from the control block).

Two producer threads, each with its own `Producer` (no built-in retries), send to one topic:
one in batches of 20, one message at a time. Each message carries a UNIQ_KEY made from its
producer and sequence number, and a request that fails (a timeout, a lost connection, any
status but PUT_OK) is sent again with the same keys until it is acknowledged. Every attempt
is recorded, so afterwards:

- every acknowledged message is readable, at the queue and queue offset its acknowledgement
  named, with that offset message id and its exact body;
- every queue reads from offset 0 with no gap and no repeated offset;
- a UNIQ_KEY appears more than once only if one of its attempts was not acknowledged (a
  retry after a request whose reply was lost may store the message twice; an acknowledged
  first attempt must leave exactly one copy), and never more often than it was sent;
- a producer's messages in one queue keep their sending order;
- the consumer that read through the kills read the same messages at the same offsets;
- the store then stops cleanly and `core.fsck.check` finds nothing wrong.

Service pids come from `mqstore status --json`, restarts are awaited by polling the front
door's `status` with a deadline.
"""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from core.record.message import Message
from ipc import Consumer, Producer
from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore, cli, pid_gone
from tests.integration.test_end_to_end import E2E_CONFIG, consume_topic, make_body, parse_body, stop_and_fsck

TOPIC = "Chaos"
QUEUES = 4
KILL_ORDER = ("appender", "reader", "reput", "flusher")
REQUEST_TIMEOUT_S = 1.5
PROGRESS_PER_PHASE = 600           # acknowledged messages needed between two kills
PACE_S = 0.002                     # a producer's pause after each acknowledged unit: it keeps
                                   # sending through every kill, but the volume checked at the
                                   # end stays in the tens of thousands


def uniq_key(producer: int, seq: int) -> str:
    return f"{producer:04X}{seq:028X}"


class SendLog:
    """Every attempt of every message, shared by the producer threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempts: dict = {}       # uniq key -> attempts sent
        self.unacked: dict = {}        # uniq key -> attempts that were not acknowledged
        self.acks: dict = {}           # uniq key -> (queue_id, queue_offset, msg_id)
        self.bodies: dict = {}         # uniq key -> body
        self.failures: list = []       # (uniq key of the first message, what went wrong)

    @property
    def acked(self) -> int:
        return len(self.acks)

    def attempt(self, keys: list) -> None:
        with self.lock:
            for k in keys:
                self.attempts[k] = self.attempts.get(k, 0) + 1

    def failed(self, keys: list, why: str) -> None:
        with self.lock:
            for k in keys:
                self.unacked[k] = self.unacked.get(k, 0) + 1
            self.failures.append((keys[0], why))

    def ok(self, keys: list, res) -> None:
        with self.lock:
            for i, k in enumerate(keys):
                assert k not in self.acks, f"{k} acknowledged twice"
                self.acks[k] = (res.queue_id, res.queue_offset + i, res.msg_ids[i])


def producer_loop(address: str, producer: int, batch: int, log: SendLog, stop: threading.Event) -> None:
    """Send numbered messages until `stop`; every unit is retried until acknowledged."""
    with Producer(address, timeout=REQUEST_TIMEOUT_S, retries=0) as p:
        seq = 0
        while not stop.is_set():
            queue = (seq // batch) % QUEUES
            seqs = range(seq, seq + batch)
            keys = [uniq_key(producer, s) for s in seqs]
            bodies = [make_body(TOPIC, producer, s) for s in seqs]
            with log.lock:
                log.bodies.update(zip(keys, bodies))
            while True:                        # until acknowledged, even after `stop`
                log.attempt(keys)
                try:
                    if batch == 1:
                        res = p.send(TOPIC, bodies[0], queue_id=queue, properties={"UNIQ_KEY": keys[0]})
                    else:
                        msgs = [Message(TOPIC, b, properties={"UNIQ_KEY": k}) for b, k in zip(bodies, keys)]
                        res = p.send_batch(TOPIC, msgs, queue_id=queue)
                except (TimeoutError, ConnectionError) as e:
                    log.failed(keys, repr(e))
                    continue
                if res.ok:
                    log.ok(keys, res)
                    stop.wait(PACE_S)
                    break
                log.failed(keys, res.status.name)
                stop.wait(0.05)                 # the store said "not now": back off a little
            seq += batch


class LiveConsumer(threading.Thread):
    """Reads TOPIC from the beginning for the whole test."""

    def __init__(self, address: str):
        super().__init__(name="live-consumer", daemon=True)
        self.address = address
        self.messages: list = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Consumer(self.address, "live", TOPIC, long_poll_ms=500, timeout=REQUEST_TIMEOUT_S,
                          auto_commit=False) as c:
                while not self.stop.is_set():
                    for m in c.poll(200):
                        self.messages.append((m.queue_id, m.queue_offset, m.msg_id, m.uniq_key))
        except BaseException as e:            # reported by the test
            self.error = e


def service_pid(store: SupervisedStore, name: str) -> tuple[int, int]:
    """(pid, restarts) of a service, from `mqstore status --json`."""
    out = cli("status", "--store", store.root, "--json", timeout=30)
    assert out.returncode == 0, out.stderr
    entry = next(s for s in json.loads(out.stdout)["services"] if s["name"] == name)
    return entry["pid"], entry["restarts"]


# Both run with the slow cases (CI runs them after the fast suite; each takes about 11 s); the
# fast suite kills services under load elsewhere (test_kill_services.py, and the appender
# mid-stream in tests/integration/test_write_services.py).
@pytest.mark.slow
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_kill_services_while_producing(tmp_path, flush):
    store = SupervisedStore(tmp_path, **E2E_CONFIG, flush_disk_type=flush).start()
    log, stop = SendLog(), threading.Event()
    threads = [threading.Thread(target=producer_loop, args=(store.address, i, batch, log, stop),
                                name=f"producer-{i}", daemon=True)
               for i, batch in enumerate((20, 1))]
    live = LiveConsumer(store.address)
    try:
        store.call("create_topic", endpoint=store.call("hello")[0]["appender"], topic=TOPIC, queues=QUEUES)
        for t in threads:
            t.start()
        live.start()
        assert wait_for(lambda: log.acked >= PROGRESS_PER_PHASE, 30), "producers made no progress"
        for name in KILL_ORDER:
            pid, restarts = service_pid(store, name)
            os.kill(pid, signal.SIGKILL)
            assert wait_for(lambda: pid_gone(pid), 10)
            entry = store.wait_service(name, "RUNNING", timeout=60, restarts=restarts + 1)
            assert entry["pid"] != pid
            target = log.acked + PROGRESS_PER_PHASE
            assert wait_for(lambda: log.acked >= target, 60), \
                f"no progress after {name} was restarted: {log.failures[-5:]}"
        stop.set()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), f"{t.name} did not finish its last message"
        assert wait_for(lambda: store.status()["lags"]["dispatch"] == 0
                        and store.status()["lags"]["confirm"] == 0, 30)
        states = {s["name"]: (s["state"], s["restarts"]) for s in store.status()["services"]}
        assert all(states[n] == ("RUNNING", 1) for n in KILL_ORDER), states

        stored = {q["queue_id"]: q["max_offset"]
                  for q in store.call("queue_offsets", endpoint=store.call("hello")[0]["reader"],
                                      topic=TOPIC)[0]["queues"]}
        total = sum(stored.values())
        msgs = consume_topic(store.address, TOPIC, total, group="after")
        check_after_chaos(log, msgs, stored)

        final = {(m.queue_id, m.queue_offset): (m.msg_id, m.uniq_key) for m in msgs}
        wait_for(lambda: len(live.messages) >= total, 30)
        live.stop.set()
        live.join(30)
        assert live.error is None, repr(live.error)
        through = {(q, o): (i, k) for q, o, i, k in live.messages}
        skipped = sorted(set(final) - set(through))
        assert not skipped, (f"the consumer that read during the kills skipped {len(skipped)} of "
                             f"{total} messages, (queue, offset): {skipped[:10]}")
        assert len(through) == len(live.messages) == total, "the live consumer read a message twice"
        assert through == final, "the live consumer read other messages than a reader afterwards"
        stop_and_fsck(store)
    finally:
        stop.set()
        live.stop.set()
        store.ensure_stopped()


def check_after_chaos(log: SendLog, msgs: list, stored: dict) -> None:
    per_queue: dict = {}
    copies: dict = {}
    last_seq: dict = {}
    for m in msgs:
        per_queue.setdefault(m.queue_id, []).append(m.queue_offset)
        key = m.uniq_key
        assert key in log.bodies, f"q{m.queue_id}@{m.queue_offset}: a UNIQ_KEY nobody sent: {key}"
        body = bytes(m.body)
        assert body == log.bodies[key], f"{key}: body differs from what was sent"
        copies[key] = copies.get(key, 0) + 1
        if copies[key] > 1:
            continue                    # a retry's second copy: checked against the attempts below
        _, producer, seq = parse_body(body)
        assert last_seq.get((m.queue_id, producer), -1) < seq, \
            f"{key} at q{m.queue_id}@{m.queue_offset} is out of its producer's order"
        last_seq[(m.queue_id, producer)] = seq
    for q, offsets in per_queue.items():
        assert offsets == list(range(stored[q])), f"queue {q}: offsets read are not 0..{stored[q] - 1}"
    assert len(msgs) == sum(stored.values())

    by_position = {(m.queue_id, m.queue_offset): m for m in msgs}
    lost = []
    for key, (q, off, msg_id) in log.acks.items():
        m = by_position.get((q, off))
        if m is None or m.uniq_key != key or m.msg_id != msg_id:
            lost.append((key, q, off, msg_id, None if m is None else (m.uniq_key, m.msg_id)))
    assert not lost, f"{len(lost)} acknowledged messages not where their ack said: {lost[:5]}"
    bad_dups = [(k, n, log.attempts[k], log.unacked.get(k, 0)) for k, n in copies.items()
                if n > 1 and (not log.unacked.get(k) or n > log.attempts[k])]
    assert not bad_dups, ("(uniq key, copies, attempts, unacknowledged attempts) of messages stored "
                          f"more often than allowed: {bad_dups[:5]}")
    dups = sum(n - 1 for n in copies.values())
    print(f"chaos: {len(log.acks)} acknowledged, {len(msgs)} stored, {dups} retry duplicates, "
          f"{len(log.failures)} failed attempts: {sorted({w for _, w in log.failures})[:6]}")
