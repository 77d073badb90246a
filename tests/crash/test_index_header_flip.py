"""An index file whose header a flip made look newer than the checkpoint (its end timestamp
later than the checkpoint's index timestamp) was destroyed by the abnormal recovery, and as
recovery re-dispatched only from the checkpoint's timestamp, the keys of its intact records
were lost for good (issue 33: 399 keys). Now it is dropped with the files after it and rebuilt
from the CommitLog: after an abnormal restart every key is found, and `check` is clean."""
from __future__ import annotations

import os
import shutil
import struct

import pytest

from core import MessageStore, fsck
from flip_campaign import FAR_AHEAD, LONG_AGO, build_store, config, flip

END_TS = 8                                   # the end timestamp's byte offset in the header


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    return build_store(str(tmp_path_factory.mktemp("intact") / "store"), spread_at=400)


def index_files(root: str) -> list[str]:
    d = config(root).index_dir
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def missing_keys(intact, root: str) -> list:
    """The keys of single records (k<i>; `all` names every record, past a query's 64) a query
    does not find after the store at `root` is opened."""
    st = MessageStore(config(root))
    st.load()
    try:
        st.start()
        assert st.wait_for_dispatch()
        return [(topic, key) for (topic, key), where in intact.keys.items()
                if len(where) == 1 and where - {m.commit_log_offset for m in
                            st.query_message(topic, key, 64, LONG_AGO, FAR_AHEAD).messages}]
    finally:
        st.shutdown()


@pytest.mark.parametrize("file", [0, 1])
@pytest.mark.parametrize("byte", [2, 5, 7])
def test_an_end_timestamp_flipped_later_loses_no_key_on_an_abnormal_restart(intact, tmp_path, file,
                                                                              byte):
    root = str(tmp_path / "store")
    shutil.copytree(intact.root, root)
    files = index_files(root)
    assert len(files) == 2                                  # a full file and the newest
    path = files[file]
    before = struct.unpack_from(">q", open(path, "rb").read(), END_TS)[0]
    bit = next(b for b in range(8) if not open(path, "rb").read()[END_TS + byte] >> b & 1)
    flip(path, END_TS + byte, bit)
    assert struct.unpack_from(">q", open(path, "rb").read(), END_TS)[0] > before
    open(os.path.join(root, "abort"), "w").close()
    assert missing_keys(intact, root) == []
    report = fsck.check(root)
    assert report.ok, report.format_text()


def test_an_abnormal_restart_keeps_the_files_the_checkpoint_covers(intact, tmp_path):
    """Nothing damaged: the full file the checkpoint covers is kept (not rebuilt), the newest
    one is rebuilt as before."""
    root = str(tmp_path / "store")
    shutil.copytree(intact.root, root)
    full = index_files(root)[0]
    open(os.path.join(root, "abort"), "w").close()
    st = MessageStore(config(root))
    st.load()
    start = st.recovery_report.start_offset
    st.shutdown()
    assert start > 0                                       # the store's records span > 3 s
    assert missing_keys(intact, root) == []
    assert index_files(root)[0] == full
