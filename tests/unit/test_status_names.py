"""The status enums are their RocketMQ names: equal to the name as a string, printed as it,
and still members compared by identity."""
from __future__ import annotations

import msgpack
import pytest

from core import GetMessageStatus, PutMessageStatus
from core.status import AppendMessageStatus


@pytest.mark.parametrize("enum", [PutMessageStatus, GetMessageStatus, AppendMessageStatus])
def test_every_status_is_its_name(enum):
    for member in enum:
        assert member == member.name and str(member) == member.name and f"{member}" == member.name
        assert enum(member.name) is member
        assert msgpack.unpackb(msgpack.packb(member)) == member.name


def test_a_put_result_reads_as_rocketmq_prints_it(store):
    from core.record.message import Message
    r = store.put_message(Message("T", b"x"))
    assert r.status == "PUT_OK" and r.status is PutMessageStatus.PUT_OK
    assert store.wait_for_dispatch()
    assert store.get_message("g", "T", 0, 0, 1).status == "FOUND"


def test_rocketmq_5s_spelling_of_page_cache_busy_is_the_same_member():
    assert PutMessageStatus.OS_PAGE_CACHE_BUSY is PutMessageStatus.OS_PAGECACHE_BUSY
    assert PutMessageStatus.OS_PAGE_CACHE_BUSY.name == "OS_PAGECACHE_BUSY"


def test_rocketmq_4s_spelling_of_create_mapped_file_failed_is_the_same_member():
    assert PutMessageStatus.CREATE_MAPEDFILE_FAILED is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert PutMessageStatus["CREATE_MAPEDFILE_FAILED"] == "CREATE_MAPPED_FILE_FAILED"
