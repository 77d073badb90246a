"""The CommitLog record's layout, spelled once (DESIGN.md section 3): the fixed header's fields
in order, and everything derived from them: the struct of each host-length variant, the numpy
dtype of each, the position of every field, and structs that read only some fields.

Every module that packs or unpacks a record header takes its struct, dtype or positions from
here; a header tuple (`HEADERS[...].unpack_from`) is indexed by the `F_*` constants below.

    TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
    STORETIMESTAMP STOREHOSTADDRESS RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH

then BODY, TOPICLENGTH (1 byte in v1, 2 in v2), TOPIC, PROPERTIESLENGTH (2), PROPERTIES.
A host is 8 bytes (IPv4 address + port) or 20 (IPv6), as SYSFLAG's 0x10 (born) and 0x20
(store) bits say.
"""
from __future__ import annotations

import struct

import numpy as np

from core.record.message import SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6

HOST = "host"                  # a field of 8 or 20 bytes, by the host's address family

# (name, struct code): the fixed header, big-endian, in record order. The names are those of
# the numpy dtypes (`dtype`).
FIELDS = (
    ("total", "i"), ("magic", "i"), ("crc", "i"), ("queue_id", "i"), ("flag", "i"),
    ("queue_offset", "q"), ("phys", "q"), ("sys_flag", "i"), ("born_ts", "q"),
    ("born_host", HOST), ("store_ts", "q"), ("store_host", HOST), ("reconsume", "i"),
    ("prepared", "q"), ("body_len", "i"),
)
NAMES = tuple(name for name, _ in FIELDS)
(F_TOTAL, F_MAGIC, F_CRC, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET, F_PHYS, F_SYS_FLAG, F_BORN_TS,
 F_BORN_HOST, F_STORE_TS, F_STORE_HOST, F_RECONSUME, F_PREPARED, F_BODY_LEN) = range(len(FIELDS))

MAGIC_V1 = -626843481          # 0xDAA320A7
MAGIC_V2 = -626843477          # 0xDAA320AB
MAGIC_BLANK = -875286124       # 0xCBD43194
BLANK_SIZE = 8                 # END_FILE_MIN_BLANK_LENGTH: TOTALSIZE and MAGIC
HOST_LENGTHS = (8, 20)
V6_BITS = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6

_CODES = {"i": 4, "q": 8}


def _sizes(born_len: int, store_len: int) -> list[int]:
    hosts = iter((born_len, store_len))
    return [next(hosts) if code == HOST else _CODES[code] for _, code in FIELDS]


def offsets(born_len: int = 8, store_len: int = 8) -> dict[str, int]:
    """Where each header field starts, by name."""
    out, at = {}, 0
    for (name, _), size in zip(FIELDS, _sizes(born_len, store_len)):
        out[name] = at
        at += size
    return out


def _format(born_len: int, store_len: int, wanted=None) -> str:
    """The struct format of the header; with `wanted`, one that reads only those fields and
    skips the others (pad bytes), up to the last wanted one."""
    parts = []
    last = max(NAMES.index(n) for n in wanted) if wanted else len(FIELDS) - 1
    for (name, code), size in zip(FIELDS[:last + 1], _sizes(born_len, store_len)):
        if wanted is not None and name not in wanted:
            parts.append(f"{size}x")
        else:
            parts.append(f"{size}s" if code == HOST else code)
    return ">" + "".join(parts)


def header_struct(born_len: int, store_len: int) -> struct.Struct:
    """The whole fixed header for these host lengths (15 values)."""
    return struct.Struct(_format(born_len, store_len))


def picked_struct(names, born_len: int = 8, store_len: int = 8) -> struct.Struct:
    """A struct that reads only the fields `names` (in record order) of the header: for
    unpacking only (packing it would write zeros over the fields it skips)."""
    return struct.Struct(_format(born_len, store_len, frozenset(names)))


def dtype(born_len: int = 8, store_len: int = 8) -> np.dtype:
    """The header as a packed big-endian numpy record, fields named as in FIELDS."""
    return np.dtype([(name, f"V{size}" if code == HOST else f">i{size}")
                     for (name, code), size in zip(FIELDS, _sizes(born_len, store_len))])


def host_lengths(sys_flag: int) -> tuple[int, int]:
    """(born host length, store host length) for a SYSFLAG."""
    return (20 if sys_flag & SYSFLAG_BORNHOST_V6 else 8), (20 if sys_flag & SYSFLAG_STOREHOST_V6 else 8)


# The four host variants, by (born length, store length) and by (sys_flag >> 4) & 3.
HEADERS = {(b, s): header_struct(b, s) for b in HOST_LENGTHS for s in HOST_LENGTHS}
DTYPES = {(b, s): dtype(b, s) for b in HOST_LENGTHS for s in HOST_LENGTHS}
BY_FLAGS = tuple(HEADERS[host_lengths(f << 4)] for f in range(4))
BODY_POS = tuple(h.size for h in BY_FLAGS)          # where BODY starts, by (sys_flag >> 4) & 3
HEADER_V4 = HEADERS[8, 8]
HEADER_V4_SIZE = HEADER_V4.size                     # 88
DTYPE_V4 = DTYPES[8, 8]

_AT = offsets()
QUEUE_OFFSET_POS = _AT["queue_offset"]              # 20
PHYS_OFFSET_POS = _AT["phys"]                       # 28
SYSFLAG_POS = _AT["sys_flag"]                       # 36
BORN_HOST_POS = _AT["born_host"]                    # 48
POSITIONS = struct.Struct(">" + "".join(c for _, c in FIELDS[F_QUEUE_OFFSET:F_PHYS + 1]))  # at 20
STORE_TIMESTAMP = struct.Struct(">q")               # at store_timestamp_position(sys_flag)
FRAME = struct.Struct(">ii")                        # TOTALSIZE MAGIC (a blank's whole header)
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


def store_timestamp_position(sys_flag: int) -> int:
    """Where STORETIMESTAMP lies: 56, or 68 after an IPv6 born host."""
    return BORN_HOST_POS + host_lengths(sys_flag)[0]


def record_size(body_len: int, topic_len: int, props_len: int, born_v6=False, store_v6=False,
                topic_len_bytes: int = 1) -> int:
    """TOTALSIZE: 91 + body + topic + properties for IPv4 hosts, +12 per IPv6 host."""
    return (HEADER_V4_SIZE + topic_len_bytes + 2 + body_len + topic_len + props_len
            + (12 if born_v6 else 0) + (12 if store_v6 else 0))


MIN_RECORD_SIZE = record_size(0, 0, 0)     # 91: the smallest TOTALSIZE a record can have
