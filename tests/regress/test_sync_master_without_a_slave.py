"""Regression: broker_role SYNC_MASTER answered PUT_OK although no slave could have the
message. RocketMQ's CommitLog, for a SYNC_MASTER whose slave is not there, stores the message
and answers SLAVE_NOT_AVAILABLE, unless the message does not wait for the store's answer
(WAIT false). The embedded engine is a single node (replication is the process form's ha
service), so it always answers so; the appender service does when no slave is connected
(tests/integration/test_write_services.py, tests/integration/test_replication.py)."""
import time

import pytest

from core.config import StoreConfig
from core.record.message import Message
from core.status import GetMessageStatus, PutMessageStatus
from tests.unit.recovery_workload import open_store


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_stored_and_answered_slave_not_available(tmp_path, flush):
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), broker_role="SYNC_MASTER",
                      flush_disk_type=flush, mapped_file_size_commitlog=64 * 1024)
    st = open_store(cfg)
    try:
        one = st.put_message(Message("M", b"one", queue_id=0))
        assert one.status is PutMessageStatus.SLAVE_NOT_AVAILABLE and one.append_result.logics_offset == 0
        batch = st.put_messages([Message("M", b"two", queue_id=0), Message("M", b"three", queue_id=0)])
        assert batch.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        no_wait = st.put_message(Message("M", b"four", queue_id=0, properties={"WAIT": "false"}))
        assert no_wait.status is PutMessageStatus.PUT_OK
        deadline = time.monotonic() + 10          # under SYNC_FLUSH "four" is served once flushed
        while True:
            got = st.get_message("g", "M", 0, 0, 32)
            if len(got.messages) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got.status is GetMessageStatus.FOUND
        assert [bytes(m.body) for m in got.messages] == [b"one", b"two", b"three", b"four"]
    finally:
        st.shutdown()
