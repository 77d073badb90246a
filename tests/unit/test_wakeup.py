"""ipc/wakeup.py: a named FIFO as a wakeup between two processes of one store."""
from __future__ import annotations

import multiprocessing
import os
import select
import stat

import pytest

from ipc.wakeup import Wakeup, wakeup_path


def test_a_notify_wakes_the_other_end_once_and_drain_takes_all(tmp_path):
    a, b = Wakeup(str(tmp_path), "flush"), Wakeup(str(tmp_path), "flush")
    try:
        assert stat.S_ISFIFO(os.stat(wakeup_path(str(tmp_path), "flush")).st_mode)
        assert not b.drain()                                  # nothing pending
        assert select.select([b], [], [], 0)[0] == []
        for _ in range(5):
            a.notify()
        assert select.select([b], [], [], 1)[0] == [b]
        assert b.drain()                                      # five notifies, one wakeup
        assert not b.drain()
        assert select.select([b], [], [], 0)[0] == []
    finally:
        a.close()
        b.close()


def test_a_full_pipe_drops_the_byte_without_blocking(tmp_path):
    a, b = Wakeup(str(tmp_path), "w"), Wakeup(str(tmp_path), "w")
    try:
        for _ in range(70_000):                               # over the 64 KiB of a pipe
            a.notify()
        assert b.drain() and not b.drain()
    finally:
        a.close()
        b.close()


def test_an_end_reopened_after_a_restart_shares_the_same_pipe(tmp_path):
    a = Wakeup(str(tmp_path), "w")
    b = Wakeup(str(tmp_path), "w")
    b.close()                                                 # the receiver restarts
    a.notify()                                                # while it is gone
    b = Wakeup(str(tmp_path), "w")
    try:
        assert b.drain()                                      # the pending wakeup is there
    finally:
        a.close()
        b.close()


def _notify_later(run_dir: str, name: str) -> None:
    Wakeup(run_dir, name).notify()


def test_a_notify_from_another_process_wakes_a_poll(tmp_path):
    w = Wakeup(str(tmp_path), "flushed")
    try:
        p = multiprocessing.get_context("spawn").Process(target=_notify_later, args=(str(tmp_path), "flushed"))
        p.start()
        assert select.select([w], [], [], 30)[0] == [w]
        p.join(30)
        assert p.exitcode == 0 and w.drain()
    finally:
        w.close()


def test_a_path_that_is_not_a_fifo_is_refused(tmp_path):
    with open(wakeup_path(str(tmp_path), "w"), "w"):
        pass
    with pytest.raises(RuntimeError, match="not a FIFO"):
        Wakeup(str(tmp_path), "w")
