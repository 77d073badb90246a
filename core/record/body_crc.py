"""Body CRCs of many records at once, as `core.record.crc.crc32` computes them one by one.

`crc32_rows(bodies)` takes the bodies of a run of records as the rows of a uint8 matrix (a
strided view into a segment works: nothing is copied) and returns their CRCs with a few
numpy steps instead of a `crc32` call per record (whose slicing and call cost far more
than the CRC itself for small bodies). It rests on CRC-32 being affine over GF(2): for an
L-byte message m,

    crc32(m) = crc32(0^L) ^ XOR_j U[L - j][m[j]]

where U[k][v] is the raw register (no pre- or post-conditioning) after the byte v followed by
k - 1 zero bytes. U[1] comes from `core.record.crc` itself (crc32 of one byte against crc32 of a
zero byte) and U[k + 1] is U[k] pushed through one zero byte, so no CRC constant is written
here. Each body costs L table lookups, which beats a `crc32` call per body (slice and call
included) up to `MAX_ROW` bytes; longer bodies take one call each (`crc32_spans`).

With the compiled accelerator (`core.record.accel`) each of these is one C call over all the
bodies (`_accel.crc32_rows`, `crc32_spans`, `crc32_many`), the numpy tables the reference.
"""
from __future__ import annotations

import numpy as np

from core.record.accel import native
from core.record.crc import crc32, crc32_for_size

MAX_ROW = 128                      # longest body checked with the table (measured crossover,
                                   # about 130 B against ISA-L's crc32 per slice)
_BYTES = np.arange(256, dtype=np.uint32)
_STEP = (np.array([crc32(bytes([v])) for v in range(256)], np.uint32)
         ^ np.uint32(crc32(b"\0")))                # U[1]: the raw register after one byte


def _shift_table(rows: int) -> np.ndarray:
    """U[0..rows] flattened, U[0] unused: U[k][v] at k * 256 + v."""
    table = np.zeros((rows + 1, 256), np.uint32)
    table[1] = _STEP
    for k in range(1, rows):
        prev = table[k]
        table[k + 1] = _STEP[prev & 0xFF] ^ (prev >> 8)
    return table.ravel()


_SHIFT = _shift_table(MAX_ROW)
_ZEROS = np.array([crc32(bytes(k)) for k in range(MAX_ROW + 1)], np.uint32)


def crc32_rows(bodies: np.ndarray) -> np.ndarray:
    """crc32 of each row of `bodies` (uint8, n x L with L <= MAX_ROW), as int64."""
    width = bodies.shape[1]
    if native is not None and bodies.strides[1] == 1:
        return np.frombuffer(native.crc32_rows(bodies), np.uint32).astype(np.int64)
    if width == 0:
        return np.zeros(len(bodies), np.int64)
    at = np.arange(width, 0, -1, dtype=np.intp) * 256        # U[L - j] for column j
    parts = np.take(_SHIFT, np.add(bodies, at, dtype=np.intp))
    return (np.bitwise_xor.reduce(parts, axis=1) ^ _ZEROS[width]).astype(np.int64)


def crc32_spans(buf, starts, stops, n: int) -> np.ndarray:
    """crc32 of buf[starts[i]:stops[i]] for the n spans, as int64, one call each."""
    if native is not None:
        return np.frombuffer(native.crc32_spans(buf, starts, stops), np.uint32, n).astype(np.int64)
    view = memoryview(buf)
    try:
        return np.fromiter(map(crc32, map(view.__getitem__, map(slice, starts, stops))),
                           np.int64, n)
    finally:
        view.release()


def crc32_many(bodies) -> np.ndarray:
    """crc32 of each buffer of the list `bodies` (at least one), as uint32."""
    if native is not None:
        return np.frombuffer(native.crc32_many(bodies), np.uint32)
    return np.fromiter(map(crc32_for_size(len(bodies[0])), bodies), np.uint32, len(bodies))
