"""`MessageStore` lifecycle: the store directory, one store per directory (the lock), the
format check, the abort file (present while running, removed by a clean shutdown, kept by an
unclean one), and the order of load, start and shutdown."""
from __future__ import annotations

import json
import os

import pytest

from core.config import StoreFormatError
from core.record.message import Message
from core.running_flags import NOT_WRITEABLE
from core.store import MessageStore
from core.files.store_files import StoreLockedError


def test_store_paths_exist(store):
    """DefaultMessageStoreTest.testStorePathOK."""
    cfg = store.config
    assert os.path.isdir(cfg.commitlog_dir)
    assert os.path.isdir(cfg.consumequeue_dir)
    assert os.path.isfile(cfg.checkpoint_path)
    assert os.path.getsize(cfg.checkpoint_path) == 4096
    assert store.put_message(Message("T", b"x")).ok
    assert store.wait_for_dispatch()
    assert os.path.isdir(os.path.join(cfg.consumequeue_dir, "T", "0"))
    assert os.listdir(cfg.commitlog_dir)[0] == "0" * 20


def test_second_store_on_the_same_directory_is_refused(tiny_config, open_store):
    """DefaultMessageStoreTest.test_repeat_restart."""
    cfg = tiny_config()
    first = open_store(cfg)
    second = MessageStore(cfg)
    with pytest.raises(StoreLockedError):
        second.load()
    assert first.put_message(Message("T", b"still mine")).ok
    first.shutdown()
    third = open_store(cfg)
    assert third.get_max_phy_offset() == first.get_max_phy_offset()


def test_format_mismatch_is_refused(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    assert st.put_message(Message("T", b"x")).ok
    st.shutdown()
    for key, value in (("mapped_file_size_commitlog", 4096 * 8),
                       ("mapped_file_size_consume_queue", 20 * 60),
                       ("max_index_num", 1024)):
        other = MessageStore(tiny_config(**{key: value}))
        with pytest.raises(StoreFormatError, match=key):
            other.load()
    again = open_store(cfg)                            # the refused loads released the lock
    assert again.get_max_phy_offset() == st.get_max_phy_offset()
    with open(cfg.store_format_path) as f:
        assert json.load(f)["mapped_file_size_commitlog"] == 4096 * 4


def test_abort_file_while_running_and_after_a_clean_shutdown(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg, start=False)
    assert not os.path.exists(cfg.abort_path)          # created at start, after recovery
    st.start()
    assert os.path.exists(cfg.abort_path)
    assert st.put_message(Message("T", b"x")).ok
    st.shutdown()
    assert not os.path.exists(cfg.abort_path)
    st2 = open_store(cfg)
    assert not st2.recovery_report.abnormal


def test_unclean_shutdown_keeps_the_abort_file(tiny_config, open_store):
    """DefaultMessageStoreShutDownTest: a store that cannot stop cleanly leaves `abort`."""
    cfg = tiny_config()
    st = open_store(cfg)
    assert st.put_message(Message("T", b"x")).ok
    st.flags.set(NOT_WRITEABLE)
    st.shutdown()
    assert os.path.exists(cfg.abort_path)
    st2 = open_store(cfg)
    assert st2.recovery_report.abnormal
    assert st2.get_max_offset_in_queue("T", 0) == 1


def test_start_before_load_and_double_shutdown(tiny_config):
    st = MessageStore(tiny_config())
    with pytest.raises(RuntimeError):
        st.start()
    st.load()
    st.start()
    st.shutdown()
    st.shutdown()                                      # a second call does nothing


def test_shutdown_of_a_loaded_store_that_never_started(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    assert st.put_message(Message("T", b"x")).ok
    st.shutdown()
    idle = open_store(cfg, start=False)
    idle.shutdown()
    assert not os.path.exists(cfg.abort_path)
    again = open_store(cfg)
    assert again.get_max_offset_in_queue("T", 0) == 1


def test_shutdown_drains_dispatch(tiny_config, open_store):
    cfg = tiny_config()
    st = open_store(cfg)
    for i in range(200):
        assert st.put_message(Message("D", b"%d" % i, keys="k%d" % i)).ok
    st.shutdown()
    assert not os.path.exists(cfg.abort_path)
    st2 = open_store(cfg, start=False)
    assert st2.recovery_report.end_offset == st2.get_max_phy_offset()
    assert st2.get_max_offset_in_queue("D", 0) == 200


def test_a_commitlog_in_a_directory_of_its_own(tiny_config, open_store, tmp_path):
    """RocketMQ's storePathCommitLog: segments there, nothing under <root>/commitlog; a reopen
    without it is refused (the store's log is there), and fsck finds it from the format file."""
    from core import fsck
    from core.config import StoreFormatError
    log_dir = tmp_path / "disk2" / "commitlog"
    cfg = tiny_config(store_path_commit_log=str(log_dir))
    store = open_store(cfg)
    for i in range(200):
        assert store.put_message(Message("T", b"m%03d" % i * 40)).ok
    assert store.wait_for_dispatch()
    store.shutdown()
    assert len(os.listdir(log_dir)) > 1 and not os.path.exists(os.path.join(cfg.store_path_root_dir, "commitlog"))
    with pytest.raises(StoreFormatError, match="store_path_commit_log"):
        MessageStore(tiny_config()).load()
    again = open_store(cfg)
    got = again.get_message("g", "T", 0, 0, 32)
    assert [bytes(m.body) for m in got.messages][:2] == [b"m000" * 40, b"m001" * 40]
    again.shutdown()
    assert fsck.check(cfg.store_path_root_dir).ok
