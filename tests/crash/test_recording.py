"""Tests of the power-loss harness itself (tests/crash/recording.py): flush semantics, crash
states, enumeration, fault injection and MAP_SHARED behaviour of `RecordingFileOps`."""
from __future__ import annotations

import errno
import os
import random
import struct
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recording import (
    NEW, OLD, PAGE, SECTOR, PageChoice, RecordingFileOps, RecordingMapping, SimulatedCrash,
)


def new_file(ops, root, name="seg", size=4 * PAGE):
    path = os.path.join(root, name)
    ops.create_file(path, size)
    return path, ops.map_file(path, size)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def fill_pages(buf, pages, value):
    for p in pages:
        buf[p * PAGE:(p + 1) * PAGE] = bytes([value]) * PAGE


def test_flush_of_a_range_makes_only_its_pages_durable(recording, store_root):
    path, m = new_file(recording, store_root)
    fill_pages(m.buf, range(4), 7)
    m.flush(PAGE + 10, PAGE + 20)
    image = recording.image(path)
    assert image.durable[PAGE:2 * PAGE] == bytes([7]) * PAGE
    assert image.durable[:PAGE] == bytes(PAGE)
    assert image.durable[2 * PAGE:] == bytes(2 * PAGE)
    assert recording.flushed == [(path, PAGE, 2 * PAGE)]
    assert recording.dirty_pages() == {path: [0, 2, 3]}
    m.flush(PAGE - 1, 2 * PAGE + 1)                 # touches pages 0..2, never page 3
    assert recording.flushed[-1] == (path, 0, 3 * PAGE)
    assert recording.dirty_pages() == {path: [3]}
    assert recording.flush_count == 2


def test_flush_without_range_covers_the_mapping_and_empty_range_nothing(recording, store_root):
    path, m = new_file(recording, store_root)
    fill_pages(m.buf, range(4), 1)
    m.flush(100, 100)
    assert recording.dirty_pages() == {path: [0, 1, 2, 3]}
    m.flush()
    assert recording.dirty_pages() == {}


def test_unflushed_writes_vanish_when_all_old_and_survive_when_all_new(recording, store_root, crash_dir):
    path, m = new_file(recording, store_root)
    m.buf[0:5] = b"hello"
    m.flush(0, 5)
    m.buf[PAGE:PAGE + 5] = b"world"
    m.buf[5:10] = b"+more"                      # same page as flushed data, after the flush
    snap_old, snap_new = crash_dir(), crash_dir()
    old = recording.materialize_all_old(snap_old)
    new = recording.materialize_all_new(snap_new)
    old_bytes, new_bytes = read(os.path.join(snap_old, "seg")), read(os.path.join(snap_new, "seg"))
    assert old_bytes[:10] == b"hello\0\0\0\0\0" and old_bytes[PAGE:PAGE + 5] == bytes(5)
    assert new_bytes[:10] == b"hello+more" and new_bytes[PAGE:PAGE + 5] == b"world"
    assert new_bytes == bytes(m.buf)
    assert old.label == "all old" and new.label == "all new"


def test_torn_pages_mix_sectors_exactly(recording, store_root, crash_dir):
    path, m = new_file(recording, store_root, size=2 * PAGE)
    m.buf[0:2 * PAGE] = bytes([0xAA]) * (2 * PAGE)
    m.flush()
    for s in range(8):
        m.buf[s * SECTOR:(s + 1) * SECTOR] = bytes([s + 1]) * SECTOR
    m.buf[PAGE:PAGE + 1] = b"\x01"
    sectors = (True, False, False, True, True, False, True, False)
    target = crash_dir()
    recording.materialize(target, lambda p, page: sectors if page == 0 else NEW)
    got = read(os.path.join(target, "seg"))
    for s, new in enumerate(sectors):
        want = bytes([s + 1]) if new else b"\xAA"
        assert got[s * SECTOR:(s + 1) * SECTOR] == want * SECTOR, s
    assert got[PAGE:] == b"\x01" + bytes([0xAA]) * (PAGE - 1)


def test_torn_last_partial_page_ignores_sectors_past_the_end(recording, store_root, crash_dir):
    path, m = new_file(recording, store_root, size=PAGE + 700)
    m.buf[PAGE:PAGE + 700] = b"\x05" * 700
    target = crash_dir()
    recording.materialize(target, lambda p, page: (False, True) + (True,) * 6)
    got = read(os.path.join(target, "seg"))
    assert len(got) == PAGE + 700
    assert got[PAGE:PAGE + SECTOR] == bytes(SECTOR) and got[PAGE + SECTOR:] == b"\x05" * 188


def test_enumeration_covers_every_subset_of_dirty_pages(recording, store_root, crash_dir):
    a, ma = new_file(recording, store_root, "a", 2 * PAGE)
    b, mb = new_file(recording, store_root, "b", 2 * PAGE)
    ma.buf[0] = 1
    ma.buf[PAGE] = 2
    mb.buf[PAGE] = 3
    states = list(recording.enumerate_states(limit=5))
    assert len(states) == 2 ** 3
    seen = set()
    for choose in states:
        target = crash_dir()
        recording.materialize(target, choose)
        ga, gb = read(os.path.join(target, "a")), read(os.path.join(target, "b"))
        seen.add((ga[0], ga[PAGE], gb[PAGE]))
    assert seen == {(x, y, z) for x in (0, 1) for y in (0, 2) for z in (0, 3)}


def test_enumeration_samples_limit_seeded_states_above_ten_dirty_pages(recording, store_root):
    path, m = new_file(recording, store_root, size=11 * PAGE)
    fill_pages(m.buf, range(11), 9)
    first = [c.table for c in recording.enumerate_states(limit=7, seed=3)]
    again = [c.table for c in recording.enumerate_states(limit=7, seed=3)]
    assert len(first) == 7 and first == again
    assert all(len(t) == 11 for t in first)


def test_exactly_ten_dirty_pages_are_enumerated_exhaustively(recording, store_root):
    path, m = new_file(recording, store_root, size=10 * PAGE)
    fill_pages(m.buf, range(10), 9)
    assert sum(1 for _ in recording.enumerate_states(limit=3)) == 1024


def test_fail_flush_at_raises_eio_and_keeps_durable(store_root):
    ops = RecordingFileOps(store_root, fail_flush_at=2)
    path, m = new_file(ops, store_root)
    m.buf[0] = 1
    m.flush(0, 1)
    m.buf[0] = 2
    with pytest.raises(OSError) as err:
        m.flush(0, 1)
    assert err.value.errno == errno.EIO
    assert ops.image(path).durable[0] == 1 and ops.flush_count == 2
    assert len(ops.flushed) == 1
    m.flush(0, 1)                                   # only the N-th call fails
    assert ops.image(path).durable[0] == 2


def test_crash_at_flush_freezes_the_crash_point(store_root, crash_dir):
    ops = RecordingFileOps(store_root, crash_at_flush=2)
    path, m = new_file(ops, store_root)
    m.buf[0] = 1
    m.flush(0, 1)
    m.buf[0] = 2
    with pytest.raises(SimulatedCrash):
        m.flush(0, 1)
    assert not isinstance(SimulatedCrash("x"), Exception)
    assert ops.crashed and ops.image(path).durable[0] == 1
    m.buf[1] = 3                                    # after the cut: never part of any state
    for durable_op in (lambda: m.flush(), lambda: ops.create_file(path + "x", PAGE),
                       lambda: ops.unlink(path), lambda: ops.write_file_atomic(path + "y", b"")):
        with pytest.raises(SimulatedCrash):
            durable_op()
    target = crash_dir()
    ops.materialize_all_new(target)
    assert read(os.path.join(target, "seg"))[:2] == b"\x02\x00"
    assert ops.dirty_pages() == {path: [0]}


def test_two_mappings_of_one_path_share_bytes_and_survive_close(recording, store_root):
    path, m1 = new_file(recording, store_root)
    m2 = recording.map_file(path, 4 * PAGE, writable=False)
    m1.buf[10:13] = b"abc"
    assert m2.buf[10:13] == b"abc" and m1.buf is m2.buf
    m1.close()
    assert m1.closed and not m2.closed
    with pytest.raises(ValueError):
        m1.flush()
    m3 = recording.map_file(path, 4 * PAGE)
    assert m3.buf[10:13] == b"abc"
    assert recording.read_file(path)[10:13] == b"abc"


def test_first_map_reads_the_real_file_and_untouched_files_materialize_unchanged(
        recording, store_root, crash_dir):
    path = os.path.join(store_root, "sub", "old")
    os.makedirs(os.path.dirname(path))
    content = bytes(random.Random(1).randrange(256) for _ in range(3 * PAGE + 5))
    with open(path, "wb") as f:
        f.write(content)
    m = recording.map_file(path, len(content))
    assert bytes(m.buf) == content and recording.dirty_pages() == {}
    os.makedirs(os.path.join(store_root, "empty"))
    for choose in recording.enumerate_states(limit=3):
        target = crash_dir()
        recording.materialize(target, choose)
        assert read(os.path.join(target, "sub", "old")) == content
        assert os.path.isdir(os.path.join(target, "empty"))


def test_create_file_with_enospc_leaves_nothing(recording, store_root):
    path = os.path.join(store_root, "full")
    recording.enospc_on_create = True
    with pytest.raises(OSError) as err:
        recording.create_file(path, PAGE)
    assert err.value.errno == errno.ENOSPC
    assert os.listdir(store_root) == [] and recording.image(path) is None
    recording.enospc_on_create = False
    recording.create_file(path, PAGE)
    assert read(path) == bytes(PAGE) and recording.created == [os.path.realpath(path)]


def test_struct_and_slicing_on_buf(recording, store_root):
    path, m = new_file(recording, store_root)
    struct.pack_into(">iq", m.buf, 100, -626843481, 1 << 40)
    assert struct.unpack_from(">iq", m.buf, 100) == (-626843481, 1 << 40)
    assert struct.unpack_from(">i", memoryview(m.buf)[100:104])[0] == -626843481
    m.buf[200:204] = b"abcd"
    assert bytes(m.buf[200:204]) == b"abcd" and m.buf[200] == ord("a")
    assert isinstance(m, RecordingMapping) and m.size == 4 * PAGE and m.path == path
    m.populate()
    m.advise_willneed()
    assert m.lock_in_memory() is False


def test_short_mapping_and_bad_ranges(recording, store_root):
    path, m = new_file(recording, store_root)
    short = recording.map_file(path, PAGE)
    short.buf[0:2] = b"xy"
    assert m.buf[0:2] == b"xy" and len(short.buf) == PAGE
    with pytest.raises(ValueError):
        short.flush(0, PAGE + 1)
    with pytest.raises(ValueError):
        recording.map_file(path, 5 * PAGE)
    with pytest.raises(FileNotFoundError):
        recording.map_file(os.path.join(store_root, "missing"), PAGE)
    with pytest.raises(ValueError):
        recording.create_file(os.path.join(os.path.dirname(store_root), "outside"), PAGE)


def test_write_file_atomic_unlink_and_leftovers(recording, store_root, crash_dir):
    path, m = new_file(recording, store_root, "cp", PAGE)
    m.buf[0] = 9
    recording.write_file_atomic(path, b"\x01" * PAGE)   # a new inode: the old mapping keeps the old one
    assert recording.read_file(path) == b"\x01" * PAGE and m.buf[0] == 9
    assert recording.map_file(path, PAGE).buf[0] == 1
    recording.unlink(path)
    assert not os.path.exists(path) and recording.image(path) is None
    assert recording.unlinked == [os.path.realpath(path)]
    with open(os.path.join(store_root, "x.tmp"), "wb"):
        pass
    assert recording.remove_leftovers(store_root) == ["x.tmp"]
    target = crash_dir()
    recording.materialize_all_new(target)
    assert os.listdir(target) == []


def test_snapshot_is_consistent_while_another_thread_flushes(recording, store_root):
    path, m = new_file(recording, store_root)
    done = threading.Event()

    def writer():
        for value in range(1, 200):
            fill_pages(m.buf, range(4), value)
            m.flush()
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set():
        durable, _live = recording.snapshot().images[os.path.realpath(path)]
        assert len(set(durable)) == 1, "a snapshot saw half of one flush"
    thread.join()


def test_page_choice_repr_names_pages(store_root):
    path = os.path.join(store_root, "commitlog", "0")
    choice = PageChoice({(path, 1): NEW, (path, 2): OLD, (path, 3): (True,) * 4 + (False,) * 4})
    assert "#1" in repr(choice) and "NNNNoooo" in repr(choice)


SIZE = 3 * PAGE + 1000
writes = st.tuples(st.just("w"), st.integers(0, SIZE - 1), st.binary(min_size=1, max_size=3000))
flushes = st.tuples(st.just("f"), st.integers(0, SIZE), st.integers(0, SIZE))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(writes, flushes), max_size=12), rng=st.randoms(use_true_random=False),
       torn=st.sampled_from([0.0, 0.2, 1.0]))
def test_random_crash_state_mixes_only_durable_and_live_bytes(steps, rng, torn):
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "store")
        os.mkdir(root)
        ops = RecordingFileOps(root)
        path, m = new_file(ops, root, size=SIZE)
        model = bytearray(SIZE)                      # the disk, by page-widened flush ranges
        for step in steps:
            if step[0] == "w":
                _, off, data = step
                data = data[:SIZE - off]
                m.buf[off:off + len(data)] = data
            else:
                lo, hi = sorted(step[1:])
                m.flush(lo, hi)
                if hi > lo:
                    plo, phi = lo // PAGE * PAGE, min(SIZE, -(-hi // PAGE) * PAGE)
                    model[plo:phi] = m.buf[plo:phi]
        live = bytes(m.buf)
        assert ops.image(path).durable == model
        target = os.path.join(tmp, "crash")
        choice = ops.materialize_random(target, rng, torn_probability=torn)
        got = read(os.path.join(target, "seg"))
        assert len(got) == SIZE
        for i in range(SIZE):
            assert got[i] in (model[i], live[i]), i
            if model[i] == live[i]:
                assert got[i] == live[i]
        for (_p, page), how in choice.table.items():   # and the choice was applied exactly
            for i in range(page * PAGE, min(SIZE, (page + 1) * PAGE)):
                new = how == NEW or (isinstance(how, tuple) and how[(i - page * PAGE) // SECTOR])
                assert got[i] == (live[i] if new else model[i])
        assert set(k[1] for k in choice.table) == set(ops.dirty_pages().get(path, []))


def test_before_flush_hook_sees_the_state_before_each_flush(store_root, crash_dir):
    points = []
    ops = RecordingFileOps(store_root)
    ops.before_flush = lambda n, path, lo, hi: points.append((n, lo, hi, ops.snapshot()))
    path, m = new_file(ops, store_root)
    m.buf[0] = 1
    m.flush(0, 1)
    m.buf[PAGE] = 2
    m.flush(PAGE, PAGE + 1)
    assert [(n, lo, hi) for n, lo, hi, _ in points] == [(1, 0, 1), (2, PAGE, PAGE + 1)]
    assert points[0][3].dirty_pages() == {path: [0]}
    assert points[1][3].dirty_pages() == {path: [1]}
    target = crash_dir()
    points[1][3].materialize_all_old(target)
    assert read(os.path.join(target, "seg"))[:PAGE + 1] == b"\x01" + bytes(PAGE)
