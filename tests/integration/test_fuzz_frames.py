"""Random frames against a real supervised store: random bytes, random msgpack values, maps
with known ops and random or wrongly typed fields, unknown ops, empty frames, too many frames
and huge bodies, sent to the front door, the appender and the reader. Every request must get
one reply: an error reply (status "ERROR" with a known code) or a proper status of the op,
carrying frame 0's `rid` whenever that is an integer (else 0); a request without an integer
`rid` is never carried out, and an op without body frames refuses extra frames.
Afterwards no service has restarted, and a normal put and pull still work.

The generator is seeded (printed on failure) so a failing case can be replayed."""
from __future__ import annotations

import collections
import os
import random
import string

import msgpack
import pytest
import zmq

from core.status import GetMessageStatus, PutMessageStatus
from ipc import Consumer, Producer
from ipc.protocol import ErrorCode
from ipc.sockets import make_socket
from tests.integration.supervised import SupervisedStore

CONFIG = {"mapped_file_size_commitlog": 512 * 1024, "max_message_size": 64 * 1024}
OPS = {
    "front": ["hello", "status", "topics"],                       # never "stop"
    "appender": ["put", "put_batch", "create_topic", "topic_info"],
    "reader": ["pull", "query_by_key", "view_by_id", "look_by_offset", "offset_by_time",
               "queue_offsets", "commit_offset", "fetch_offset", "consumer_lag", "topics", "topic_info"],
}
FIELDS = ["topic", "queue_id", "flag", "tags", "keys", "properties", "born_timestamp", "born_host",
          "wait", "sizes", "messages", "queues", "group", "offset", "max_msgs", "tag_filter",
          "poll_ms", "format", "key", "max_num", "begin_ts", "end_ts", "msg_id", "phys_offset",
          "timestamp"]
REQUIRED = {
    "put": ["topic"], "put_batch": ["topic", "sizes"], "create_topic": ["topic", "queues"],
    "topic_info": ["topic"], "pull": ["group", "topic", "queue_id", "offset"],
    "query_by_key": ["topic", "key"], "view_by_id": ["msg_id"], "look_by_offset": ["phys_offset"],
    "offset_by_time": ["topic", "queue_id", "timestamp"], "queue_offsets": ["topic"],
    "commit_offset": ["group", "topic", "queue_id", "offset"],
    "fetch_offset": ["group", "topic", "queue_id"], "consumer_lag": ["group", "topic"],
}
BODY_OPS = {"put", "put_batch"}                       # the only ops that take body frames
STATUSES = ({"OK", "ERROR"} | {s.value for s in PutMessageStatus} | {s.value for s in GetMessageStatus})
CASES_PER_ENDPOINT = 400
SEED = int(os.environ.get("FUZZ_FRAMES_SEED", "20261122"))


class Fuzzer:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def text(self, n: int = 12) -> str:
        alphabet = string.ascii_letters + string.digits + "_-%| !é\x00\x01\x02日"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, n)))

    def value(self, depth: int = 0):
        r = self.rng
        kinds = ["int", "bigint", "neg", "float", "str", "bytes", "nil", "bool"]
        if depth < 2:
            kinds += ["list", "map"]
        kind = r.choice(kinds)
        if kind == "int":
            return r.randint(0, 2000)
        if kind == "bigint":
            return r.choice([2 ** 31, 2 ** 63 - 1, 2 ** 64 - 1, 2 ** 40])
        if kind == "neg":
            return -r.randint(1, 2 ** 63)
        if kind == "float":
            return r.random() * 1e6
        if kind == "str":
            return self.text()
        if kind == "bytes":
            return r.randbytes(r.randint(0, 16))
        if kind == "nil":
            return None
        if kind == "bool":
            return r.random() < 0.5
        if kind == "list":
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {self.text(6): self.value(depth + 1) for _ in range(r.randint(0, 4))}

    def plausible(self, name: str):
        """A value of the right type most of the time, so that deeper checks are reached."""
        r = self.rng
        if r.random() < 0.3:
            return self.value()
        if name in ("topic", "group"):
            return r.choice(["fuzz", "fuzz", "fuzz-b", "", "x" * 130, self.text(8)])
        if name == "poll_ms":
            return r.randint(0, 150)                      # held pulls answer within the test
        if name in ("queue_id", "flag", "offset", "max_msgs", "max_num", "queues"):
            return r.choice([0, 1, 3, 4, 1024, 1025, -1, 2 ** 31])
        if name in ("born_timestamp", "begin_ts", "end_ts", "timestamp", "phys_offset"):
            return r.choice([0, 1, 2 ** 40, 2 ** 63 - 1])
        if name == "sizes":
            return [r.randint(0, 5) for _ in range(r.randint(0, 4))]
        if name == "messages":
            return [r.choice([None, {}, {"tags": "T"}, {"properties": {"a": "b"}}, self.value()])
                    for _ in range(r.randint(0, 4))]
        if name == "properties":
            return {self.text(5): self.text(5) for _ in range(r.randint(0, 3))}
        if name == "format":
            return r.choice(["raw", "fields", "xml"])
        if name == "wait":
            return r.random() < 0.5
        if name == "born_host":
            return r.choice(["1.2.3.4:5", "[::1]:7", "nohost", "1.2.3.4:99999"])
        if name == "msg_id":
            return r.choice(["7F00000100002A9F0000000000000000", "ZZ", self.text(32)])
        return self.text(10)

    def request(self, endpoint: str) -> list:
        """The frames of one random request to `endpoint`."""
        r = self.rng
        kind = r.choice(["bytes", "value", "map", "map", "map", "map", "unknown", "empty", "huge", "frames"])
        if kind == "bytes":
            return [r.randbytes(r.randint(1, 64))]
        if kind == "value":
            return [msgpack.packb(self.value(), use_bin_type=True)]
        if kind == "empty":
            return [b""]
        op = r.choice(OPS[endpoint]) if kind != "unknown" else r.choice(["", "frobnicate", "PUT", "stop2"])
        env = {"op": op if r.random() > 0.05 else self.value()}
        if r.random() > 0.05:                              # mostly a proper rid; else none or junk
            env["rid"] = r.choice([r.randint(1, 2 ** 31), r.randint(1, 2 ** 31), -r.randint(1, 2 ** 63)])
        elif r.random() < 0.5:
            env["rid"] = self.value()
        for name in REQUIRED.get(op, ()):                 # mostly present, so checks go deeper
            if r.random() < 0.9:
                env[name] = self.plausible(name)
        for name in r.sample(FIELDS, r.randint(0, 5)):
            env.setdefault(name, self.plausible(name))
        frames = [msgpack.packb(env, use_bin_type=True)]
        sizes = env.get("sizes")
        takes_body = op in BODY_OPS
        if kind == "huge":
            frames.append(b"h" * r.choice([64 * 1024 + 1, 5 * 1024 * 1024]))
        elif kind == "frames":
            frames += [r.randbytes(r.randint(0, 8)) for _ in range(r.randint(2, 5))]
        elif (isinstance(sizes, list) and all(type(n) is int and 0 <= n <= 4096 for n in sizes)
              and r.random() < 0.7):
            frames.append(r.randbytes(sum(sizes)))        # a body frame that matches `sizes`
        elif r.random() < (0.7 if takes_body else 0.1):   # ops without a body: mostly none
            frames.append(r.randbytes(r.randint(0, 20)))
        return frames


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("fuzz"), **CONFIG).start()
    yield s
    s.ensure_stopped()


def expected_rid(frame0: bytes):
    """The rid a reply to `frame0` must carry (docs/PROTOCOL.md: frame 0's `rid` when it is
    an integer, else 0), and whether frame 0 is a map with an integer rid."""
    try:
        env = msgpack.unpackb(frame0, raw=False, strict_map_key=False)
    except Exception:
        return 0, False
    rid = env.get("rid") if isinstance(env, dict) else None
    readable = isinstance(rid, int) and not isinstance(rid, bool)
    return (rid if readable else 0), readable


def check_reply(frames: list, sent: list, endpoint: str) -> str:
    env = msgpack.unpackb(frames[0], raw=False, strict_map_key=False)
    assert isinstance(env, dict), env
    assert env.get("status") in STATUSES, env
    if env["status"] == "ERROR":
        assert env.get("code") in {int(c) for c in ErrorCode} and isinstance(env.get("reason"), str), env
    rid, readable = expected_rid(sent[0])
    assert env.get("rid") == rid, (env, rid)
    sent_env = msgpack.unpackb(sent[0], raw=False, strict_map_key=False) if readable else {}
    if not readable:
        assert env["status"] == "ERROR", env          # no integer rid: never carried out
    elif (isinstance(sent_env.get("op"), str) and sent_env["op"] in set(OPS[endpoint]) - BODY_OPS
          and len(sent) > 1):
        assert (env["status"], env["code"]) == ("ERROR", ErrorCode.TOO_MANY_FRAMES), env
    return env["status"]


def fuzz_endpoint(store, endpoint: str, cases: int, seed: str) -> collections.Counter:
    """Send `cases` random requests to `endpoint`; the statuses of the replies."""
    hello, _ = store.call("hello")
    address = store.address if endpoint == "front" else hello[endpoint]
    fuzz = Fuzzer(random.Random(seed))
    sock = make_socket(zmq.Context.instance(), zmq.DEALER)
    sock.connect(address)
    seen = collections.Counter()
    try:
        for i in range(cases):
            frames = fuzz.request(endpoint)
            sock.send_multipart(frames)
            assert sock.poll(10_000), f"case {i} (seed {seed}) got no reply: {[f[:80] for f in frames]}"
            reply = sock.recv_multipart()
            try:
                seen[check_reply(reply, frames, endpoint)] += 1
            except AssertionError as e:
                raise AssertionError(f"case {i} (seed {seed}): {[f[:80] for f in frames]} -> {e}") from None
    finally:
        sock.close(0)
    return seen


@pytest.mark.parametrize("endpoint", ["front", "appender", "reader"])
def test_random_frames_get_replies(store, endpoint):
    seen = fuzz_endpoint(store, endpoint, CASES_PER_ENDPOINT, f"{SEED}-{endpoint}")
    assert seen["ERROR"] < CASES_PER_ENDPOINT, seen       # some requests got past validation


def test_services_still_serve_after_fuzzing(store):
    for name in ("front", "appender", "reader"):
        fuzz_endpoint(store, name, 100, f"{SEED}-again-{name}")
    st = store.status()
    assert all(s["state"] == "RUNNING" and s["restarts"] == 0 for s in st["services"]), st["services"]
    with Producer(store.address) as p:
        r = p.send("after-fuzz", b"still here", tags="ok")
        assert r.ok
    with Consumer(store.address, "g-after", "after-fuzz") as c:
        got = []
        for _ in range(50):
            got += c.poll(200)
            if got:
                break
    assert [m.body for m in got] == [b"still here"]


# -- the envelope rules of docs/PROTOCOL.md, one by one, on every endpoint ---------------
def raw_request(store, endpoint: str, *frames: bytes) -> dict:
    """Frame 0 of the one reply to `frames` sent as is to `endpoint` ("front", "appender",
    "reader")."""
    hello, _ = store.call("hello")
    sock = make_socket(zmq.Context.instance(), zmq.DEALER)
    sock.connect(store.address if endpoint == "front" else hello[endpoint])
    try:
        sock.send_multipart(list(frames))
        assert sock.poll(10_000), f"no reply from {endpoint} to {frames}"
        return msgpack.unpackb(sock.recv_multipart()[0], raw=False, strict_map_key=False)
    finally:
        sock.close(0)


def packed(env: dict) -> bytes:
    return msgpack.packb(env, use_bin_type=True)


def error_of(reply: dict) -> tuple:
    assert reply.get("status") == "ERROR" and reply.get("reason"), reply
    return reply["rid"], reply["code"]


@pytest.mark.parametrize("endpoint", ["front", "appender", "reader"])
def test_error_reply_echoes_rid_of_frame0_without_a_string_op(store, endpoint):
    assert error_of(raw_request(store, endpoint, packed({"rid": 77}))) == (77, ErrorCode.BAD_FIELD)
    assert error_of(raw_request(store, endpoint, packed({"op": 5, "rid": 78}))) == (78, ErrorCode.BAD_FIELD)
    assert error_of(raw_request(store, endpoint, b"\xc1junk")) == (0, ErrorCode.MALFORMED_FRAME)


def test_put_without_rid_is_bad_field_and_stores_nothing(store):
    wrote = store.status()["positions"]["wrote"]
    rep = raw_request(store, "appender", packed({"op": "put", "topic": "no-rid"}), b"body")
    assert error_of(rep) == (0, ErrorCode.BAD_FIELD) and "rid" in rep["reason"], rep
    rep = raw_request(store, "appender", packed({"op": "put_batch", "topic": "no-rid", "sizes": [4]}), b"body")
    assert error_of(rep) == (0, ErrorCode.BAD_FIELD), rep
    assert store.status()["positions"]["wrote"] == wrote
    hello, _ = store.call("hello")
    info, _ = store.call("topic_info", endpoint=hello["appender"], topic="no-rid")
    assert (info["status"], info.get("code")) == ("ERROR", ErrorCode.NOT_FOUND), info


@pytest.mark.parametrize("endpoint, op", [("front", "hello"), ("front", "topics"),
                                          ("reader", "topics"), ("appender", "topic_info")])
def test_request_without_rid_is_bad_field(store, endpoint, op):
    assert error_of(raw_request(store, endpoint, packed({"op": op, "topic": "x"}))) == (0, ErrorCode.BAD_FIELD)


def test_negative_rid_is_echoed(store):
    rep = raw_request(store, "front", packed({"op": "hello", "rid": -5}))
    assert (rep["rid"], rep["status"]) == (-5, "OK"), rep


def test_appender_topic_info_refuses_a_bad_name_as_the_reader_does(store):
    for endpoint in ("appender", "reader"):
        for topic in ("a b", "", "x" * 128, "é"):
            rep = raw_request(store, endpoint, packed({"op": "topic_info", "rid": 5, "topic": topic}))
            assert error_of(rep) == (5, ErrorCode.BAD_TOPIC), (endpoint, topic, rep)


@pytest.mark.parametrize("endpoint, env", [
    ("reader", {"op": "pull", "group": "g", "topic": "after-fuzz", "queue_id": 0, "offset": 0}),
    ("reader", {"op": "topics"}),
    ("reader", {"op": "queue_offsets", "topic": "after-fuzz"}),
    ("appender", {"op": "create_topic", "topic": "extra-frames", "queues": 2}),
    ("appender", {"op": "topic_info", "topic": "after-fuzz"}),
    ("front", {"op": "topics"}),
    ("front", {"op": "hello"}),
    ("front", {"op": "status"}),
])
def test_extra_frames_on_an_op_without_body_frames(store, endpoint, env):
    for extra in ([b"x"], [b"x", b"y"], [b""]):
        rep = raw_request(store, endpoint, packed({**env, "rid": 41}), *extra)
        assert error_of(rep) == (41, ErrorCode.TOO_MANY_FRAMES), (env, extra, rep)
    rep = raw_request(store, endpoint, packed({**env, "rid": 42}))
    assert rep["rid"] == 42 and rep["status"] != "ERROR", rep
