"""Wakeups between two services of one store that cost one system call: a named FIFO under
the store's `run/` directory (`<name>.fifo`) that both sides open.

A ZeroMQ PUSH or PUB message between two processes passes through each side's I/O thread, so
a wakeup costs the sender a send, then two more thread hand-offs before the receiver's poll
returns. A byte written to a pipe wakes the receiver's poll directly. The SYNC_FLUSH wait
path uses two of these (docs/SERVICES.md, the SYNC_FLUSH wait): `flush` (appender to flusher:
records wait for an fdatasync) and `flushed` (flusher to appender: FLUSHED rose).

What it saved (docs/SERVICES.md, the SYNC_FLUSH wait, has the figures and how they were taken):
one `send()` at a time under SYNC_FLUSH went from p50 2.90 / 1.37 / 3.54 ms to 0.94 / 1.75 / 1.50
ms in pairs run alternately on a loaded 2-core VM; what it costs: one write and one read system
call per round, and two file descriptors per service.

A wakeup carries no data: the position it announces is a control-block word, written before
`notify()` and read after `drain()`, so a wakeup that is lost or merged with others is caught
by the receiver's next look at the word (each receiver's poll has a timeout for that).
Many notifies before one drain are one wakeup; a full pipe (a receiver that has not read for
64 KiB of notifies) drops the byte, since one is pending anyway.

Both ends open the FIFO O_RDWR | O_NONBLOCK: on Linux that open never blocks for the other
side and no write ever raises EPIPE or SIGPIPE, so either service can start, stop and
restart alone. The FIFO is created by whichever side opens it first and kept while the store
runs (a restarted service opens the same pipe); the supervisor removes leftovers at start.
"""
from __future__ import annotations

import errno
import os
import stat

SUFFIX = ".fifo"


def wakeup_path(run_dir: str, name: str) -> str:
    return os.path.join(run_dir, name + SUFFIX)


class Wakeup:
    """One end (either) of the named wakeup `name` under `run_dir`; `fileno()` for a poller."""

    def __init__(self, run_dir: str, name: str):
        path = wakeup_path(run_dir, name)
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            pass
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise RuntimeError(f"{path} exists and is not a FIFO")
        self.path = path
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def notify(self) -> None:
        """Wake the other side (at most one pending byte's worth matters)."""
        try:
            os.write(self._fd, b"w")
        except BlockingIOError:
            pass                       # the pipe is full: a wakeup is pending already
        except OSError as e:
            if e.errno != errno.EINTR:
                raise

    def drain(self) -> bool:
        """Take every pending wakeup; whether there was any. Read the announced word after it."""
        woken = False
        while True:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                return woken
            except InterruptedError:
                continue
            if not data:
                return woken
            woken = True
            if len(data) < 4096:
                return True

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
