"""`core.record.crc.crc32` is the CRC the store writes as BODYCRC and checks on recovery, so it must
equal `java.util.zip.CRC32`, which is zlib's: the check value, any bytes, any buffer the store
hands it (bytes, a memoryview slice of a mapping, a bytearray), and a running value."""
from __future__ import annotations

import mmap
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.crc import crc32, crc32_for_size


def test_check_value():
    assert crc32(b"123456789") == 0xCBF43926
    assert crc32(b"") == 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF))
def test_equals_zlib_for_any_bytes_and_start(data, start):
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, start) == zlib.crc32(data, start)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 1000))
def test_equals_zlib_on_slices_of_a_mapping(data, at):
    m = mmap.mmap(-1, 8192)
    try:
        m[at:at + len(data)] = data
        view = memoryview(m)
        try:
            assert crc32(view[at:at + len(data)]) == zlib.crc32(data)
        finally:
            view.release()
        assert crc32(bytearray(data)) == zlib.crc32(data)
    finally:
        m.close()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_the_routine_picked_for_a_size_gives_the_same_value(data):
    assert crc32_for_size(len(data))(data) == crc32(data) == zlib.crc32(data)
    assert crc32_for_size(len(data))(memoryview(data)) == crc32(data)
