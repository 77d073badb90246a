"""The daemon thread of a client `Connection` (ipc/connection.py) that leads while no user
thread does I/O, so that futures also complete (and their callbacks run) when nobody asks for
them.

It steps aside as soon as a user thread wants to wait, and keeps off the sockets for
`QUIET_S` (5 ms) after a user thread did I/O: waking it for every reply cost a pipelining
producer 10-30% of its CPU in GIL hand-offs. While user threads keep doing I/O it naps 5, 10,
20, then 40 ms (`NAP_MAX_S`) between checks, holding no lock and no role: each check wakes a
thread and takes the GIL from the caller, and at 200 checks a second that was a fifth of the
CPU of 16 pipelining producer processes on two cores. Callbacks of replies that no user thread
waits for therefore run at most about 45 ms after user threads go quiet. `stop()` ends a nap
at once.
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger("mqstore.client")

QUIET_S = 0.005                 # stay off the sockets this long after user I/O
NAP_MAX_S = 0.04                # the longest nap while user threads keep doing I/O
ERROR_PAUSE_S = 0.1


class BackgroundLeader:
    """Runs `conn.wait(conn.users_active)` whenever `conn.users_active()` is false, until
    `conn.closed`. The thread starts at once but holds until `go()`, so that the connection
    can record `ident` (the thread's id) before the thread touches it."""

    def __init__(self, conn):
        self._conn = conn
        self._go = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqstore-client-io", daemon=True)
        self._thread.start()
        self.ident = self._thread.ident

    def go(self) -> None:
        self._go.set()

    def _run(self) -> None:
        self._go.wait()
        conn = self._conn
        nap = QUIET_S
        while not conn.closed:
            if conn.users_active():
                self._stopping.wait(nap)
                nap = min(nap * 2, NAP_MAX_S)
                continue
            nap = QUIET_S
            try:
                conn.wait(conn.users_active, None)
            except Exception:                        # never let the I/O thread die silently
                log.exception("client I/O thread error")
                self._stopping.wait(ERROR_PAUSE_S)

    def stop(self, timeout: float = 5.0) -> None:
        """End a nap and wait for the thread (the connection is closed already)."""
        self._stopping.set()
        self._go.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
