"""Java `String.hashCode` as RocketMQ uses it: tag codes, subscription codes and index keys.

The JVM hashes UTF-16 code units with 32-bit signed wrap-around, so a character outside
the Basic Multilingual Plane counts as two units (its surrogate pair).
"""
from __future__ import annotations

import sys
from array import array
from functools import lru_cache
from operator import mul

import numpy as np

from core.record.accel import native

_INT_MIN = -(1 << 31)
_MASK = 0xFFFFFFFF


def _utf16_units(s: str) -> array:
    units = array("H")
    units.frombytes(s.encode("utf-16-le"))
    if sys.byteorder == "big":
        units.byteswap()
    return units


_POWERS = [pow(31, k, 1 << 32) for k in range(256)]     # 31^k mod 2^32, k ascending
_POWERS_DESC = _POWERS[::-1]
# Each power as (low 16 bits, high 16 bits), float64: byte * half * 256 terms < 2^53.
_POWER_HALVES = np.array([(p & 0xFFFF, p >> 16) for p in _POWERS_DESC], dtype=np.float64)
_NUMPY_MIN_KEYS = 16               # below this, numpy's call overhead beats its speed


def _hash_units(units) -> int:
    """sum(u[i] * 31^(n-1-i)) mod 2^32, with the products summed in C rather than a Python loop."""
    n = len(units)
    if n <= len(_POWERS):
        return sum(map(mul, units, _POWERS_DESC[len(_POWERS) - n:])) & _MASK
    h = 0
    for u in units:
        h = (31 * h + u) & _MASK
    return h


@lru_cache(maxsize=65536)
def java_hash(s: str) -> int:
    """`s.hashCode()` of the JVM: sum of s[i]*31^(n-1-i) over UTF-16 units, int32."""
    h = _hash_units(s.encode("latin-1") if s.isascii() else _utf16_units(s))
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """The consume-queue tag code: the hash of the whole TAGS string, 0 when absent."""
    return java_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """The index file's key hash: |hashCode|, with Integer.MIN_VALUE mapped to 0."""
    h = java_hash(key)
    return 0 if h == _INT_MIN else abs(h)


def index_key_hashes(keys, prefix: str = "") -> np.ndarray:
    """`index_key_hash(prefix + key)` of every key, as int64: `keys` is a list of strings or a
    matrix of ASCII bytes (numpy uint8, one key a row). When the keys are ASCII and of one length
    (generated UNIQ_KEYs), they are hashed together: one matrix of bytes times the powers of
    31, in numpy, plus the prefix's hash shifted past the key (h(p + k) = h(p) * 31^len(k) +
    h(k), mod 2^32), instead of a Python call per key."""
    if isinstance(keys, np.ndarray):
        if 0 < keys.shape[1] <= len(_POWERS):
            return _hash_rows(keys, prefix)
        keys = [row.tobytes().decode("ascii") for row in keys]
    if native is not None:
        return np.frombuffer(native.index_key_hashes(keys, prefix), np.int64)
    n = len(keys)
    if n >= _NUMPY_MIN_KEYS:
        width = len(keys[0])
        joined = "".join(keys)
        if 0 < width <= len(_POWERS) and len(joined) == n * width and joined.isascii() \
                and set(map(len, keys)) == {width}:
            return _hash_rows(np.frombuffer(joined.encode("ascii"), np.uint8).reshape(n, width),
                              prefix)
    return np.array([index_key_hash(prefix + k) for k in keys], np.int64)


def _hash_rows(units: np.ndarray, prefix: str) -> np.ndarray:
    """`index_key_hashes` of ASCII keys as rows of bytes, 0 < width <= len(_POWERS). The sums
    of bytes times powers of 31 are taken in float64 (one BLAS product) with each power split
    into 16-bit halves, so that every sum stays below 2^53 and is exact."""
    width = units.shape[1]
    sums = (units @ _POWER_HALVES[len(_POWERS) - width:]).astype(np.int64)
    h = sums[:, 0] + ((sums[:, 1] & 0xFFFF) << 16)
    if prefix:
        h += java_hash(prefix) * pow(31, width, 1 << 32) & _MASK
    h &= _MASK
    h = np.where(h >= 1 << 31, (1 << 32) - h, h)      # |signed value|
    h[h == 1 << 31] = 0                                # Integer.MIN_VALUE
    return h
