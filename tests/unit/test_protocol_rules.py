"""The envelope rules of docs/PROTOCOL.md that `ipc.protocol.Handlers` enforces for every
service: which `rid` an error reply carries, that a request without a `rid` is refused before
its handler runs, and that an operation taking no body frames refuses extra frames."""
from __future__ import annotations

import pytest

from ipc.protocol import ErrorCode, Handlers, ProtocolError, pack, reply, unpack


class Table:
    """A Handlers table with op `info` registered the plain way (no body frames) and a record
    of what the handlers were called with; `declare()` adds a handler-checked op `put` and a
    two-frame op `pair`."""

    def __init__(self):
        self.calls = []
        self.handlers = Handlers()
        self.handlers.op("info")(self.info)
        self.handlers.op("put")(self.put)

    def declare(self) -> "Table":
        self.handlers.op("put", body_frames=None)(self.put)
        self.handlers.op("pair", body_frames=2)(self.info)
        return self

    def info(self, env, frames, peer):
        self.calls.append((env["op"], list(frames)))
        return reply(env["rid"], "OK")

    def put(self, env, frames, peer):
        self.calls.append(("put", list(frames)))
        if len(frames) != 1:
            raise ProtocolError(ErrorCode.TOO_MANY_FRAMES, f"put takes one body frame, got {len(frames)}")
        return reply(env["rid"], "PUT_OK")

    def send(self, *frames) -> dict:
        out = self.handlers.handle(list(frames))
        assert out is not None and len(out) == 1
        return unpack(out[0])


def error(rep: dict) -> tuple:
    assert rep["status"] == "ERROR" and isinstance(rep["reason"], str) and rep["reason"], rep
    return rep["rid"], rep["code"]


# -- item: an error reply echoes every rid that could be read ----------------------------
@pytest.mark.parametrize("env, rid", [
    ({"rid": 77}, 77),                              # no op
    ({"op": 5, "rid": 78}, 78),                     # op not a string
    ({"op": None, "rid": 79}, 79),
    ({"op": b"info", "rid": 80}, 80),               # op as msgpack bin
    ({"op": "frobnicate", "rid": 81}, 2),           # unknown op: code 2, rid kept
])
def test_error_reply_echoes_a_readable_rid(env, rid):
    t = Table()
    rep = t.send(pack(env))
    if env.get("op") == "frobnicate":
        assert error(rep) == (81, ErrorCode.UNKNOWN_OP)
    else:
        assert error(rep) == (rid, ErrorCode.BAD_FIELD)
    assert t.calls == []


@pytest.mark.parametrize("frames, code", [
    ([b"\xc1junk"], ErrorCode.MALFORMED_FRAME),
    ([pack([1, 2])], ErrorCode.MALFORMED_FRAME),
    ([b""], ErrorCode.MALFORMED_FRAME),
    ([], ErrorCode.MALFORMED_FRAME),
])
def test_undecodable_frame0_gets_rid_0(frames, code):
    t = Table()
    assert error(t.send(*frames)) == (0, code)


# -- item: a request without an integer rid is refused -----------------------------------
@pytest.mark.parametrize("env", [
    {"op": "info"}, {"op": "info", "rid": None}, {"op": "info", "rid": "7"},
    {"op": "info", "rid": True}, {"op": "info", "rid": 1.5}, {"op": "info", "rid": [1]},
])
def test_request_without_integer_rid_is_bad_field_with_rid_0(env):
    t = Table()
    rep = t.send(pack(env))
    assert error(rep) == (0, ErrorCode.BAD_FIELD)
    assert "rid" in rep["reason"]
    assert t.calls == []


def test_put_without_rid_never_reaches_its_handler():
    t = Table()
    assert error(t.send(pack({"op": "put", "topic": "T"}), b"body")) == (0, ErrorCode.BAD_FIELD)
    assert t.calls == []


@pytest.mark.parametrize("rid", [-5, -(1 << 63), 1, (1 << 64) - 1])
def test_any_integer_rid_is_echoed(rid):
    t = Table()
    assert t.send(pack({"op": "info", "rid": rid})) == {"rid": rid, "status": "OK"}
    assert error(t.send(pack({"op": "nope", "rid": rid}))) == (rid, ErrorCode.UNKNOWN_OP)


# -- item: body frames must match what the op takes --------------------------------------
@pytest.mark.parametrize("extra", [[b""], [b"x"], [b"x", b"y"]])
def test_op_without_body_frames_refuses_extra_frames(extra):
    t = Table()
    rep = t.send(pack({"op": "info", "rid": 9}), *extra)
    assert error(rep) == (9, ErrorCode.TOO_MANY_FRAMES)
    assert "info" in rep["reason"]
    assert t.calls == []
    assert t.send(pack({"op": "info", "rid": 10})) == {"rid": 10, "status": "OK"}


def test_declared_frame_count_is_enforced():
    t = Table().declare()
    for extra in ([], [b"a"], [b"a", b"b", b"c"]):
        assert error(t.send(pack({"op": "pair", "rid": 3}), *extra)) == (3, ErrorCode.TOO_MANY_FRAMES)
    assert t.send(pack({"op": "pair", "rid": 4}), b"a", b"b") == {"rid": 4, "status": "OK"}
    assert t.calls == [("pair", [b"a", b"b"])]


def test_an_op_that_checks_its_own_frames_gets_them_all():
    t = Table().declare()
    assert t.send(pack({"op": "put", "rid": 1}), b"body") == {"rid": 1, "status": "PUT_OK"}
    assert error(t.send(pack({"op": "put", "rid": 2}), b"a", b"b")) == (2, ErrorCode.TOO_MANY_FRAMES)
    assert t.calls == [("put", [b"body"]), ("put", [b"a", b"b"])]


def test_handler_bug_is_internal_with_the_rid():
    h = Handlers()
    h.op("boom")(lambda env, frames, peer: 1 / 0)
    rep = unpack(h.handle([pack({"op": "boom", "rid": 12})])[0])
    assert error(rep) == (12, ErrorCode.INTERNAL)
