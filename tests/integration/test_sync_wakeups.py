"""The SYNC_FLUSH wait path's wakeups (ipc/wakeup.py; docs/SERVICES.md, the SYNC_FLUSH wait),
with the real appender and flusher: a put is answered through the `flush` and `flushed` FIFOs,
and when both wakeups are lost (taken from the FIFOs by this test while the process that should
read each is stopped) the flusher's poll interval still finds the appended bytes and the
appender's poll interval still finds FLUSHED: the put is answered PUT_OK, never before its
record is flushed."""
from __future__ import annotations

import os
import signal
import time

import psutil

from ipc.control_block import Word
from ipc.protocol import pack, unpack
from ipc.wakeup import Wakeup
from tests.integration.harness import RawClient, ServiceHarness, wait_for
from tests.integration.test_write_services import WRITE, config, put_ok, record_end  # noqa: F401


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    assert wait_for(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED)


def test_sync_puts_are_answered_through_the_wakeups(config):
    cfg = config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=10_000)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        ends = []
        for i in range(50):
            r = put_ok(c, "W", b"w-%d" % i, queue_id=0)
            ends.append(r["phys_offset"])
            assert h.cb.get(Word.FLUSHED) > r["phys_offset"]       # durable before its answer
        assert ends == sorted(ends)
        assert os.path.exists(os.path.join(cfg.run_dir, "flush.fifo"))
        assert os.path.exists(os.path.join(cfg.run_dir, "flushed.fifo"))


def test_lost_wakeups_are_caught_by_the_poll_intervals(config):
    cfg = config(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=10_000)
    with ServiceHarness(cfg, WRITE) as h:
        c = RawClient(h.endpoint("appender"))
        put_ok(c, "W", b"first", queue_id=0)
        flusher, appender = h.procs["flusher"].pid, h.procs["appender"].pid
        thief_flush, thief_flushed = Wakeup(cfg.run_dir, "flush"), Wakeup(cfg.run_dir, "flushed")
        stopped = []
        try:
            stop(flusher)
            stopped.append(flusher)
            end = record_end(h.cb.get(Word.WROTE), b"lost", "W")
            c.sock.send_multipart([pack({"op": "put", "rid": 7, "topic": "W", "queue_id": 0}), b"lost"])
            assert wait_for(lambda: h.cb.get(Word.WROTE) >= end)          # appended and parked
            assert wait_for(thief_flush.drain)                           # the flusher's wakeup, taken
            assert not c.sock.poll(50)                                   # not durable: no answer
            stop(appender)
            stopped.append(appender)
            thief_flush.drain()                  # with the appender stopped, no wakeup is left
            thief_flushed.drain()                # in either FIFO (an older one included)
            os.kill(flusher, signal.SIGCONT)
            stopped.remove(flusher)
            assert wait_for(lambda: h.cb.get(Word.FLUSHED) >= end)       # found by its poll interval
            assert wait_for(thief_flushed.drain)                         # the appender's wakeup, taken
            os.kill(appender, signal.SIGCONT)
            stopped.remove(appender)
            began = time.monotonic()
            assert c.sock.poll(5_000)                                    # well before sync_flush_timeout
            reply = unpack(c.sock.recv_multipart()[0])
            assert reply["rid"] == 7 and reply["status"] == "PUT_OK", reply
            assert time.monotonic() - began < 5.0
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)
            thief_flush.close()
            thief_flushed.close()
