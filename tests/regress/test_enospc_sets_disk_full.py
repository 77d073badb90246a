"""Regression: a segment the appender had to create itself (no segment ready ahead, e.g. the
first one of a store) failing with ENOSPC answered CREATE_MAPPED_FILE_FAILED but never set
DISK_FULL, because only the background allocator recorded its errors; the store kept trying
to create a file on every put instead of refusing puts as not writable.

The full disk is injected through the I/O seam: the real FileOps, whose create_file refuses
CommitLog segments with ENOSPC once `full` is set.
"""
import errno
import os
import time

from core.files.fileops import FileOps
from core.record.message import Message
from core.running_flags import DISK_FULL
from core.status import PutMessageStatus


class FullDisk(FileOps):
    full = False

    def create_file(self, path, size, **kwargs):
        if self.full and os.sep + "commitlog" + os.sep in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return super().create_file(path, size, **kwargs)


def test_enospc_on_the_first_segment_sets_disk_full(tiny_config, open_store):
    fileops = FullDisk()
    fileops.full = True
    st = open_store(tiny_config(), fileops=fileops)
    r = st.put_message(Message("T", b"x"))
    assert r.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert st.flags.is_set(DISK_FULL)
    assert st.put_message(Message("T", b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert st.put_messages([Message("T", b"x")]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_disk_full_clears_when_space_comes_back(tiny_config, open_store, monkeypatch):
    """Regression: once set, the embedded store's DISK_FULL was never cleared, so a store
    whose disk got space again refused every put until it was reopened."""
    from core.store import MessageStore
    monkeypatch.setattr(MessageStore, "DISK_RETRY_S", 0.05)
    fileops = FullDisk()
    fileops.full = True
    st = open_store(tiny_config(), fileops=fileops)
    assert st.put_message(Message("T", b"x")).status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert st.put_message(Message("T", b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    time.sleep(0.06)                     # still full: the retry fails and sets it again
    assert st.put_message(Message("T", b"x")).status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert st.flags.is_set(DISK_FULL)
    assert st.put_message(Message("T", b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    fileops.full = False
    time.sleep(0.06)
    assert st.put_messages([Message("T", b"y")]).status is PutMessageStatus.PUT_OK
    assert not st.flags.is_set(DISK_FULL)
    assert st.put_message(Message("T", b"z")).status is PutMessageStatus.PUT_OK
