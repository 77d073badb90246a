"""StoreCheckpoint: RocketMQ's StoreCheckpointTest, the byte layout, and torn-write detection."""
import os
import struct
import tempfile
import zlib

from hypothesis import given, settings, strategies as st

from core.log.checkpoint import CHECKPOINT_SIZE, FIELDS, StoreCheckpoint
from core.files.fileops import FileOps

INT64 = st.integers(min_value=-2**63, max_value=2**63 - 1)
NAMES = [name for name, _ in FIELDS]


def test_write_and_read_rocketmq(tmp_path):
    """RocketMQ StoreCheckpointTest.testWriteAndRead."""
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, FileOps())
    physic, logics = 0xAABB, 0xCCDD
    cp.physic_msg_timestamp = physic
    cp.logics_msg_timestamp = logics
    cp.flush()
    assert physic - cp.get_min_timestamp() == 3000
    cp.shutdown()
    cp = StoreCheckpoint(path, FileOps())
    assert cp.valid
    assert cp.physic_msg_timestamp == physic and cp.logics_msg_timestamp == logics
    cp.shutdown()


def test_new_file_is_4k_valid_zero(tmp_path):
    path = str(tmp_path / "sub" / "checkpoint")
    cp = StoreCheckpoint(path, FileOps())
    assert cp.valid and all(v == 0 for v in cp.to_dict().values())
    assert os.path.getsize(path) == CHECKPOINT_SIZE
    cp.shutdown()
    reopened = StoreCheckpoint(path, FileOps())      # created, never written: still valid
    assert reopened.valid
    reopened.shutdown()


def test_byte_layout(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, FileOps())
    for i, name in enumerate(NAMES):
        setattr(cp, name, 0x0102030405060700 + i)
    cp.flush()
    raw = open(path, "rb").read()
    for i, (offsets, name) in enumerate(zip((0, 8, 16, 24, 32, 64, 72), NAMES)):
        assert struct.unpack_from(">q", raw, offsets)[0] == 0x0102030405060700 + i, name
    assert struct.unpack_from(">I", raw, 80)[0] == zlib.crc32(raw[:80]) & 0xFFFFFFFF
    assert raw[40:64] == bytes(24) and raw[84:] == bytes(CHECKPOINT_SIZE - 84)
    cp.shutdown()


def test_min_timestamps(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"), FileOps())
    assert cp.get_min_timestamp() == 0                  # never negative
    cp.physic_msg_timestamp, cp.logics_msg_timestamp = 10_000, 20_000
    assert cp.get_min_timestamp() == 7_000
    cp.index_msg_timestamp = 5_000
    assert cp.get_min_timestamp_index() == 5_000
    cp.index_msg_timestamp = 9_000
    assert cp.get_min_timestamp_index() == 7_000
    cp.shutdown()


def test_flush_goes_through_mapping_flush(tmp_path):
    calls = []

    class Recording(FileOps):
        def create_file(self, path, size, **kwargs):
            calls.append(("create_file", path, size))
            super().create_file(path, size, **kwargs)

        def map_file(self, path, size, writable=True):
            mapping = super().map_file(path, size, writable)
            calls.append(("map_file", path, size))
            real_flush = mapping.flush

            def flush(lo=0, hi=None):
                calls.append(("flush", lo, hi))
                real_flush(lo, hi)
            mapping.flush = flush
            return mapping

    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, Recording())
    assert calls[:2] == [("create_file", path, 4096), ("map_file", path, 4096)]
    calls.clear()
    cp.dispatched_phy_offset = 1580
    cp.flush()
    assert calls == [("flush", 0, 4096)]
    cp.shutdown()
    assert cp.closed and calls[-1] == ("flush", 0, 4096)
    cp.shutdown()                                       # second shutdown: nothing


def test_wrong_size_file_counts_as_torn(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(b"\x01" * 100)
    cp = StoreCheckpoint(str(path), FileOps())
    assert not cp.valid and all(v == 0 for v in cp.to_dict().values())
    assert os.path.getsize(path) == CHECKPOINT_SIZE
    cp.physic_msg_timestamp = 42
    cp.shutdown()
    again = StoreCheckpoint(str(path), FileOps())
    assert again.valid and again.physic_msg_timestamp == 42
    again.shutdown()


def test_rocketmq_checkpoint_without_crc_is_not_valid(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(struct.pack(">qqq", 1000, 2000, 3000) + bytes(CHECKPOINT_SIZE - 24))
    cp = StoreCheckpoint(str(path), FileOps())
    assert not cp.valid and cp.physic_msg_timestamp == 0
    cp.shutdown()


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({name: INT64 for name in NAMES}))
def test_round_trip_any_values(values):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "checkpoint")
        cp = StoreCheckpoint(path, FileOps())
        for name, value in values.items():
            setattr(cp, name, value)
        cp.shutdown()
        again = StoreCheckpoint(path, FileOps())
        assert again.valid and again.to_dict() == values
        again.shutdown()


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({name: INT64 for name in NAMES}),
       st.integers(min_value=0, max_value=83), st.integers(min_value=1, max_value=255))
def test_flipped_byte_makes_checkpoint_invalid(values, pos, xor):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "checkpoint")
        cp = StoreCheckpoint(path, FileOps())
        for name, value in values.items():
            setattr(cp, name, value)
        cp.shutdown()
        raw = bytearray(open(path, "rb").read())
        raw[pos] ^= xor
        with open(path, "r+b") as f:
            f.write(raw)
        torn = StoreCheckpoint(path, FileOps())
        assert not torn.valid
        assert all(v == 0 for v in torn.to_dict().values())
        torn.shutdown()


def test_a_flip_in_any_byte_of_the_checkpoint_makes_it_torn(tmp_path):
    """Bytes 84..4095 hold no field but are checked too (zero): no byte is damaged unseen."""
    from core.log.checkpoint import CHECKPOINT_SIZE, checkpoint_valid
    from core.files.fileops import REAL_FILE_OPS
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path, REAL_FILE_OPS)
    cp.flushed_phy_offset, cp.physic_msg_timestamp = 1234, 5678
    cp.shutdown()
    data = open(path, "rb").read()
    assert checkpoint_valid(data)
    for at in (0, 39, 40, 79, 80, 83, 84, 87, 2000, CHECKPOINT_SIZE - 1):
        bad = bytearray(data)
        bad[at] ^= 0x20
        assert not checkpoint_valid(bad), at
        open(path, "wb").write(bad)
        cp = StoreCheckpoint(path, REAL_FILE_OPS)
        assert not cp.valid and cp.flushed_phy_offset == 0
        cp.flushed_phy_offset = 1234
        cp.shutdown()                                   # written whole again: valid
        assert StoreCheckpoint(path, REAL_FILE_OPS).valid
