"""UNIQ_KEY values of messages, made client-side as RocketMQ's MessageClientIDSetter makes
them: 32 upper-case hex digits, 20 fixed per process (IPv4 address, pid, 4 random bytes) and 12
per message (milliseconds since the start of the month, 8 digits, and a 16-bit counter). At
most 65,536 keys are issued per millisecond value (the clock used is never allowed to go
back), so keys of one process never repeat; the random part separates processes on one host.
"""
from __future__ import annotations

import os
import random
import socket
import threading
import time
import weakref

from core.record.key_block import KeyBlock

UNIQ_KEY = "UNIQ_KEY"
_KEYS_PER_MS = 0x10000
_HEX1 = [f"{i:X}" for i in range(16)]
_HEX3 = [f"{i:03X}" for i in range(4096)]
_HEX3B = [x.encode() for x in _HEX3]

def _local_ipv4() -> bytes:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))        # no packet is sent for a UDP connect
            return socket.inet_aton(s.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """(start of this month, start of the next), local time, in ms since the epoch."""
    t = time.localtime(now_ms / 1000.0)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)


_GENERATORS: "weakref.WeakSet[UniqKeyGenerator]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for gen in list(_GENERATORS):
        gen._lock = threading.Lock()  # another thread of the parent may have held it
        gen._prefix = ""


class UniqKeyGenerator:
    """Thread-safe source of UNIQ_KEY values (see the module docstring for the layout). The
    fixed part is made on first use and again in a forked child (an at-fork hook forgets it)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._prefix = ""
        self._ms = 0
        self._used = 0
        self._counter = random.getrandbits(16)
        self._month = (0, 0)          # (this month's start, next month's start) in ms
        self._head_ms = -1            # the millisecond that _head (the first 28 digits) is of
        self._head = ""
        _GENERATORS.add(self)

    def _fixed(self) -> str:
        if not self._prefix:          # first use, or a forked child
            self._prefix = (_local_ipv4() + (os.getpid() & 0xFFFF).to_bytes(2, "big")
                            + os.urandom(4)).hex().upper()
        return self._prefix

    def _since_month(self, ms: int) -> int:
        start, end = self._month
        if not start <= ms < end:
            self._month = start, end = _month_bounds_ms(ms)
        return (ms - start) & 0xFFFFFFFF

    def _reserve(self, take: int) -> tuple[str, int]:
        """(the first 28 digits, the first counter) of `take` keys under one time value (the
        caller holds the lock)."""
        ms = max(time.time_ns() // 1_000_000, self._ms)
        if ms == self._ms and self._used + take > _KEYS_PER_MS:
            ms += 1                                   # this millisecond is used up
        if ms != self._ms:
            self._ms, self._used = ms, 0
        self._used += take
        start = self._counter
        self._counter = (start + take) & 0xFFFF
        if ms != self._head_ms or not self._prefix:   # a new millisecond, or a forked child
            self._head_ms = ms
            self._head = self._fixed() + "%08X" % self._since_month(ms)
        return self._head, start

    def next_keys(self, n: int) -> list:
        """`n` fresh keys, consecutive counters under one time value where possible."""
        return self.next_key_block(n).keys()

    def next_key_block(self, n: int) -> KeyBlock:
        """`next_keys(n)` as one core.record.key_block.KeyBlock: ASCII bytes back to back, no string
        per key (what a batch of bodies sends as `uniq_key_block`)."""
        parts = []
        count = n
        while n > 0:
            take = min(n, _KEYS_PER_MS)
            with self._lock:
                head, c = self._reserve(take)
            left = take
            while left:
                lo = c & 0xFFF
                k = min(left, 4096 - lo)
                h = (head + _HEX1[c >> 12]).encode()
                parts.append(h + h.join(_HEX3B[lo:lo + k]))     # h t0 h t1 ... h tk-1
                left -= k
                c = (c + k) & 0xFFFF
            n -= take
        return KeyBlock(b"".join(parts), count)

    def next_key(self) -> str:
        """One fresh key: `next_keys(1)[0]` without the list (every single send takes one)."""
        with self._lock:
            head, c = self._reserve(1)
        return head + _HEX1[c >> 12] + _HEX3[c & 0xFFF]


UNIQ_KEYS = UniqKeyGenerator()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
