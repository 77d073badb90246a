"""Regression: a consume queue whose first entry lands exactly at a segment start (queue
offset a multiple of the entries per file, e.g. its head expired before it was built)
reported min offset 0 instead of that entry's offset, because only the blank-filling path
set the queue's start."""
from core.log.consume_queue import ConsumeQueue
from core.files.fileops import REAL_FILE_OPS


def test_min_offset_of_a_queue_starting_at_a_file_boundary(tmp_path):
    cq = ConsumeQueue("T", 0, str(tmp_path), 20 * 50, REAL_FILE_OPS)
    cq.load()
    assert cq.put_message_position_info(5000, 100, 3, 100)
    assert cq.get_min_offset_in_queue() == 100
    assert cq.get_max_offset_in_queue() == 101


def test_min_offset_of_a_queue_starting_inside_a_file(tmp_path):
    cq = ConsumeQueue("T", 0, str(tmp_path), 20 * 50, REAL_FILE_OPS)
    cq.load()
    assert cq.put_message_position_info(5000, 100, 3, 110)
    assert cq.get_min_offset_in_queue() == 110
