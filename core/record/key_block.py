"""A batch's UNIQ_KEYs as one block (`put_batch`'s `uniq_key_block`, docs/PROTOCOL.md): the
keys, all ASCII and of one length, back to back in one bytes object.

A list of 100 key strings costs a producer and the appender a string object per key at every
step (generate, pack, unpack, check, join); the block is one object from the producer's key
generator to the records' property strings, and the keys are split into strings only when
someone asks for them (`KeyBlock.keys`). `block_problem` is the wire check; a block that passes
it may still hold the property separators, which the store refuses as MESSAGE_ILLEGAL like
any key (`has_separators`).
"""
from __future__ import annotations

from typing import NamedTuple


class KeyBlock(NamedTuple):
    """`count` keys of `len(data) // count` ASCII bytes each, back to back in `data`."""
    data: bytes
    count: int

    @property
    def width(self) -> int:
        return len(self.data) // self.count

    def keys(self) -> list[str]:
        """The keys as strings, in order."""
        if not self.count:
            return []
        text = self.data.decode("ascii")
        w = self.width
        return [text[i:i + w] for i in range(0, len(text), w)]

    def has_separators(self) -> bool:
        """Whether a key holds \\x01 or \\x02, the separators of RocketMQ's property string."""
        return b"\x01" in self.data or b"\x02" in self.data


def key_list(uniq_keys):
    """UNIQ_KEYs given as a list of strings or as a KeyBlock, as a list of strings (None stays
    None): for the paths that take them one by one."""
    return uniq_keys.keys() if uniq_keys.__class__ is KeyBlock else uniq_keys


def block_problem(data: bytes, count: int) -> str | None:
    """Why `data` is not a block of `count` keys (None when it is one): it must be ASCII and
    split into `count` keys of one length, at least one byte each."""
    if count < 1 or not data or len(data) % count:
        return f"must hold {count} keys of one length back to back, got {len(data)} bytes"
    if not data.isascii():
        return "must be ASCII"
    return None
