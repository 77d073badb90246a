"""Pipelined pulls in ipc.consumer.Consumer, against a scripted reader on a real ZeroMQ socket
that answers pulls like the store does (at most `cap` messages from the requested offset,
RocketMQ's in-memory count limit): several pulls in flight per queue, replies that come out of
order taken in offset order, speculative pulls abandoned when a reply ends early, prefetched
messages dropped by seeks, and no queue starved by another's backlog. Records are real
CommitLog records (core.record.codec)."""
from __future__ import annotations

import gc
import random
import threading
import time

import pytest
import zmq

from ipc.consumer import Consumer
from ipc.received import RecordSpans
from tests.unit.scripted_peer import Peer
from tests.unit.test_consumer import records


class QueueSim:
    """A reader of one topic whose queue q holds offsets [0, sizes[q]). A pull at `o` answers
    FOUND with up to `cap` messages (fewer where `short` says so), OFFSET_OVERFLOW_ONE at the
    end; `hold(env)` true keeps the request until the test releases it."""

    def __init__(self, sizes, cap=32, short=None, hold=None):
        self.sizes = dict(enumerate(sizes))
        self.offset_by_time = 0
        self.cap = cap
        self.short = dict(short or {})          # (queue, offset) -> count answered there
        self.hold = hold or (lambda env: False)
        self.pulls = []
        self.lock = threading.Lock()

    def __call__(self, env, frames):
        op = env["op"]
        if op == "topic_info":
            return {"status": "OK", "topic": env["topic"], "queues": len(self.sizes)}
        if op == "fetch_offset":
            return {"status": "OK", "offset": -1}
        if op == "queue_offsets":
            return {"status": "OK", "queues": [{"queue_id": q, "min_offset": 0, "max_offset": n}
                                               for q, n in self.sizes.items()]}
        if op == "commit_offset":
            return {"status": "OK"}
        if op == "offset_by_time":
            return {"status": "OK", "offset": self.offset_by_time}
        if op == "pull":
            with self.lock:
                self.pulls.append((env["queue_id"], env["offset"]))
            if self.hold(env):
                return None
            return self.answer(env)
        return {"status": "ERROR", "code": 2, "reason": op}

    def answer(self, env) -> dict:
        q, o = env["queue_id"], env["offset"]
        hi = self.sizes[q]
        if o >= hi:
            return {"status": "OFFSET_OVERFLOW_ONE", "next_begin_offset": o, "min_offset": 0,
                    "max_offset": hi, "count": 0, "_frames": [b""]}
        n = min(self.short.get((q, o), self.cap), env["max_msgs"], hi - o)
        offsets = range(o, o + n)
        return {"status": "FOUND", "next_begin_offset": o + n, "min_offset": 0, "max_offset": hi,
                "count": n, "_frames": [records("t", q, offsets)]}


class SimPeer(Peer):
    """A Peer whose thread ends quietly when it answers a consumer that has gone (the tests
    close consumers with pulls still in flight; ROUTER_MANDATORY then refuses the reply)."""

    def _run(self):
        try:
            super()._run()
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise


@pytest.fixture
def sim():
    peers = []

    def make(sizes, **kw):
        script = QueueSim(sizes, **kw)
        peer = SimPeer(script)
        peers.append(peer)
        return script, peer
    yield make
    for p in peers:
        p.close()


def drain(c: Consumer, until, timeout: float = 20.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out += c.poll(100)
        if until(out):
            break
    return out


def by_queue(msgs) -> dict:
    out: dict = {}
    for m in msgs:
        out.setdefault(m.queue_id, []).append(m.queue_offset)
    return out


def wait_held(peer: Peer, n: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(peer.held) < n:
        assert time.monotonic() < deadline, f"only {len(peer.held)} pulls held, wanted {n}"
        time.sleep(0.005)


def test_every_message_once_and_in_queue_order(sim):
    sizes = [700, 333, 65, 0]
    script, peer = sim(sizes)
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50) as c:
        got = drain(c, lambda out: len(out) >= sum(sizes))
        assert c.positions() == dict(enumerate(sizes))
    assert by_queue(got) == {q: list(range(n)) for q, n in enumerate(sizes) if n}
    assert [m.body for m in got if m.queue_id == 2] == [b"m%d" % o for o in range(65)]


def test_several_pulls_of_one_queue_are_in_flight(sim):
    # Hold every pull of the queue: a consumer that pipelines sends its speculative pulls
    # (at 32, 64, 96 after a full first reply) without waiting for the one at 32.
    script, peer = sim([1000], hold=lambda env: env["offset"] > 0)
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50,
                  pipeline_depth=4) as c:
        first = drain(c, lambda out: len(out) >= 32, timeout=5)
        assert [m.queue_offset for m in first] == list(range(32))
        wait_held(peer, 4)
        assert sorted(o for _, o in script.pulls[1:5]) == [32, 64, 96, 128]
        peer.release(script.answer)
        got = drain(c, lambda out: len(out) >= 128)
    assert [m.queue_offset for m in got[:128]] == list(range(32, 160))


def test_replies_out_of_order_are_taken_in_offset_order(sim):
    rng = random.Random(7)
    script, peer = sim([800], hold=lambda env: True)
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=2000,
                  pipeline_depth=4) as c:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 800 and time.monotonic() < deadline:
            got += c.poll(20)
            if peer.held:
                time.sleep(0.01)                      # let the consumer send what it will
                held, peer.held = peer.held, []
                rng.shuffle(held)
                with peer._lock:
                    peer._releases += [peer._reply(p, e, script.answer(e)) for p, e in held]
        assert [m.queue_offset for m in got] == list(range(800))
        assert c.positions() == {0: 800}
    assert peer.max_held > 1                      # several pulls were in flight at once


def test_a_short_reply_abandons_the_speculative_pulls(sim):
    # The pull at 64 answers 10 messages (a byte limit, say): the pulls sent at 96, 128, ...
    # are wrong; the consumer drops their answers and goes on at 74.
    script, peer = sim([600], short={(0, 64): 10, (0, 202): 1})
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50) as c:
        got = drain(c, lambda out: len(out) >= 600)
        assert c.positions() == {0: 600}
    assert [m.queue_offset for m in got] == list(range(600))
    assert (0, 74) in script.pulls and (0, 203) in script.pulls


def test_seek_drops_prefetched_replies(sim):
    # Hold pulls past 100 so that prefetched answers arrive after the seek, too.
    release = threading.Event()
    script, peer = sim([2000], hold=lambda env: env["offset"] >= 100 and not release.is_set())
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=2000) as c:
        first = c.poll(1000, max_records=5)
        while len(first) < 5:
            first += c.poll(1000, max_records=5 - len(first))
        assert [m.queue_offset for m in first] == [0, 1, 2, 3, 4]
        wait_held(peer, 1)                         # pulls past 100 are in flight, unanswered
        c.seek(0, 1500)
        release.set()
        peer.release(script.answer)                # the old pulls' answers come now: dropped
        after = drain(c, lambda out: len(out) >= 500)
        assert [m.queue_offset for m in after] == list(range(1500, 2000))
        c.seek(0, 7)                                # and back, behind what was prefetched
        again = drain(c, lambda out: len(out) >= 50)
        assert [m.queue_offset for m in again[:50]] == list(range(7, 57))
        assert c.positions()[0] == again[-1].queue_offset + 1


def test_seek_to_timestamp_drops_prefetched_replies(sim):
    script, peer = sim([3000])
    script.offset_by_time = 2990
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50) as c:
        first = drain(c, lambda out: len(out) >= 40)
        assert [m.queue_offset for m in first[:40]] == list(range(40))
        assert c.seek_to_timestamp(12345) == {0: 2990}
        rest = drain(c, lambda out: len(out) >= 10)
        assert [m.queue_offset for m in rest] == list(range(2990, 3000))


@pytest.mark.parametrize("max_in_flight", [2, 16])
def test_a_backlog_does_not_starve_the_other_queues(sim, max_in_flight):
    # Queue 0 has a deep backlog; the others are short. Every queue gets its next pull before
    # any gets a speculative one, so the short queues are done long before queue 0 is.
    sizes = [20000, 40, 40, 40]
    script, peer = sim(sizes)
    with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50,
                  max_in_flight=max_in_flight) as c:
        got = drain(c, lambda out: all(len(v) >= 40 for q, v in by_queue(out).items() if q) and
                    len(by_queue(out)) == 4)
    queues = by_queue(got)
    assert all(queues[q] == list(range(40)) for q in (1, 2, 3))
    assert queues[0] == list(range(len(queues[0]))) and len(queues[0]) < 20000 // 4


def test_messages_are_made_when_poll_hands_them_out_with_the_collector_paused(sim, monkeypatch):
    script, peer = sim([3000, 3000], cap=600)
    made_in_collection, making = [], [False]
    real_views = RecordSpans.views

    def views(spans):
        making[0] = True
        try:
            return real_views(spans)
        finally:
            making[0] = False

    def watch(phase, info):
        if phase == "start" and making[0]:
            made_in_collection.append(info["generation"])
    monkeypatch.setattr(RecordSpans, "views", views)
    threshold = gc.get_threshold()
    gc.set_threshold(50)                          # a collection every 50 new objects, unless paused
    gc.callbacks.append(watch)
    try:
        with Consumer(peer.endpoint, "g", "t", auto_commit=False, max_msgs=1024, long_poll_ms=50) as c:
            first = c.poll(5000, max_records=1)
            deadline = time.monotonic() + 10
            while not any(type(e[1]) is RecordSpans for e in c._pulls.ready):   # found, not made yet
                assert time.monotonic() < deadline, "no reply buffered as found records"
                c._conn.wait(c._pulls.has_arrivals, 0.1)
                c._pulls.process()
            assert gc.isenabled()
            gc.disable()
            rest = drain(c, lambda out: len(first) + len(out) >= 6000)
            assert not gc.isenabled()                 # the application's choice is kept
            gc.enable()
    finally:
        gc.callbacks.remove(watch)
        gc.set_threshold(*threshold)
    assert by_queue(first + rest) == {0: list(range(3000)), 1: list(range(3000))}
    assert made_in_collection == []


class FakeCollector:
    """Stands for the gc module in ipc.pulls: an enabled flag, and a hook run when a thread
    has read it (the moment a second consumer thread reads "disabled" as the first is done)."""

    def __init__(self):
        self.enabled = True
        self.after_read = None

    def isenabled(self):
        seen = self.enabled
        if self.after_read is not None:
            self.after_read()
        return seen

    def disable(self):
        self.enabled = False

    def enable(self):
        self.enabled = True


def test_two_threads_making_messages_leave_the_collector_enabled(monkeypatch):
    import ipc.pulls as pulls
    fake = FakeCollector()
    monkeypatch.setattr(pulls, "gc", fake)
    monkeypatch.setattr(pulls, "_PAUSE", pulls._CollectorPause())
    first_inside, second_read, first_done = threading.Event(), threading.Event(), threading.Event()

    class Slow(RecordSpans):
        def views(self):
            first_inside.set()
            second_read.wait(0.5)         # the second thread reads the flag meanwhile (if it does)
            return []

    def second_reads():
        if threading.current_thread().name == "second":
            second_read.set()
            first_done.wait(0.5)          # ... and disables only after the first enabled again

    slow = Slow(b"")
    slow.starts.append(0)
    quick = RecordSpans(b"")
    quick.starts.append(0)
    fake.after_read = second_reads
    first = threading.Thread(target=lambda: (pulls.hand_out(slow), first_done.set()), name="first")
    first.start()
    assert first_inside.wait(5)
    second = threading.Thread(target=pulls.hand_out, args=(quick,), name="second")
    second.start()
    first.join(5)
    second.join(5)
    assert fake.enabled


def test_making_messages_sets_off_no_collection_of_the_last_ones_made():
    import ipc.pulls as pulls
    spans = RecordSpans(b"x" * 4096)
    spans.starts.extend(range(1000))
    spans.lens.extend([8] * 1000)
    inside, started = [False], []

    def watch(phase, info):
        if phase == "start" and inside[0]:
            started.append(info["generation"])
    threshold = gc.get_threshold()
    gc.callbacks.append(watch)
    gc.set_threshold(1)                  # any tracked allocation while enabled collects
    try:
        last = pulls.hand_out(spans)     # alive, young: a collection now would walk them
        inside[0] = True
        made = pulls.hand_out(spans)
        inside[0] = False
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(watch)
    assert len(last) == len(made) == 1000 and gc.isenabled()
    assert started == []
