"""UNIQ_KEY values of the producer (ipc.producer.UniqKeyGenerator): RocketMQ's layout of 32
upper-case hex digits, fixed per process, unique per message, also across threads, batch
boundaries, counter wrap-around and forks."""
from __future__ import annotations

import os
import re
import socket
import threading
import time

import pytest

from ipc.producer import UNIQ_KEYS, UniqKeyGenerator

HEX32 = re.compile(r"^[0-9A-F]{32}$")


def test_format_is_32_upper_case_hex_digits():
    for key in UniqKeyGenerator().next_keys(1000):
        assert HEX32.match(key), key


def test_fixed_part_is_ip_pid_and_instance():
    key = UniqKeyGenerator().next_key()
    ip = bytes.fromhex(key[:8])
    socket.inet_ntoa(ip)                                  # a valid IPv4 address
    assert int(key[8:12], 16) == os.getpid() & 0xFFFF
    gen = UniqKeyGenerator()
    assert len({k[:20] for k in gen.next_keys(5000)}) == 1


def test_instances_differ_in_the_random_part():
    a, b = UniqKeyGenerator().next_key(), UniqKeyGenerator().next_key()
    assert a[:12] == b[:12] and a[12:20] != b[12:20]


def test_time_part_is_milliseconds_since_the_start_of_the_month():
    now = time.time_ns() // 1_000_000
    t = time.localtime(now / 1000)
    month_start = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
    key = UniqKeyGenerator().next_key()
    assert abs(int(key[20:28], 16) - (now - month_start)) < 5_000


def test_keys_are_unique_across_batches_and_counter_wrap():
    gen = UniqKeyGenerator()
    keys = []
    for n in (1, 7, 4095, 4096, 4097, 100, 65535, 3, 65536, 2):
        batch = gen.next_keys(n)
        assert len(batch) == n
        keys += batch
    assert len(set(keys)) == len(keys)


def test_a_batch_larger_than_the_counter_is_unique():
    keys = UniqKeyGenerator().next_keys(200_000)
    assert len(set(keys)) == 200_000
    assert len({k[20:28] for k in keys}) >= 4           # spread over several time values


def test_consecutive_counters_within_a_batch():
    keys = UniqKeyGenerator().next_keys(5000)
    counters = [int(k[28:], 16) for k in keys]
    assert all((b - a) & 0xFFFF == 1 for a, b in zip(counters, counters[1:]) if a != 0xFFFF)


def test_threads_get_distinct_keys():
    out = []
    lock = threading.Lock()

    def work():
        mine = []
        for _ in range(200):
            mine += UNIQ_KEYS.next_keys(50)
        with lock:
            out.extend(mine)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 40_000 and len(set(out)) == 40_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_prefix():
    parent = UNIQ_KEYS.next_key()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, UNIQ_KEYS.next_key().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert HEX32.match(child)
    assert child[8:12] == f"{pid & 0xFFFF:04X}" and child[:20] != parent[:20]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_the_lock_is_held_still_makes_keys():
    gen = UniqKeyGenerator()
    parent = gen.next_key()
    r, w = os.pipe()
    with gen._lock:                                       # as if another thread were in next_keys
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.write(w, gen.next_key().encode())
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 10
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child deadlocked on the parent's lock")
        time.sleep(0.01)
    child = os.read(r, 64).decode()
    os.close(r)
    assert HEX32.match(child) and child[8:12] == f"{pid & 0xFFFF:04X}" and child[:20] != parent[:20]


def test_single_keys_and_batches_share_one_counter_and_time_part():
    gen = UniqKeyGenerator()
    keys = [gen.next_key(), *gen.next_keys(3), gen.next_key(), gen.next_key()]
    counters = [int(k[28:], 16) for k in keys]
    assert all((b - a) & 0xFFFF == 1 for a, b in zip(counters, counters[1:]))
    assert len({k[:20] for k in keys}) == 1 and len(set(keys)) == 6
    assert all(HEX32.match(k) for k in keys)


def test_more_single_keys_than_the_counter_holds_are_unique():
    gen = UniqKeyGenerator()
    gen._ms = time.time_ns() // 1_000_000 + 60_000       # a clock that stands still for a minute
    keys = [gen.next_key() for _ in range(70_000)]
    assert len(set(keys)) == 70_000
    assert len({k[20:28] for k in keys}) == 2               # 65,536 under one time value, then the next
