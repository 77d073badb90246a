"""The replication wire (ipc/ha_protocol.py): what a side builds, the other parses; anything
else is a ProtocolError, never another exception."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from ipc import ha_protocol as wire
from ipc.protocol import Handlers, ProtocolError, decode_frame0

offsets = st.integers(0, 2**62)


@given(offset=offsets, data=st.binary(min_size=1, max_size=300), master_max=offsets,
       epoch=st.integers(0, 1000), reason=st.text(max_size=30))
def test_pushes_round_trip(offset, data, master_max, epoch, reason):
    chunk = wire.parse_from_master(wire.data(offset, data, master_max))
    assert (chunk.offset, bytes(chunk.data), chunk.master_max) == (offset, data, master_max)
    assert wire.parse_from_master(wire.heartbeat(offset, master_max, epoch)) == wire.Heartbeat(offset, master_max, epoch)
    assert wire.parse_from_master(wire.reset(reason)) == wire.Reset(reason)


@given(store_id=st.text(min_size=1, max_size=20), max_offset=offsets,
       starts=st.lists(st.integers(0, 10**9), max_size=5))
def test_handshake_and_ack_round_trip(store_id, max_offset, starts):
    entries = [[i + 1, s, f"s{i}"] for i, s in enumerate(sorted(starts))]
    env = decode_frame0(wire.handshake(7, store_id, entries, max_offset))
    hs = wire.parse_handshake(env)
    assert (hs.store_id, [list(e) for e in hs.epochs], hs.max_offset) == (store_id, entries, max_offset)
    assert wire.parse_ack(decode_frame0(wire.ack(max_offset))) == max_offset


values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8)
                      | st.binary(max_size=8), lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["op", "rid", "offset", "length", "max_offset",
                                                         "epoch", "reason", "status", "epochs",
                                                         "store_id", "version"]), inner, max_size=6),
                      max_leaves=12)


@settings(max_examples=100)
@given(frame0=values | st.binary(max_size=40), extra=st.lists(st.binary(max_size=20), max_size=2),
       op=st.sampled_from(["data", "heartbeat", "reset", "nonsense", None]))
def test_garbage_is_a_protocol_error_and_nothing_else(frame0, extra, op):
    if isinstance(frame0, dict) and op is not None:
        frame0["op"] = op
    raw = frame0 if isinstance(frame0, bytes) else msgpack.packb(frame0, use_bin_type=True)
    try:
        wire.parse_from_master([raw, *extra])
    except ProtocolError:
        pass
    handlers = Handlers()                       # the master's side: what services/ha/master does
    handlers.op("handshake")(lambda env, frames, peer: wire.parse_handshake(env) and [b""])
    handlers.op("ack")(lambda env, frames, peer: wire.parse_ack(env) and None)
    handlers.handle([raw, *extra])              # never raises


@pytest.mark.slow
@settings(max_examples=400)
@given(frame0=values | st.binary(max_size=40), extra=st.lists(st.binary(max_size=20), max_size=2),
       op=st.sampled_from(["data", "heartbeat", "reset", "nonsense", None]))
def test_garbage_is_a_protocol_error_and_nothing_else_many(frame0, extra, op):
    test_garbage_is_a_protocol_error_and_nothing_else.hypothesis.inner_test(frame0, extra, op)


