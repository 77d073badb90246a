"""Regression (issue 28): an embedded store whose disk filled while consume-queue files were
being created and written lost its dispatcher for good. The reput thread held a failed
dispatch and tried again, but the periodic flush of the consume queues (an fdatasync that
answers ENOSPC: delayed allocation, a thin volume, NFS) was not held: the thread died ("reput
stopped by an error", a "No space left on device" traceback), the store was marked
WRITE_LOGICS_QUEUE_ERROR, every put once space was back answered SERVICE_NOT_AVAILABLE, and
nothing written during the full disk was ever dispatched. The reput process waits the full
disk out and resumes (tests/regress/test_reput_survives_a_full_disk.py); both now run the same
job (core/jobs.py), so the embedded store does too.

The full disk is injected through the I/O seam (core/files/fileops.py): a FileOps whose
creation, pwrite and flush of consume-queue and index files answer ENOSPC while `full` is set.
"""
import errno
import logging
import os
import time

from core.files.fileops import FileOps, Mapping
from core.record.message import Message
from core.running_flags import WRITE_LOGICS_QUEUE_ERROR
from core.status import PutMessageStatus

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FullDisk(FileOps):
    """Real file operations; consume-queue and index files cannot grow or be synced while
    `full` is set (synced too, unless `syncs`)."""
    full = False
    syncs = False

    def refuse(self, path: str) -> None:
        parts = path.split(os.sep)
        if self.full and ("consumequeue" in parts or "index" in parts):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    def create_file(self, path, size, **kwargs):
        self.refuse(path)
        return super().create_file(path, size, **kwargs)

    def create_sparse_file(self, path, size):
        self.refuse(path)
        return super().create_sparse_file(path, size)

    def map_file(self, path, size, writable=True):
        return FullDiskMapping(self, path, size, writable)


class FullDiskMapping(Mapping):
    def __init__(self, ops: FullDisk, path, size, writable):
        super().__init__(path, size, writable)
        self.ops = ops

    def write(self, pos, data):
        self.ops.refuse(self.path)
        return super().write(pos, data)

    def flush(self, lo=0, hi=None):
        if not self.ops.syncs:
            self.ops.refuse(self.path)
        return super().flush(lo, hi)


def bodies(store, topic, queue_id):
    """Every body in the queue, pulled from its first offset on."""
    found, offset = [], 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if not r.messages:
            return found
        found += [m.body for m in r.messages]
        offset = r.next_begin_offset


def test_the_embedded_reput_waits_out_a_full_disk_and_dispatches_everything(
        tiny_config, open_store, caplog):
    fileops = FullDisk()
    st = open_store(tiny_config(), fileops=fileops)
    sent = []
    for i in range(10):
        body = b"before-%d" % i
        assert st.put_message(Message("Full", body, queue_id=0, keys="b%d" % i)).ok
        sent.append(body)
    assert st.wait_for_dispatch(10)

    fileops.full = True
    with caplog.at_level(logging.ERROR):
        for i in range(120):              # a consume-queue file holds 50 entries, the index 512
            body = b"during-%d" % i
            r = st.put_message(Message("Full", body, queue_id=0, keys="d%d" % i))
            assert r.status is PutMessageStatus.PUT_OK, r   # the CommitLog has its segments
            sent.append(body)
        # Several consume-queue flush intervals (10 ms) and thorough flushes (50 ms) pass.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert st.reput_service.is_alive(), "the reput thread died on the full disk"
            time.sleep(0.01)
        assert st.dispatch_behind_bytes() > 0              # held, not lost
    assert "stopped by an error" not in caplog.text
    assert not st.flags.is_set(WRITE_LOGICS_QUEUE_ERROR)

    fileops.full = False                                   # space is back
    assert st.wait_for_dispatch(20), "nothing dispatched once space was back"
    r = st.put_message(Message("Full", b"after", queue_id=0))
    assert r.status is PutMessageStatus.PUT_OK
    sent.append(b"after")
    assert st.wait_for_dispatch(10)
    assert bodies(st, "Full", 0) == sent
    assert st.query_message("Full", "d7", 10, 0, 1 << 62).messages
    st.shutdown()
    assert not os.path.exists(st.config.abort_path)         # a clean shutdown


def test_a_shutdown_on_a_full_disk_keeps_the_abort_file_and_raises_no_error(
        tiny_config, open_store, caplog):
    """Stopped while consume queues cannot be written, the reput drains what it can and ends
    without a traceback; the abort file stays, so the next start recovers what is left."""
    fileops = FullDisk()
    cfg = tiny_config()
    st = open_store(cfg, fileops=fileops)
    assert st.put_message(Message("Full", b"one", queue_id=0)).ok
    assert st.wait_for_dispatch(10)
    fileops.full = True
    for i in range(60):
        assert st.put_message(Message("Full", b"x%d" % i, queue_id=0)).ok
    with caplog.at_level(logging.ERROR):
        st.shutdown()
    assert "stopped by an error" not in caplog.text
    assert os.path.exists(cfg.abort_path)
    fileops.full = False
    again = open_store(cfg, fileops=fileops)
    assert again.wait_for_dispatch(10)
    assert bodies(again, "Full", 0) == [b"one"] + [b"x%d" % i for i in range(60)]


def test_a_held_dispatch_waits_its_interval_instead_of_spinning(tiny_config, open_store):
    """Regression: while a full disk held the dispatch, the embedded reput thread, idle and
    behind, went round its loop without waiting (a CPU busy for as long as the disk stayed
    full); the reput process sleeps its interval. Now both wait as the job says. (Files that
    cannot grow but can be synced: the flush does not fail here.)"""
    fileops = FullDisk()
    fileops.syncs = True
    st = open_store(tiny_config(), fileops=fileops)
    assert st.put_message(Message("Full", b"one", queue_id=0)).ok
    assert st.wait_for_dispatch(10)
    reput = st.reput_service
    steps = []
    real_run_once = reput.run_once
    reput.run_once = lambda: (steps.append(time.monotonic()), real_run_once())
    fileops.full = True
    for i in range(20):
        assert st.put_message(Message("Full", b"x%d" % i, queue_id=0)).ok
    time.sleep(2.5)                       # past IDLE_AFTER_S: idle and behind
    assert reput.is_alive() and st.dispatch_behind_bytes() > 0
    last_second = [t for t in steps if t >= steps[-1] - 1.0]
    assert len(last_second) < 1500, f"{len(last_second)} loop turns in a second"
    fileops.full = False
    assert st.wait_for_dispatch(20)
