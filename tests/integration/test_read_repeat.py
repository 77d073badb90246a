"""Repeated pulls (`repeat`, docs/PROTOCOL.md) served by the real reader process: one reply
holds what pulling again at each next_begin_offset would have brought, in both formats, with
and without a tag filter, within `max_msgs`, and a reply that is not FOUND is the single
pull's answer."""
from __future__ import annotations

from core.record.decode import decode_message
from tests.integration.test_read_services import pull, services, split_records  # noqa: F401 (fixture)


def single_pulls(c, offset, max_msgs, pulls, **kw):
    """(records, next_begin_offset) of `pulls` single pulls in a row, as `repeat` describes."""
    records = []
    nxt = offset
    for _ in range(pulls):
        if len(records) >= max_msgs:
            break
        rep, frames = pull(c, offset=nxt, max_msgs=max_msgs - len(records), format="raw", **kw)
        if rep["status"] != "FOUND":
            break
        records += split_records(frames[0])
        nxt = rep["next_begin_offset"]
        if nxt >= rep["max_offset"]:
            break
    return records, nxt


def test_repeated_pulls_over_the_reader(services):
    h, w, c = services(max_transfer_count_on_message_in_memory=8)
    w.put(300, tags=lambda i: "AB"[i % 2])
    w.wait_dispatched()
    for offset, max_msgs, repeat, kw in ((0, 1024, 1024, {}), (5, 20, 3, {}), (290, 1024, 50, {}),
                                         (0, 100, 6, {"tag_filter": "B"}), (3, 1000, 1000, {"tag_filter": "A"})):
        rep, frames = pull(c, offset=offset, max_msgs=max_msgs, repeat=repeat, format="raw", **kw)
        want, nxt = single_pulls(c, offset, max_msgs, repeat, **kw)
        assert rep["status"] == "FOUND" and split_records(frames[0]) == want, (offset, max_msgs, repeat)
        assert (rep["count"], rep["next_begin_offset"], rep["max_offset"]) == (len(want), nxt, 300)
    rep, frames = pull(c, offset=0, max_msgs=1024, repeat=1024, format="raw")
    assert rep["count"] == 300 and rep["next_begin_offset"] == 300          # 38 pulls of 8 in one
    rep, frames = pull(c, offset=0, max_msgs=50, repeat=1024, format="fields")
    assert [m["queue_offset"] for m in rep["messages"]] == list(range(50))
    assert frames[0] == b"".join(decode_message(w.record(r)).body for r in w.records["T", 0][:50])
    rep, _ = pull(c, offset=300, max_msgs=32, repeat=4)
    assert (rep["status"], rep["count"]) == ("OFFSET_OVERFLOW_ONE", 0)
    rep, _ = pull(c, offset=0, max_msgs=32, repeat=4, tag_filter="Z")
    assert (rep["status"], rep["count"]) == ("NO_MATCHED_MESSAGE", 0)
