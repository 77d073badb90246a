"""A service waiting in its poll stops at once on SIGTERM: the signal also writes to a pipe
the poller watches (`ServiceLoop._watch_signals`), so the wait does not run to the end of
its interval (100 ms for an idle appender, 30 s here)."""
from __future__ import annotations

import os
import signal
import threading
import time

import zmq

from services.base import ServiceLoop


class Idle(ServiceLoop):
    """Only the loop's waiting parts: no control block, no sockets but the signal pipe."""

    def __init__(self):                                  # the base connects to a running store
        self.poller = zmq.Poller()
        self.ready = {}
        self.stopped = False
        self._signal_r = self._signal_w = None


def test_a_signal_ends_the_wait_at_once():
    loop = Idle()
    old = signal.signal(signal.SIGUSR1, loop._on_sigterm)
    try:
        loop._watch_signals()
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        loop.wait_for_running(30_000)
        waited = time.monotonic() - t0
        assert loop.stopped
        assert waited < 10, waited                       # not the 30 s interval
        loop.wait_for_running(0)                          # the pipe was drained: nothing ready
        assert not loop.ready
    finally:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGUSR1, old)
        for fd in (loop._signal_r, loop._signal_w):
            if fd is not None:
                os.close(fd)
