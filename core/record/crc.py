"""The one CRC32 routine of the store: the checksum of record bodies (BODYCRC), of the
checkpoint, and of the tables in `core.record.body_crc`.

RocketMQ's BODYCRC is `java.util.zip.CRC32` (zlib's polynomial), masked to 31 bits by the
callers. ISA-L computes the same value with carry-less multiply instructions: about 0.12 µs
for a 1 KiB body against 0.45 µs for the stdlib's `zlib.crc32` on this machine, and ten
times less for 4 KiB. Every put and every checked read or scan pays one body CRC, so it is
worth the dependency (pyproject.toml). Same signature as `zlib.crc32(data[, value])`.

ISA-L's call costs ~150 ns whatever the length up to 512 bytes; zlib's is cheaper below
256 bytes (~120 ns at 100). `crc32_for_size` picks the cheaper of the two for a run of
bodies of one size (a batch's); both give the same value.

With the compiled accelerator (`core.record.accel`) `crc32` is its C routine instead (the same
value: carry-less multiply folding, measured 60-120 ns a call from 100 B to 1 KiB, a third of
ISA-L's call, about equal at 4 KiB), for every size; ISA-L and zlib remain the reference.
"""
from zlib import crc32 as _zlib_crc32

from isal.isal_zlib import crc32 as _isal_crc32

from core.record.accel import native

crc32 = _isal_crc32 if native is None else native.crc32

__all__ = ["crc32", "crc32_for_size"]

_ZLIB_SIZES = range(32, 256)       # measured: zlib's call is the cheaper one for these


def crc32_for_size(size: int):
    """The cheaper CRC32 function for buffers of `size` bytes."""
    if native is not None:
        return crc32
    return _zlib_crc32 if size in _ZLIB_SIZES else crc32
