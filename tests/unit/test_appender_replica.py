"""The SYNC_MASTER wait (services/appender/replica.py): SLAVE_NOT_AVAILABLE at once, group
commit on acknowledgements, FLUSH_SLAVE_TIMEOUT at the deadline, over a real control block."""
from __future__ import annotations

import os
import time

import pytest

from core.config import StoreConfig
from ipc.control_block import ControlBlock, Word
from services.appender.replica import ReplicaWait
from services.appender.waiters import Parked


@pytest.fixture
def cb():
    block = ControlBlock(f"mqstore-test-ha-{os.getpid()}", create=True)
    yield block
    block.close()


def p(end: int) -> Parked:
    return Parked(end, 0.0, b"id", {}, 0.0)


def test_sync_master_wait_statuses(cb):
    wait = ReplicaWait(StoreConfig(slave_timeout=200, ha_max_gap_not_in_sync=1000), cb)
    assert wait.park(p(100), 100) == "SLAVE_NOT_AVAILABLE"           # no slave
    cb.set(Word.HA_SLAVES, 1)
    cb.set(Word.HA_ACKED, 50)
    assert wait.park(p(2000), 2000) == "SLAVE_NOT_AVAILABLE"         # the best is too far behind
    assert wait.park(p(40), 100) == "PUT_OK"                         # a slave has it already
    for end in (100, 200, 300):
        assert wait.park(p(end), 300) is None
    cb.set(Word.HA_ACKED, 250)                                       # one ack answers two
    assert [(x.end, s) for x, s in wait.answers({})] == [(100, "PUT_OK"), (200, "PUT_OK")]
    time.sleep(0.25)
    assert [(x.end, s) for x, s in wait.answers({})] == [(300, "FLUSH_SLAVE_TIMEOUT")]
    assert not wait.waiters and wait.take_stats()["replica_latency"]
