"""Timer messages in the embedded store (core.delay.put, core.delay.timer_wheel, core.delay.timer_job):
TIMER_DELIVER_MS, TIMER_DELAY_SEC and TIMER_DELAY_MS delivered no earlier than asked and
within a precision step after, across a restart, with a lost checkpoint (again, none lost),
and many pending with bounded memory."""
import os
import random
import time

import psutil
import pytest

from core import Message
from core.delay.put import TIMER_TOPIC
from core.status import PutMessageStatus
from core.delay.timer_wheel import DIR_NAME


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pull_until(store, topic, want, timeout=15.0, queue_id=0, bodies=None):
    """Pull until `want` messages (or every one of `bodies`) are there, or the deadline."""
    got, seen = [], []
    deadline = time.monotonic() + timeout
    while (len(got) < want if bodies is None else not bodies <= {m.body for m in got}) \
            and time.monotonic() < deadline:
        r = store.get_message("g", topic, queue_id, len(got), 64)
        if r is not None and r.messages:
            t = now_ms()
            got += r.messages
            seen += [t] * len(r.messages)
        else:
            time.sleep(0.005)
    return got, seen


def test_three_timer_properties_delivered_on_time(tiny_config, open_store):
    store = open_store(tiny_config())
    t0 = now_ms()
    asks = [("TIMER_DELIVER_MS", str(t0 + 2500), t0 + 2500),
            ("TIMER_DELAY_SEC", "1", None), ("TIMER_DELAY_MS", "1700", None)]
    due = {}
    for name, value, at in asks:
        before = now_ms()
        r = store.put_message(Message("orders", name.encode(), tags="T",
                                      properties={name: value, "UNIQ_KEY": "U" + name, "a": "b"}))
        assert r.ok
        due[name.encode()] = at or before + int(value) * (1000 if name.endswith("SEC") else 1)
    assert store.wait_for_dispatch()
    assert store.get_message("g", TIMER_TOPIC, 0, 0, 8).messages[0].properties["REAL_TOPIC"] == "orders"
    got, seen = pull_until(store, "orders", 3)
    assert [m.body for m in got] == [b"TIMER_DELAY_SEC", b"TIMER_DELAY_MS", b"TIMER_DELIVER_MS"]
    for m, t in zip(got, seen):
        name = m.body.decode()
        assert m.store_timestamp >= due[m.body] - 2        # the asked time (ms rounding of "now")
        assert t - due[m.body] < 1000 + 100                # within timer_precision_ms
        assert name not in m.properties and "TIMER_OUT_MS" in m.properties
        assert m.properties["UNIQ_KEY"] == "U" + name and m.properties["a"] == "b"
        assert m.tags == "T" and m.topic == "orders"


def test_timer_limits(tiny_config, open_store):
    store = open_store(tiny_config(timer_max_delay_sec=60))
    assert store.put_message(Message("t", b"x", properties={"TIMER_DELAY_SEC": "61"})).status \
        is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(Message("t", b"x", properties={"TIMER_DELAY_MS": "later"})).status \
        is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(Message("t", b"past", properties={"TIMER_DELIVER_MS": "1000"})).ok
    assert store.wait_for_dispatch()
    assert [m.body for m in store.get_message("g", "t", 0, 0, 4).messages] == [b"past"]
    batch = [Message("t", b"b", properties={"TIMER_DELAY_SEC": "1"})] * 2
    assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL


@pytest.mark.parametrize("checkpoint", ["kept", "lost"])
def test_timers_at_arbitrary_times_across_a_restart(tiny_config, open_store, checkpoint):
    cfg = tiny_config()
    store = open_store(cfg)
    rng = random.Random(7)
    t0 = now_ms()
    due = {}
    for i in range(40):
        at = t0 + rng.randrange(300, 4000)
        body = b"m%02d" % i
        assert store.put_message(Message("t", body, properties={"TIMER_DELIVER_MS": str(at)})).ok
        due[body] = at
    got, _ = pull_until(store, "t", 5)
    store.shutdown()
    if checkpoint == "lost":
        os.remove(os.path.join(cfg.store_path_root_dir, DIR_NAME, "checkpoint.json"))
    store = open_store(cfg)
    got, seen = pull_until(store, "t", 0, timeout=20, bodies=set(due))
    bodies = [m.body for m in got]
    assert set(bodies) == set(due)                              # none lost
    if checkpoint == "kept":
        assert len(bodies) == len(due)                          # a clean stop: none twice
        for m, t in zip(got, seen):
            assert m.store_timestamp >= due[m.body]
            assert t - max(due[m.body], t0) < 1000 + 1500 or m.store_timestamp - due[m.body] < 1000
    got_due = [due[b] for b in bodies[:len(due)]]
    assert got_due == sorted(got_due) or checkpoint == "lost"   # in time order


@pytest.mark.slow
def test_a_million_pending_timers_with_bounded_memory(tiny_config, open_store):
    cfg = tiny_config(mapped_file_size_commitlog=64 << 20, mapped_file_size_consume_queue=20 * 300000)
    store = open_store(cfg)
    proc = psutil.Process()
    t0 = now_ms()
    rss0 = proc.memory_info().rss
    n = 1_000_000
    for i in range(n):
        m = Message("far", b"%07d" % i, properties={"TIMER_DELIVER_MS": str(t0 + 600_000 + i % 3_000_000)})
        assert store.put_message(m).ok
    timers = store.schedule_service.timers
    deadline = time.monotonic() + 600
    while timers.enqueued < n and time.monotonic() < deadline:
        time.sleep(0.2)
    assert timers.enqueued == n
    assert timers.pending() == n
    grown = proc.memory_info().rss - rss0
    assert grown < 300 << 20, grown                 # 1M records on disk, not in memory
    wheel = os.path.join(cfg.store_path_root_dir, DIR_NAME)
    assert sum(os.path.getsize(os.path.join(wheel, f)) for f in os.listdir(wheel)
               if f.isdigit()) == n * 28


def test_short_precision_step_honoured(tiny_config, open_store):
    """timer_precision_ms = 200: each timer stored at the first 200 ms boundary at or after its
    time (plus the put's own time), never before it."""
    store = open_store(tiny_config(timer_precision_ms=200))
    rng = random.Random(7)
    due = {}
    for i in range(30):
        at = now_ms() + 300 + rng.randrange(1500)
        assert store.put_message(Message("p", b"s%02d" % i, properties={"TIMER_DELIVER_MS": str(at)})).ok
        due[b"s%02d" % i] = at
    got, _ = pull_until(store, "p", len(due))
    assert {m.body for m in got} == set(due)
    late = []
    for m in got:
        boundary = -(-due[m.body] // 200) * 200
        assert m.store_timestamp >= boundary                   # never before its step
        late.append(m.store_timestamp - boundary)
    assert sorted(late)[len(late) // 2] < 100                  # at the step (a loaded machine: median)
