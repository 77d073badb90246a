"""IndexFile: RocketMQ's IndexFileTest, the byte layout, time filtering, collisions, reopening,
crash durability through the I/O seam, and truncate as an exact undo of appends."""
from __future__ import annotations

import os
import struct
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.files.fileops import REAL_FILE_OPS, FileOps
from core.record.hashing import index_key_hash, java_hash
from core.log.index_file import IndexFile, index_file_size

LONG_MAX = 2**63 - 1
INT32_MAX_ = (1 << 31) - 1
BASE_TS = 1_700_000_000_000          # whole seconds, so stored times are exact


class _BufferMapping:
    """A mapping over a bytearray: the file on disk holds only what was flushed."""

    def __init__(self, path: str, size: int, log: list):
        self.path, self.size, self._log = path, size, log
        with open(path, "rb") as f:
            self.buf = bytearray(f.read(size))

    def flush(self, lo: int = 0, hi: int | None = None) -> None:
        hi = self.size if hi is None else hi
        with open(self.path, "r+b") as f:
            f.seek(lo)
            f.write(self.buf[lo:hi])
        self._log.append((os.path.basename(self.path), lo, hi))

    def populate(self, length=None) -> None:
        """Nothing to prefault in memory."""

    def allocate(self, lo: int, hi: int) -> None:
        """A bytearray has its space."""

    def close(self) -> None:
        self.buf = None

    @property
    def closed(self) -> bool:
        return self.buf is None


class BufferFileOps(FileOps):
    """Real file creation, bytearray mappings (as in the crash tests), a log of flushes."""

    def __init__(self):
        self.flushes: list = []

    def map_file(self, path: str, size: int, writable: bool = True):
        return _BufferMapping(path, size, self.flushes)


def _filled(path, slots=100, entries=400, fileops=REAL_FILE_OPS) -> IndexFile:
    f = IndexFile(str(path), slots, entries, fileops, create=True)
    for i in range(entries - 1):
        assert f.put_key(str(i), i, BASE_TS + i)
    return f


# ---- RocketMQ's IndexFileTest (hashSlotNum 100, indexNum 400) ----------------------------

def test_put_key_until_full(tmp_path):
    f = _filled(tmp_path / "idx")
    assert f.index_count == 400 and f.is_full
    assert f.put_key("400", 400, BASE_TS + 400) is False
    assert f.index_count == 400
    f.close()


def test_select_phy_offset(tmp_path):
    f = _filled(tmp_path / "idx")
    assert f.select_phy_offsets("60", 10, 0, LONG_MAX) == [60]
    f.close()


# ---- layout --------------------------------------------------------------------------------

def test_file_size_and_fresh_header(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 3, 5, REAL_FILE_OPS, create=True)
    assert os.path.getsize(f.path) == index_file_size(3, 5) == 40 + 3 * 4 + 5 * 20
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset)
    assert header == (0, 0, 0, 0)
    assert (f.hash_slot_count, f.index_count, f.is_full) == (0, 1, False)
    f.close()
    with open(tmp_path / "idx", "rb") as fh:
        assert fh.read(40) == bytes(36) + b"\x00\x00\x00\x01"


def test_golden_bytes_of_one_entry(tmp_path):
    path = tmp_path / "idx"
    f = IndexFile(str(path), 4, 3, REAL_FILE_OPS, create=True)
    assert index_key_hash("k") == 107                      # slot 107 % 4 = 3
    assert f.put_key("k", 0x0102030405060708, 0x0000018BCFE56800)
    f.flush()
    f.close()
    data = path.read_bytes()
    assert len(data) == 40 + 16 + 60
    assert data[:40] == bytes.fromhex(
        "0000018BCFE56800" "0000018BCFE56800"              # begin, end timestamp
        "0102030405060708" "0102030405060708"              # begin, end phys offset
        "00000001" "00000002")                             # slot count, index count
    assert data[40:56] == bytes.fromhex("00000000" "00000000" "00000000" "00000001")
    assert data[56:76] == bytes(20)                        # entry 0 is never used
    assert data[76:96] == bytes.fromhex("0000006B" "0102030405060708" "00000000" "00000000")
    assert data[96:] == bytes(20)


def test_chain_prev_index_and_time_diff(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 1, 4, REAL_FILE_OPS, create=True)   # one slot: one chain
    f.put_key("a", 10, BASE_TS)
    f.put_key("b", 20, BASE_TS + 2500)
    f.flush()
    data = (tmp_path / "idx").read_bytes()
    assert struct.unpack_from(">i", data, 40)[0] == 2
    entry2 = struct.unpack_from(">iqii", data, 44 + 2 * 20)
    assert entry2 == (index_key_hash("b"), 20, 2, 1)       # 2.5 s -> 2 s; prev = entry 1
    assert f.hash_slot_count == 1
    f.close()


def test_wrong_size_is_refused(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 4, 4, REAL_FILE_OPS, create=True)
    f.close()
    with pytest.raises(ValueError, match="expected"):
        IndexFile(str(tmp_path / "idx"), 4, 5, REAL_FILE_OPS)


def test_seeded_file_starts_from_previous_end(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 4, 4, REAL_FILE_OPS, create=True,
                  prev_end_phy_offset=500, prev_end_timestamp=BASE_TS)
    assert (f.begin_phy_offset, f.end_phy_offset, f.begin_timestamp, f.end_timestamp) == \
        (500, 500, BASE_TS, BASE_TS)
    assert f.index_count == 1
    f.put_key("k", 600, BASE_TS + 5000)                    # the first put sets the begin values
    assert (f.begin_phy_offset, f.begin_timestamp) == (600, BASE_TS + 5000)
    assert f.select_phy_offsets("k", 5, BASE_TS + 5000, BASE_TS + 5000) == [600]
    f.close()


# ---- queries -------------------------------------------------------------------------------

def test_newest_first_and_max_num(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 5, 20, REAL_FILE_OPS, create=True)
    for i in range(8):
        f.put_key("k" if i % 2 == 0 else "other", i * 10, BASE_TS + i * 1000)
    assert f.select_phy_offsets("k", 10, 0, LONG_MAX) == [60, 40, 20, 0]
    assert f.select_phy_offsets("k", 2, 0, LONG_MAX) == [60, 40]
    assert f.select_phy_offsets("missing", 10, 0, LONG_MAX) == []
    f.close()


def test_time_range_filtering(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 3, 20, REAL_FILE_OPS, create=True)
    for i in range(10):
        f.put_key("k", i, BASE_TS + i * 1000)
    assert f.select_phy_offsets("k", 20, BASE_TS + 3000, BASE_TS + 5000) == [5, 4, 3]
    assert f.select_phy_offsets("k", 20, BASE_TS + 3001, BASE_TS + 5999) == [5, 4]
    assert f.select_phy_offsets("k", 20, BASE_TS + 20_000, LONG_MAX) == []
    assert f.is_time_matched(BASE_TS - 10, BASE_TS + 100_000)        # covers the file
    assert f.is_time_matched(BASE_TS + 4000, BASE_TS + 4000)         # inside
    assert f.is_time_matched(BASE_TS - 10, BASE_TS)                  # touches the begin
    assert f.is_time_matched(BASE_TS + 9000, BASE_TS + 99_000)       # touches the end
    assert not f.is_time_matched(BASE_TS + 9001, BASE_TS + 99_000)
    assert not f.is_time_matched(0, BASE_TS - 1)
    f.close()


def test_java_hash_collision_both_stored_caller_rechecks(tmp_path):
    # "Aa" and "BB" have the same Java hashCode, so "t#Aa" and "t#BB" do too: the file stores
    # only hashes and returns both offsets for either key; the store reads each record and
    # keeps those whose topic and key really match.
    assert java_hash("t#Aa") == java_hash("t#BB")
    f = IndexFile(str(tmp_path / "idx"), 7, 10, REAL_FILE_OPS, create=True)
    assert f.put_key("t#Aa", 100, BASE_TS)
    assert f.put_key("t#BB", 200, BASE_TS)
    assert f.hash_slot_count == 1 and f.index_count == 3
    assert f.select_phy_offsets("t#Aa", 10, 0, LONG_MAX) == [200, 100]
    assert f.select_phy_offsets("t#BB", 10, 0, LONG_MAX) == [200, 100]
    f.close()


def test_reopened_file_gives_same_answers(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 7, 40, REAL_FILE_OPS, create=True)
    for i in range(30):
        f.put_key(f"key{i % 9}", i * 3, BASE_TS + i * 700)
    queries = [(f"key{j}", n, b, e) for j in range(10) for n in (1, 50)
               for b, e in ((0, LONG_MAX), (BASE_TS + 5000, BASE_TS + 12_000))]
    before = [f.select_phy_offsets(*q) for q in queries]
    header = (f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset,
              f.hash_slot_count, f.index_count)
    f.flush()
    f.close()
    g = IndexFile(str(tmp_path / "idx"), 7, 40, REAL_FILE_OPS)
    assert [g.select_phy_offsets(*q) for q in queries] == before
    assert (g.begin_timestamp, g.end_timestamp, g.begin_phy_offset, g.end_phy_offset,
            g.hash_slot_count, g.index_count) == header
    g.close()


def test_destroy_unlinks(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 2, 3, REAL_FILE_OPS, create=True)
    f.destroy()
    assert not (tmp_path / "idx").exists() and f.closed


# ---- durability through the seam -----------------------------------------------------------

def test_only_flushed_state_survives_a_crash(tmp_path):
    ops = BufferFileOps()
    f = IndexFile(str(tmp_path / "idx"), 3, 10, ops, create=True)
    f.put_key("a", 1, BASE_TS)
    f.flush()
    f.put_key("b", 2, BASE_TS + 1000)                      # never flushed
    f.close()                                              # the power cut
    g = IndexFile(str(tmp_path / "idx"), 3, 10, ops)
    assert g.index_count == 2 and g.end_phy_offset == 1
    assert g.select_phy_offsets("b", 5, 0, LONG_MAX) == []
    assert g.select_phy_offsets("a", 5, 0, LONG_MAX) == [1]
    g.close()


def test_truncate_is_flushed(tmp_path):
    ops = BufferFileOps()
    f = IndexFile(str(tmp_path / "idx"), 3, 10, ops, create=True)
    for i in range(5):
        f.put_key(f"k{i}", i * 10, BASE_TS + i * 1000)
    f.flush()
    assert f.truncate(25) == 2
    assert ops.flushes[-1] == ("idx", 0, f.size)
    f.close()
    g = IndexFile(str(tmp_path / "idx"), 3, 10, ops)
    assert (g.index_count, g.end_phy_offset, g.end_timestamp) == (4, 20, BASE_TS + 2000)
    assert g.select_phy_offsets("k3", 5, 0, LONG_MAX) == []
    g.close()


# ---- truncate --------------------------------------------------------------------------------

def test_truncate_edges(tmp_path):
    ops = BufferFileOps()
    f = IndexFile(str(tmp_path / "idx"), 3, 10, ops, create=True)
    for i in range(4):
        f.put_key(f"k{i}", 100 + i, BASE_TS + i * 1500)
    n_flushes = len(ops.flushes)
    assert f.truncate(1000) == 0 and len(ops.flushes) == n_flushes     # nothing past the end
    assert f.truncate(102) == 2
    # the end time is the last remaining entry's stored time: whole seconds after the begin
    assert (f.end_phy_offset, f.end_timestamp) == (101, BASE_TS + 1000)
    assert f.truncate(0) == 2
    assert (f.index_count, f.hash_slot_count, f.begin_timestamp, f.end_phy_offset) == (1, 0, 0, 0)
    # durable and identical to a fresh file
    assert (tmp_path / "idx").read_bytes() == bytes(36) + b"\x00\x00\x00\x01" + bytes(f.size - 40)
    f.close()


def test_truncate_resets_an_empty_seeded_file_past_the_cut(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 3, 10, REAL_FILE_OPS, create=True,
                  prev_end_phy_offset=500, prev_end_timestamp=BASE_TS)
    assert f.truncate(600) == 0 and f.end_phy_offset == 500             # seed before the cut
    assert f.truncate(400) == 0 and (f.end_phy_offset, f.end_timestamp) == (0, 0)
    f.seed(300, BASE_TS - 1000)
    assert (f.begin_phy_offset, f.end_phy_offset, f.end_timestamp) == (300, 300, BASE_TS - 1000)
    f.put_key("k", 350, BASE_TS)
    with pytest.raises(ValueError):
        f.seed(1, 1)
    f.close()


_KEYS = st.one_of(st.sampled_from(["Aa", "BB", "AaAa", "BBBB", "AaBB", "x", "y", "t#k"]),
                  st.text(max_size=6))
_PUTS = st.lists(st.tuples(_KEYS, st.integers(0, 40), st.integers(0, 3)), max_size=24)


@settings(max_examples=150, deadline=None)
@given(puts=_PUTS, cut_frac=st.floats(0, 1.05))
def test_truncate_restores_the_exact_bytes_of_the_prefix(puts, cut_frac):
    entries, phys, secs = [], 0, 0
    for key, dphys, dsecs in puts:
        phys, secs = phys + dphys, secs + dsecs
        entries.append((key, phys, BASE_TS + secs * 1000))
    cut = int(cut_frac * (phys + 1))
    with tempfile.TemporaryDirectory() as d:
        full = IndexFile(os.path.join(d, "full"), 5, 30, REAL_FILE_OPS, create=True)
        prefix = IndexFile(os.path.join(d, "prefix"), 5, 30, REAL_FILE_OPS, create=True)
        for key, p, ts in entries:
            assert full.put_key(key, p, ts)
            if p < cut:
                assert prefix.put_key(key, p, ts)
        removed = full.truncate(cut)
        assert removed == sum(1 for _, p, _ in entries if p >= cut)
        full.flush()
        prefix.flush()
        full.close()
        prefix.close()
        with open(os.path.join(d, "full"), "rb") as a, open(os.path.join(d, "prefix"), "rb") as b:
            assert a.read() == b.read()


def test_batch_put_killed_before_its_header_keeps_every_older_entry(tmp_path):
    """`put_hashed` writes entries and slots first and the header last. A writer killed in
    between leaves slots pointing past the header's count: readers and the next writer follow
    those entries' links back, so no older entry of the slot is lost, and re-putting the
    batch (as re-dispatch does) gives every key."""
    f = IndexFile(str(tmp_path / "idx"), 2, 50, REAL_FILE_OPS, create=True)
    old = [f"old{i}" for i in range(6)]
    new = [f"new{i}" for i in range(6)]
    assert f.put_hashed([index_key_hash(k) for k in old], list(range(6)),
                        [BASE_TS] * 6, 0) == 6
    header = bytes(f._mapping.buf[:40])
    f.put_hashed([index_key_hash(k) for k in new], list(range(6, 12)), [BASE_TS] * 6, 0)
    f._mapping.buf[:40] = header                       # the kill: the header was never written
    for i, k in enumerate(old):
        assert f.select_phy_offsets(k, 10, 0, LONG_MAX) == [i], k
    assert all(f.select_phy_offsets(k, 10, 0, LONG_MAX) == [] for k in new)
    assert f.put_hashed([index_key_hash(k) for k in new], list(range(6, 12)),
                        [BASE_TS] * 6, 0) == 6
    for i, k in enumerate(old + new):
        assert f.select_phy_offsets(k, 10, 0, LONG_MAX) == [i], k
    assert f.index_count == 13 and f.hash_slot_count == 2
    f.close()


def test_put_hashed_stops_when_full_and_says_where(tmp_path):
    f = IndexFile(str(tmp_path / "idx"), 4, 5, REAL_FILE_OPS, create=True)
    hashes = [index_key_hash(f"k{i}") for i in range(7)]
    assert f.put_hashed(hashes, list(range(7)), [BASE_TS + i for i in range(7)], 1) == 5
    assert f.is_full and f.end_phy_offset == 4
    assert f.select_phy_offsets("k0", 5, 0, LONG_MAX) == []
    assert f.select_phy_offsets("k4", 5, 0, LONG_MAX) == [4]
    f.close()


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 7), st.integers(2, 60),
       st.lists(st.tuples(st.integers(0, INT32_MAX_), st.integers(-3, 5000)), min_size=1,
                max_size=50),
       st.integers(0, 12), st.booleans(), st.integers(-1, 3))
def test_put_hashed_numpy_and_one_at_a_time_write_the_same_bytes(
        slots, capacity, keys, first_batch, killed, begin_ts):
    """`put_hashed` puts many keys with numpy and few one at a time: from the same state
    (fresh, seeded or not, partly filled, or after a put killed before its header, so that
    slots point past the count) both write byte-identical files and stop at the same key."""
    import core.log.index_file as index_file
    images = []
    for numpy_min in (1, 1 << 20):
        saved, index_file.NUMPY_MIN_KEYS = index_file.NUMPY_MIN_KEYS, numpy_min
        try:
            with tempfile.TemporaryDirectory() as d:
                f = IndexFile(os.path.join(d, "idx"), slots, capacity, REAL_FILE_OPS, create=True,
                              prev_end_timestamp=max(begin_ts, 0) * 1000)
                hashes = [h for h, _ in keys]
                offsets = list(range(len(keys)))
                stamps = [BASE_TS + s * 700 for _, s in keys]
                done = f.put_hashed(hashes[:first_batch], offsets[:first_batch],
                                    stamps[:first_batch], 0)
                if killed:
                    header = bytes(f._mapping.buf[:40])
                    f.put_hashed(hashes, offsets, stamps, done)
                    f._mapping.buf[:40] = header
                stop = f.put_hashed(hashes, offsets, stamps, done)
                images.append((stop, bytes(f._mapping.buf)))
                f.close()
        finally:
            index_file.NUMPY_MIN_KEYS = saved
    assert images[0] == images[1]


def test_destroy_frees_the_blocks_in_the_background_and_a_leftover_is_cleaned(tmp_path):
    """The name goes at once (renamed to *.deleted.tmp, durably); the blocks are freed by a
    background unlink; a *.deleted.tmp left by a crash is removed by the next load."""
    import time

    from core.files.fileops import DELETED_SUFFIX
    from core.log.index_service import IndexService
    f = IndexFile(str(tmp_path / "20260101000000000"), 2, 3, REAL_FILE_OPS, create=True)
    f.destroy()
    assert not (tmp_path / "20260101000000000").exists()
    deadline = time.monotonic() + 10
    while os.listdir(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.listdir(tmp_path) == []
    (tmp_path / ("20260101000000001" + DELETED_SUFFIX)).write_bytes(b"x" * 100)
    service = IndexService(str(tmp_path), 2, 3, REAL_FILE_OPS)
    service.load(True, 0)
    assert os.listdir(tmp_path) == [] and service.files == []
