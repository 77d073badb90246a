"""The auto-batching rules (ipc/accumulator.py), with no store: what is sealed when, in what
order, within which limits, and how a batch reply is split into one SendResult per message."""
from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from core.status import PutMessageStatus
from ipc.accumulator import Accumulator, Pending, request, results, singles
from ipc.producer import message_fields


def pending(body: bytes, **kw) -> Pending:
    meta, frame, uniq = message_fields(body, **kw)
    return Pending(meta, frame, uniq, None)


sends = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5000), st.booleans(),
                           st.floats(0, 0.05)), max_size=80)


@settings(max_examples=200, deadline=None)
@given(sends)
def test_every_message_is_sealed_once_in_order_within_the_limits(ops):
    acc = Accumulator(0.01, 8192, 1 << 30)
    now = 0.0
    sealed = []
    sent = {}
    for queue, size, tagged, dt in ops:
        now += dt
        p = pending(b"x" * size, tags="T" if tagged else None)
        sent.setdefault(queue, []).append(p)
        sealed += acc.add("T", queue, True, p, now)
        sealed += acc.due(now)
    sealed += acc.drain()
    per_queue = {}
    for batch in sealed:
        assert batch.items and (len(batch.items) == 1 or batch.size <= 8192)
        assert batch.size == sum(len(p.frame) for p in batch.items)
        per_queue.setdefault(batch.queue_id, []).extend(batch.items)
    assert per_queue == {q: ps for q, ps in sent.items()}
    assert acc.held == sum(b.size for b in sealed)
    for batch in sealed:
        acc.release(batch)
    assert acc.held == 0


def test_a_message_the_store_refuses_goes_alone_after_its_queue_s_batch():
    acc = Accumulator(1.0, 1 << 20, 1 << 30)
    first = [pending(b"a%d" % i) for i in range(3)]
    for p in first:
        assert acc.add("T", 0, True, p, 0.0) == []
    bad = pending(b"b", tags="bad\x01tag")
    out = acc.add("T", 0, True, bad, 0.0)
    assert [b.items for b in out] == [first, [bad]]
    big = pending(b"B" * (2 << 20))
    assert [b.items for b in acc.add("T", 0, True, big, 0.0)] == [[big]]


def test_store_limits_cap_a_batch():
    acc = Accumulator(1.0, 1 << 20, 1 << 30)
    acc.store_limits(1000, 1 << 30)
    out = []
    for _ in range(5):
        out += acc.add("T", 0, True, pending(b"x" * 400), 0.0)
    assert [len(b.items) for b in out] == [2, 2]
    acc = Accumulator(1.0, 1 << 20, 1 << 30)
    acc.store_limits(None, 2048)                    # records of ~600 bytes: 3 per segment
    out = []
    for _ in range(7):
        out += acc.add("T", 0, True, pending(b"x" * 400), 0.0)
    assert [len(b.items) for b in out] == [3, 3]


def test_the_buffer_bounds_what_is_held():
    acc = Accumulator(1.0, 1 << 20, 1000)
    assert acc.has_room(5000)                       # an empty buffer takes any message
    acc.add("T", 0, True, pending(b"x" * 800), 0.0)
    assert acc.has_room(200) and not acc.has_room(201)


def test_requests_and_per_message_results():
    acc = Accumulator(1.0, 1 << 20, 1 << 30)
    plain = [pending(b"p%d" % i) for i in range(3)]
    for p in plain:
        acc.add("T", 2, True, p, 0.0)
    (batch,) = acc.drain()
    op, fields, frames = request(batch)
    assert op == "put_batch" and fields["sizes"] == [2, 2, 2] and frames == [b"p0p1p2"]
    assert fields["uniq_key_block"] == "".join(p.uniq for p in plain).encode()
    assert fields["queue_id"] == 2 and fields["id_format"] == "offsets"
    host = bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    env = {"status": "PUT_OK", "queue_id": 2, "queue_offset": 7, "phys_offset": 100,
           "phys_offsets": struct.pack(">3q", 100, 200, 300), "store_host": host,
           "store_timestamp": 5, "count": 3}
    out = results(batch, env)
    assert [(r.queue_offset, r.phys_offset, r.uniq_key, r.count) for r in out] == \
        [(7 + i, 100 * (i + 1), plain[i].uniq, 1) for i in range(3)]
    assert out[1].msg_id == "7F00000100002A9F" + "%016X" % 200
    refused = {"status": "MESSAGE_ILLEGAL", "reason": "message 1 of the batch: ..."}
    assert results(batch, refused) is None                      # the driver splits it
    assert [b.items for b in singles(batch)] == [[p] for p in plain]
    assert all(b.queue_id == 2 and b.size == 2 for b in singles(batch))
    busy = results(batch, {"status": "SERVICE_NOT_AVAILABLE"})
    assert [r.status for r in busy] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 3
    tagged = pending(b"t", tags="A", keys=["k"])
    acc.add("T", 0, False, tagged, 0.0)
    (one,) = acc.drain()
    op, fields, frames = request(one)
    assert op == "put" and fields["tags"] == "A" and fields["keys"] == ["k"] and fields["wait"] is False


@settings(max_examples=200, deadline=None)
@given(sends)
def test_the_short_path_of_a_plain_message_seals_as_add_does(ops):
    slow, fast = Accumulator(0.01, 8192, 1 << 30), Accumulator(0.01, 8192, 1 << 30)
    fast.store_limits(None, 20_000)
    slow.store_limits(None, 20_000)
    now = 0.0
    for queue, size, _tagged, dt in ops:
        now += dt
        a = slow.add("T", queue, True, Pending(None, b"x" * size, None, None), now)
        b = fast.add_plain(("T", queue, True), Pending(None, b"x" * size, None, None), now)
        assert [len(x.items) for x in a] == [len(x.items) for x in b]
        assert slow.opened == fast.opened and slow.held == fast.held
        assert [len(x.items) for x in slow.due(now)] == [len(x.items) for x in fast.due(now)]
    assert [len(x.items) for x in slow.drain()] == [len(x.items) for x in fast.drain()]


def test_a_batch_of_plain_messages_gets_its_keys_as_one_block_when_sealed():
    acc = Accumulator(1.0, 1 << 20, 1 << 30)
    for i in range(3):
        acc.add_plain(("T", 1, True), Pending(None, b"b%d" % i, None, None), 0.0)
    (batch,) = acc.drain()
    op, fields, frames = request(batch)
    block = fields["uniq_key_block"]
    assert op == "put_batch" and len(block) == 96 and frames == [b"b0b1b2"]
    env = {"status": "PUT_OK", "queue_id": 1, "queue_offset": 3, "phys_offset": 50,
           "phys_offsets": struct.pack(">3q", 50, 60, 70),
           "store_host": bytes([127, 0, 0, 1]) + struct.pack(">i", 10911), "store_timestamp": 5, "count": 3}
    out = results(batch, env)
    assert [r.uniq_key.encode() for r in out] == [block[i * 32:i * 32 + 32] for i in range(3)]
    assert [(r.queue_offset, r.phys_offset, r.count, r.ok) for r in out] == [(3, 50, 1, True), (4, 60, 1, True),
                                                                          (5, 70, 1, True)]
    assert out[2].msg_ids == ["7F00000100002A9F" + "%016X" % 70]
    assert [b.items[0].uniq.encode() for b in singles(batch)] == [block[i * 32:i * 32 + 32] for i in range(3)]
    one = request(singles(batch)[0])[1]
    assert one["properties"] == {"UNIQ_KEY": block[:32].decode()}
