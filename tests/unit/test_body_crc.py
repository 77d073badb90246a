"""`core.record.body_crc`: CRCs of many bodies at once equal `zlib.crc32` of each, for bodies as the
rows of a strided view into a larger buffer (how the scan hands them over) and of any length
the table covers, and through the per-span path."""
from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.record.body_crc import MAX_ROW, crc32_rows, crc32_spans


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_ROW), st.integers(1, 30), st.integers(0, 40), st.data())
def test_rows_of_a_strided_view_match_zlib(width, n, gap, data):
    stride = width + gap
    raw = data.draw(st.binary(min_size=n * stride + 7, max_size=n * stride + 7))
    bodies = np.ndarray((n, width), np.uint8, raw, 7, (stride, 1))
    want = [zlib.crc32(raw[7 + i * stride:7 + i * stride + width]) for i in range(n)]
    assert crc32_rows(bodies).tolist() == want
    starts = [7 + i * stride for i in range(n)]
    assert crc32_spans(raw, starts, [s + width for s in starts], n).tolist() == want


def test_known_values():
    rows = np.frombuffer(b"123456789" * 2, np.uint8).reshape(2, 9)
    assert crc32_rows(rows).tolist() == [0xCBF43926] * 2          # the CRC-32 check value
    assert crc32_rows(np.zeros((3, MAX_ROW), np.uint8)).tolist() == [zlib.crc32(bytes(MAX_ROW))] * 3
