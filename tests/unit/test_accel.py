"""core.record._accel against its pure-Python references (core.record.accel): every C function
gives the value, the verdict or the bytes of the Python code it stands in for, on
Hypothesis-drawn input (damaged records, foreign bytes, unaligned buffers, astral keys).

The extension is loaded with `accel.load()` whatever MQSTORE_PURE_PYTHON says, so that the
pure-Python CI run (`make test-pure`) holds the two equal too; the reference side is each
module with its `native` set to None."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import core.read.check as check
import core.record.body_crc as body_crc
import core.record.crc_property as crc_property
from core.record import accel
from core.record.codec import encode_message
from core.record.crc_property import CRC32_RESERVED_LEN, FORCED
from core.record.frames import walk_frames_reference
from core.record.hashing import index_key_hashes, java_hash
from core.record.message import Message

C = accel.load()
MODES = st.sampled_from([False, True, FORCED])


@contextmanager
def using(on: bool):
    """The accelerated modules with the extension (on) or as the reference: without it, every
    CRC by zlib."""
    names = [(check, "native"), (body_crc, "native"), (crc_property, "native"),
             (crc_property, "crc32"), (body_crc, "crc32"), (body_crc, "crc32_for_size")]
    saved = [getattr(mod, name) for mod, name in names]
    values = [C if on else None] * 3 + [C.crc32 if on else zlib.crc32] * 2 \
        + [(lambda size: C.crc32) if on else (lambda size: zlib.crc32)]
    for (mod, name), value in zip(names, values):
        setattr(mod, name, value)
    try:
        yield
    finally:
        for (mod, name), value in zip(names, saved):
            setattr(mod, name, value)


def to_v2(rec: bytes) -> bytes:
    """The same record with MAGIC V2 (a two-byte topic length), its CRC property resealed."""
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    body_at = 68 + (20 if sys_flag & 0x10 else 8) + (20 if sys_flag & 0x20 else 8)
    t = body_at + 4 + struct.unpack_from(">i", rec, body_at)[0]
    out = bytearray(rec[:t] + b"\0" + rec[t:])
    struct.pack_into(">ii", out, 0, len(out), -626843477)
    crc_property.seal(out, 0, len(out))
    return bytes(out)


@st.composite
def chunks(draw):
    """(chunk, sizes, phys, offsets): records back to back, some damaged, some foreign."""
    n = draw(st.integers(1, 12))
    sealed, v6, v2 = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    same = draw(st.booleans())
    recs, phys, start = [], [], draw(st.sampled_from([0, 4096, 1 << 40]))
    for i in range(n):
        body = b"b" * (draw(st.integers(0, 300)) if not same else 64)
        host = ("::1", 5) if v6 and i % 2 else ("127.0.0.1", 5)
        rec = encode_message(Message("Topic", body, queue_id=2, tags="t", keys=f"k{i:03d}",
                                     born_host=host),
                             7 + i, start, 1_700_000_000_000 + i, prop_crc=sealed)
        recs.append(to_v2(rec) if v2 else rec)
        phys.append(start)
        start += len(recs[-1])
    chunk = bytearray(b"".join(recs))
    for _ in range(draw(st.integers(0, 3))):                     # flips
        at = draw(st.integers(0, len(chunk) - 1))
        chunk[at] ^= 1 << draw(st.integers(0, 7))
    if draw(st.booleans()):                                       # foreign bytes somewhere
        at = draw(st.integers(0, len(chunk) - 1))
        junk = draw(st.binary(min_size=1, max_size=40))
        chunk[at:at + len(junk)] = junk
        chunk = chunk[:sum(len(r) for r in recs)].ljust(sum(len(r) for r in recs), b"\0")
    sizes = [len(r) for r in recs]
    if draw(st.booleans()):                                       # an entry with a wrong size
        i = draw(st.integers(0, n - 1))
        sizes[i] += draw(st.sampled_from([-21, -1, 1, 7]))
        sizes[i] = max(sizes[i], 0)
    return bytes(chunk), sizes, phys, list(range(7, 7 + n))


def test_crc32_is_zlibs_at_every_length_and_alignment():
    data = bytes(range(256)) * 40
    for n in list(range(0, 200)) + [255, 256, 1023, 1024, 1177, 4096, 10000]:
        for at in (0, 1, 7):
            part = memoryview(data)[at:at + n]
            assert C.crc32(part) == zlib.crc32(part)
            assert C.crc32(part, 0xDEADBEEF) == zlib.crc32(part, 0xDEADBEEF)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF), st.integers(0, 15))
def test_crc32_equals_zlib(data, value, cut):
    assert C.crc32(data[cut:], value) == zlib.crc32(data[cut:], value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=600), min_size=1, max_size=20), st.integers(0, 300), st.data())
def test_many_body_crcs_equal_one_by_one(bodies, width, data):
    want = [zlib.crc32(b) for b in bodies]
    buf = b"".join(bodies)
    stops = np.cumsum([len(b) for b in bodies]).tolist()
    starts = [0] + stops[:-1]
    n = data.draw(st.integers(1, 8))
    stride = width + data.draw(st.integers(0, 50))
    raw = data.draw(st.binary(min_size=n * stride, max_size=n * stride))
    rows = np.ndarray((n, width), np.uint8, raw, 0, (stride, 1))
    with using(True):
        assert body_crc.crc32_many(bodies).tolist() == want
        assert body_crc.crc32_spans(buf, starts, stops, len(bodies)).tolist() == want
        assert body_crc.crc32_spans(buf, np.array(starts), np.array(stops), len(bodies)).tolist() == want
        got = body_crc.crc32_rows(rows).tolist()
    assert got == [zlib.crc32(raw[i * stride:i * stride + width]) for i in range(n)]
    with using(False):
        assert body_crc.crc32_many(bodies).tolist() == want
        assert body_crc.crc32_spans(buf, starts, stops, len(bodies)).tolist() == want
        if width <= body_crc.MAX_ROW:
            assert body_crc.crc32_rows(rows).tolist() == got


def reference_first_bad(chunk, sizes, phys, topic, qid, offsets, mode):
    pos = 0
    for i, size in enumerate(sizes):
        if check.record_problem(chunk, pos, size, phys and phys[i], topic, qid,
                                offsets and offsets[i], mode) is not None:
            return i
        pos += size
    return -1


@settings(max_examples=600, deadline=None)
@given(chunks(), MODES, st.booleans(), st.data())
def test_the_c_check_refuses_exactly_what_the_reference_refuses(case, mode, named, data):
    chunk, sizes, phys, offsets = case
    topic, qid = (b"Topic", data.draw(st.sampled_from([2, 3]))) if named else (None, None)
    p, o = (phys, offsets) if named else (None, None)

    def verdicts():
        return (check.check_run(chunk, sizes, phys, b"Topic", 2, offsets, mode),
                [check.record_problem(chunk, sum(sizes[:i]), s, phys[i], b"Topic", 2, offsets[i], mode)
                 for i, s in enumerate(sizes)])
    with using(False):
        want = reference_first_bad(chunk, sizes, p, topic, qid, o, mode)
        reference = verdicts()
    assert C.first_bad(chunk, 0, sizes, p, topic, qid, o, 2 if mode == FORCED else int(mode)) == want
    with using(True):
        assert verdicts() == reference


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.lists(st.tuples(st.integers(0, 19), st.integers(0, 255)), max_size=3),
       MODES)
def test_a_damaged_or_foreign_crc_property_is_judged_as_the_reference_does(n, edits, mode):
    """The last 20 bytes near RESERVE's form: DAMAGED within two bytes of it, else ABSENT."""
    rec = bytearray(encode_message(Message("Topic", b"body" * n, properties={"a": "b" * n}),
                                   0, 0, prop_crc=True))
    for at, byte in edits:
        rec[len(rec) - CRC32_RESERVED_LEN + at] = byte
    rec = bytes(rec)
    with using(False):
        want = check.record_problem(rec, 0, len(rec), 0, None, None, None, mode)
    with using(True):
        assert check.record_problem(rec, 0, len(rec), 0, None, None, None, mode) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=10), st.booleans(), st.integers(0, 9))
def test_sealing_writes_the_bytes_the_reference_writes(bodies, same, lead):
    msgs = [Message("Topic", b"x" * (bodies[0] if same else k), keys="k") for k in bodies]
    recs = [encode_message(m, 0, 0, prop_crc=i % 3 != 2 or same) for i, m in enumerate(msgs)]
    sizes = [len(r) for r in recs]
    raw = bytes(lead) + b"".join(recs) + b"tail"
    out = {}
    for on in (True, False):
        with using(on):
            buf = bytearray(raw)
            crc_property.seal_run(buf, lead, sizes)
            out["run", on] = bytes(buf)
            buf = bytearray(raw)
            for i in range(len(sizes)):
                crc_property.seal(buf, lead + sum(sizes[:i]), sizes[i])
            assert bytes(buf) == out["run", on]
            if same:
                buf = bytearray(raw)
                grid = np.frombuffer(buf, np.uint8, sum(sizes), lead).reshape(len(sizes), sizes[0])
                crc_property.seal_grid(buf, lead, grid)
                del grid
                out["grid", on] = bytes(buf)
    assert out["run", True] == out["run", False]
    sealed = out["run", True]
    with using(False):                                # what was sealed passes the reference
        assert check.check_run(sealed[lead:lead + sum(sizes)], sizes, [0] * len(sizes), b"Topic",
                               0, [0] * len(sizes), True) is None
    if same:
        assert out["grid", True] == out["grid", False] == out["run", False]


UNICODE = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(UNICODE, st.lists(UNICODE, max_size=20))
def test_java_hash_and_index_key_hashes_equal_the_reference(prefix, keys):
    assert C.java_hash(prefix) == java_hash(prefix)
    got = np.frombuffer(C.index_key_hashes(keys, prefix), np.int64).tolist()
    assert got == index_key_hashes(keys, prefix).tolist()


def test_java_hash_known_values():
    assert C.java_hash("") == 0
    assert C.java_hash("hello") == 99162322                    # "hello".hashCode() in Java
    assert C.java_hash("polygenelubricants") == -(1 << 31)     # Integer.MIN_VALUE
    assert np.frombuffer(C.index_key_hashes(["polygenelubricants"], ""), np.int64)[0] == 0
    assert C.java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00          # a surrogate pair


_FRAME = st.one_of(
    st.builds(lambda n, v2: (lambda r: to_v2(r) if v2 else r)(encode_message(Message("T", b"x" * n))),
              st.integers(0, 300), st.booleans()),
    st.builds(lambda total, magic: struct.pack(">ii", total, magic),                # a header alone
              st.integers(-5, 2000), st.sampled_from([-626843481, -626843477, -875286124, 0, 7])),
    st.binary(min_size=1, max_size=40))


@settings(max_examples=400, deadline=None)
@given(st.lists(_FRAME, max_size=12), st.data())
def test_walk_frames_equals_the_reference(frames, data):
    """Records (both magics), blank and bad headers, garbage; any start, stop and segment size."""
    buf = bytearray(b"".join(frames))
    at = data.draw(st.integers(0, len(buf)))
    stop = data.draw(st.integers(at, len(buf)))
    size = data.draw(st.integers(stop, len(buf) + 500))
    assert C.walk_frames(buf, at, stop, size) == walk_frames_reference(buf, at, stop, size)


def test_walk_frames_refuses_a_span_outside_the_buffer():
    with pytest.raises(ValueError):
        C.walk_frames(b"\0" * 16, 0, 17, 32)


def test_pure_python_is_chosen_by_the_environment():
    code = "from core.record import accel, crc; print(accel.mode(), crc.crc32.__module__)"
    for env, want in (({"MQSTORE_PURE_PYTHON": "1"}, "pure"), ({"MQSTORE_PURE_PYTHON": "0"}, "native")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                             capture_output=True, text=True, check=True).stdout.split()
        assert out[0] == want
        assert (out[1] == "core.record._accel") == (want == "native")


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.booleans(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)),
                                                   max_size=3), st.integers(0, 5))
def test_a_runs_record_crcs_are_judged_as_the_reference_does(n, sealed, flips, lead):
    recs = [encode_message(Message("Topic", b"x" * 50, keys=f"k{i:03d}"), i, 0, prop_crc=sealed)
            for i in range(n)]
    size = len(recs[0])
    buf = bytearray(bytes(lead) + b"".join(recs))
    for at, bit in flips:
        buf[at % len(buf)] ^= 1 << bit
    buf = bytes(buf)
    starts = list(range(lead, lead + n * size, size))
    with using(False):
        want = crc_property.run_crcs_ok(buf, starts, size, True)
    with using(True):
        got = crc_property.run_crcs_ok(buf, starts, size, True)
        assert crc_property.run_crcs_ok(buf, range(lead, lead + n * size, size), size, True) is None \
            if got is None else True
    assert (want is None and got is None) or want.tolist() == got.tolist()
    if sealed and not flips:
        assert got.all()


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 19), st.integers(0, 255)), max_size=3),
       st.sampled_from([True, FORCED]), st.booleans(), st.integers(-30, 5), st.booleans())
def test_one_records_crc_verdict_is_the_references(n, edits, mode, body_ok, cut, sealed):
    rec = bytearray(encode_message(Message("Topic", b"body" * n), 0, 0, prop_crc=sealed))
    for at, byte in edits:
        rec[len(rec) - CRC32_RESERVED_LEN + at] = byte
    buf = b"lead" + bytes(rec)[:len(rec) + min(cut, 0)]          # sometimes cut short
    total = len(rec) + max(cut, 0) if cut > 0 else len(rec)         # sometimes past the end
    with using(False):
        want = crc_property.verify(buf, 4, total, mode, lambda: body_ok)
    with using(True):
        assert crc_property.verify(buf, 4, total, mode, lambda: body_ok) == want
