"""Keeping freed heap memory in the process instead of handing it back to the kernel.

Pulls and batches move frames of 100 KiB to a few MiB through ZeroMQ and bytes objects.
With glibc's defaults a freed chunk at the top of the heap is trimmed as soon as 128 KiB
(or twice the last large allocation) sits free there, so the next frame lands on pages the
kernel must fault in and zero again. On the small VMs this project runs on, a fresh page
costs several microseconds (the host backs it on first touch), and a consumer reading 1 KiB
messages took one fault per three messages: a quarter of its CPU.

`keep_freed_heap()` raises the trim threshold and the top pad so that the heap keeps up to
`TRIM_THRESHOLD` of freed memory for the next frame, and pins the mmap threshold so that
frames below `MMAP_THRESHOLD` come from that heap rather than from a fresh mapping each.
It is called once per process by every service, as it starts (`services.base.run_service`):
process tuning belongs to the processes the store runs, so the client library (`ipc`) and
the embedded store (`core`) leave their user's allocator as they find it; a client process
that moves large frames may call it itself. It does nothing where glibc's `mallopt` is
missing (musl, macOS), and leaves each setting alone that the user chose through glibc's own
environment variables (MALLOC_TRIM_THRESHOLD_, ...).
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

TRIM_THRESHOLD = 64 << 20       # freed bytes kept at the top of a heap before trimming
TOP_PAD = 16 << 20              # extra bytes taken from the kernel when a heap grows
MMAP_THRESHOLD = 32 << 20       # glibc's ceiling for this setting on 64-bit

_SETTINGS = (
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ("MALLOC_TOP_PAD_", M_TOP_PAD, TOP_PAD),
)
_done = False


def keep_freed_heap() -> bool:
    """Apply the settings once per process; True when glibc took every one we set."""
    global _done
    if _done:
        return True
    _done = True
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = True
    for env, param, value in _SETTINGS:
        if env not in os.environ:
            ok = mallopt(param, value) == 1 and ok
    return ok
