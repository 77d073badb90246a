"""A store with tens of thousands of queues (issue 27): it starts, serves and recovers, normal
and abnormal, with `mqstore check` clean, under a descriptor limit of 1,024 that no process
reaches; a full disk while new queues are created holds the dispatch and loses nothing.

The embedded store carries the 20,000-queue case (RocketMQ's default consume-queue size of
300,000 entries per file); `mqstore start` carries a smaller one with every service process
watched. Both run with `RLIMIT_NOFILE` lowered to 1,024 in this process (children inherit it)."""
from __future__ import annotations

import os
import resource
import time

import psutil
import pytest

from core import Message, MessageStore, StoreConfig
from core import fsck
from ipc import Producer
from tests.integration.harness import RawClient, fill_disk, small_tmpfs
from tests.integration.supervised import SupervisedStore

FD_LIMIT = 1024


@pytest.fixture
def fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(FD_LIMIT, hard), hard))
    try:
        yield FD_LIMIT
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def config(root, **kw) -> StoreConfig:
    return StoreConfig(**{"store_path_root_dir": str(root), "mapped_file_size_commitlog": 16 << 20, **kw})


def queues(n_topics: int):
    return [(f"Topic{t}", q) for t in range(n_topics) for q in range(4)]


def put_one_each(store, keys) -> None:
    for topic, q in keys:
        r = store.put_message(Message(topic=topic, body=f"{topic}/{q}".encode(), queue_id=q))
        assert r.ok, r


def served(store, keys) -> None:
    """Every queue has its one message, read back."""
    for topic, q in keys:
        r = store.get_message("g", topic, q, 0, 8)
        assert r.status.name == "FOUND", (topic, q, r.status)
        assert [m.body for m in r.messages] == [f"{topic}/{q}".encode()]


@pytest.mark.timeout(900)
@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_20000_queues_start_serve_and_recover_normally_and_abnormally(tmp_path, fd_limit):
    keys = queues(5000)
    cfg = config(tmp_path / "store")
    proc = psutil.Process()
    st = MessageStore(cfg)
    st.load()
    st.start()
    put_one_each(st, keys)
    assert st.wait_for_dispatch(120)
    served(st, keys)
    st.shutdown()

    for abnormal in (False, True):
        if abnormal:
            open(cfg.abort_path, "w").close()              # as a process killed while running
        t0 = time.monotonic()
        st = MessageStore(cfg)
        st.load()
        st.start()
        took = time.monotonic() - t0
        assert st.recovery_report.abnormal == abnormal
        assert len(st.commitlog.topic_queue_table) == len(keys)
        served(st, keys)
        assert proc.num_fds() < fd_limit // 2, proc.num_fds()
        assert proc.memory_info().rss < 1 << 30
        assert took < 120, took
        st.shutdown()
    report = fsck.check(cfg.store_path_root_dir, config=cfg)
    assert report.ok, report.problems[:5]
    cq_bytes = sum(os.stat(os.path.join(r, f)).st_blocks * 512
                   for r, _, fs in os.walk(cfg.consumequeue_dir) for f in fs)
    assert cq_bytes < 20_000 * 8192                         # a block or two per queue, not 6 MB


@pytest.mark.timeout(300)
def test_the_embedded_store_holds_dispatch_on_a_full_disk_and_loses_nothing(tmp_path):
    with small_tmpfs(tmp_path, "12m") as mnt:
        cfg = config(mnt / "store", mapped_file_size_commitlog=1 << 20, message_index_enable=False)
        st = MessageStore(cfg)
        st.load()
        st.start()
        put_one_each(st, queues(2))
        assert st.wait_for_dispatch(10)
        fill_disk(mnt)
        fresh = queues(60)[8:]                              # new topics on the full disk
        answered = {}
        for topic, q in fresh:
            r = st.put_message(Message(topic=topic, body=f"{topic}/{q}".encode(), queue_id=q))
            answered[topic, q] = r.status.name
        assert set(answered.values()) <= {"PUT_OK", "SERVICE_NOT_AVAILABLE"}
        stored = [k for k, s in answered.items() if s == "PUT_OK"]
        assert stored, "the CommitLog segment had room: puts go on"
        assert not st.wait_for_dispatch(2)                  # held, not lost, not crashed
        assert st.reput_service.is_alive()
        os.unlink(mnt / "filler")
        assert st.wait_for_dispatch(30)
        served(st, queues(2) + stored)
        st.shutdown()
        st = MessageStore(cfg)
        st.load()
        served(st, queues(2) + stored)
        st.shutdown()
        assert fsck.check(cfg.store_path_root_dir, config=cfg).ok


def pull_each(store: SupervisedStore, topics: int) -> None:
    client = RawClient(store.call("hello")[0]["reader"])
    try:
        for t in range(topics):
            for q in range(4):
                reply, frames = client.call("pull", (), timeout=30.0, group="g", topic=f"Many{t}",
                                            queue_id=q, offset=0, max_msgs=8)
                assert reply["status"] == "FOUND" and frames[0] == b"m%d/%d" % (t, q), (t, q, reply)
    finally:
        client.close()


def processes(store: SupervisedStore) -> list:
    supervisor = psutil.Process(store.proc.pid)
    return [supervisor] + supervisor.children(recursive=True)


def bounded(procs: list) -> None:
    worst = max(p.num_fds() for p in procs)
    assert worst < FD_LIMIT // 2, [(p.name(), p.num_fds()) for p in procs]
    assert max(p.memory_info().rss for p in procs) < 1 << 30


def supervised_case(tmp_path, topics: int, abnormal: bool) -> None:
    store = SupervisedStore(tmp_path).start(timeout=300)
    try:
        with Producer(store.address, timeout=60.0) as p:
            futures = [p.send_async(f"Many{t}", b"m%d/%d" % (t, q), queue_id=q)
                       for t in range(topics) for q in range(4)]
            assert all(f.result(120).status == "PUT_OK" for f in futures)
        deadline = time.monotonic() + 120
        while store.status()["lags"]["dispatch"] and time.monotonic() < deadline:
            time.sleep(0.05)
        pull_each(store, topics)
        bounded(processes(store))
        if abnormal:
            procs = processes(store)
            for proc in procs:                              # the whole store dies at once
                proc.kill()
            psutil.wait_procs(procs, timeout=30)
            assert os.path.exists(store.path("abort"))
        else:
            assert store.stop(timeout=300) == 0
        again = SupervisedStore(tmp_path).start(timeout=300)
        try:
            pull_each(again, topics)
            bounded(processes(again))
            assert again.stop(timeout=300) == 0
        finally:
            again.ensure_stopped()
    finally:
        store.ensure_stopped()
    report = fsck.check(str(tmp_path / "store"))
    assert report.ok, report.problems[:5]


@pytest.mark.timeout(600)
@pytest.mark.slow  # heavy: runs in CI with make test-slow
def test_mqstore_start_with_2000_queues_stays_under_the_descriptor_limit(tmp_path, fd_limit):
    supervised_case(tmp_path, 500, abnormal=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_mqstore_start_with_20000_queues_recovers_after_a_kill_under_the_limit(tmp_path, fd_limit):
    supervised_case(tmp_path, 5000, abnormal=True)
