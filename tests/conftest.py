"""Shared fixtures of the engine tests: a tiny-store configuration factory and stores that are
loaded, started and shut down at teardown.

Every store here uses tiny segments (16 KiB CommitLog files, 50-entry consume-queue files,
64 index slots and 512 index entries per file), so that rolling to a new segment, blank
records at segment ends and many files happen in every test.
"""
from __future__ import annotations

import gc
import os
import sys
import tempfile
import time

import pytest
import timeout_hooks

import pipeline  # noqa: F401 - the package first: tests put benchmarks/ (and its pipeline.py) on the path
from core.config import StoreConfig

pytest_collection_modifyitems = timeout_hooks.pytest_collection_modifyitems     # a pytest hook


def pytest_configure(config):
    """The tests start hundreds of Python processes (supervisors, services, CLI runs, producer
    pools), each importing the same modules. Under PYTHONDONTWRITEBYTECODE each of them
    compiled every one of those modules from source again (0.1-0.3 s of CPU per process),
    and pytest rewrote the asserts of every test module again at each run (about 4 s).
    Instead this process and the ones the tests start keep their bytecode in a cache outside
    the source tree (PYTHONPYCACHEPREFIX: .pytest_cache/d/pycache), so only the first one
    compiles. Without PYTHONDONTWRITEBYTECODE, Python writes __pycache__ as usual and nothing
    changes here."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if not prefix:
        cache = getattr(config, "cache", None)
        prefix = str(cache.mkdir("pycache")) if cache is not None else os.path.join(
            tempfile.gettempdir(), f"mqstore-tests-pycache-{os.getuid()}")
        os.environ["PYTHONPYCACHEPREFIX"] = prefix
    del os.environ["PYTHONDONTWRITEBYTECODE"]         # for the processes the tests start
    sys.pycache_prefix = prefix                       # and for this one: the test modules
    sys.dont_write_bytecode = False                   # imported from now on and their rewrites


TINY = dict(
    mapped_file_size_commitlog=4096 * 4,
    mapped_file_size_consume_queue=20 * 50,
    max_hash_slot_num=64,
    max_index_num=512,
    flush_interval_commitlog=10,
    commit_interval_commitlog=10,
    flush_interval_consume_queue=10,
    flush_consume_queue_thorough_interval=50,
)


FD_COLLECT_AT = 256     # descriptors open in this process past which a finished test's garbage goes


@pytest.fixture(autouse=True)
def _collect_dropped_files():
    """After a test, collect the garbage if many descriptors are open. Stores and readers that
    tests drop without shutting down sit in reference cycles, and their mappings close only
    when the cycle collector runs: left to its own pace, the process passed 1,024 descriptors
    (select() refuses those) in the pure-Python suite."""
    yield
    if len(os.listdir("/proc/self/fd")) > FD_COLLECT_AT:
        gc.collect()


def _wait_until(condition, timeout: float = 10.0, interval: float = 0.001):
    """Poll `condition()` until it is true or `timeout` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture
def wait_until():
    """`wait_until(condition, timeout=10)`: poll with a deadline instead of sleeping."""
    return _wait_until


@pytest.fixture
def tiny_config(tmp_path):
    """`tiny_config(**overrides)`: a StoreConfig with tiny segments under tmp_path/store."""
    def make(**overrides) -> StoreConfig:
        values = dict(TINY, store_path_root_dir=str(tmp_path / "store"))
        values.update(overrides)
        return StoreConfig(**values)
    return make


@pytest.fixture
def open_store():
    """`open_store(config, start=True)`: a loaded (and started) MessageStore; every store
    opened through it that is still running is shut down at teardown."""
    from core.store import MessageStore
    opened = []

    def make(config: StoreConfig, start: bool = True, **kwargs) -> MessageStore:
        store = MessageStore(config, **kwargs)
        store.load()
        opened.append(store)
        if start:
            store.start()
        return store

    yield make
    for store in reversed(opened):
        if not store.shut_down:
            store.shutdown()


@pytest.fixture
def written_store(open_store):
    """`written_store(config, count, body=b"x" * 50, topics=("T",))`: open a store, put `count`
    messages (message i: topic topics[i % len(topics)], KEYS k<i>), wait until they are
    dispatched and shut it down cleanly; returns the end of its CommitLog."""
    from core.record.message import Message

    def make(config: StoreConfig, count: int, body: bytes = b"x" * 50, topics=("T",)) -> int:
        store = open_store(config)
        for i in range(count):
            assert store.put_message(Message(topics[i % len(topics)], body, keys=f"k{i}")).status.ok
        assert store.wait_for_dispatch()
        end = store.get_max_phy_offset()
        store.shutdown()
        return end
    return make


@pytest.fixture
def store(tiny_config, open_store):
    """A started ASYNC_FLUSH store on tiny segments."""
    return open_store(tiny_config())


@pytest.fixture
def sync_store(tiny_config, open_store):
    """A started SYNC_FLUSH store on tiny segments."""
    return open_store(tiny_config(flush_disk_type="SYNC_FLUSH"))
