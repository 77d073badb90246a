"""Regression: a ServiceLoop that polls no socket must still wait its interval
(zmq.Poller.poll with nothing registered returns at once, and the loop spun at full CPU)."""
import time

import zmq

from services.base import ServiceLoop


def test_wait_for_running_without_sockets_waits_the_interval():
    loop = ServiceLoop.__new__(ServiceLoop)          # only the poller matters here
    loop.poller = zmq.Poller()
    loop.ready = {}
    start = time.monotonic()
    loop.wait_for_running(50)
    assert time.monotonic() - start >= 0.045
