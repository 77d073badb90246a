"""core.log.epochs: the epoch file (atomic, checked), and the divergence rule held against a model
of stores that write, replicate, fail over and rejoin (Hypothesis): wherever a master tells a
slave to start or to truncate, the slave's log up to there is the master's, byte for byte, and
no byte both logs share is truncated away."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from core.log.epochs import (
    EpochFile, EpochFileError, as_master, check_entries, clip, common_offset, follow_point,
)
from core.files.fileops import REAL_FILE_OPS


def test_the_file_gets_an_id_keeps_entries_and_refuses_bad_histories(tmp_path):
    ef = EpochFile(str(tmp_path), REAL_FILE_OPS).load()
    assert ef.store_id and ef.entries == [] and ef.epoch == 0
    assert ef.become_master(500, 0) == 1 and ef.entries == [(1, 0, ef.store_id)]
    assert ef.become_master(900, 0) == 1                    # a restart as master: same epoch
    again = EpochFile(str(tmp_path), REAL_FILE_OPS).load()
    assert again.store_id == ef.store_id and again.entries == ef.entries
    again.adopt([[1, 0, ef.store_id], [2, 700, "other"], [3, 2000, "third"]], 1000)
    assert again.entries == [(1, 0, ef.store_id), (2, 700, "other")]      # as far as the log reaches
    assert again.become_master(1000) == 3 and again.entries[-1] == (3, 1000, again.store_id)
    for bad in ([[2, 0, "a"], [1, 5, "b"]], [[1, 10, "a"], [2, 5, "b"]], [[0, 0, "a"]], [[1, 0]], "x"):
        with pytest.raises(EpochFileError):
            check_entries(bad)
    (tmp_path / "epochs.json").write_text(json.dumps({"version": 1, "entries": []}))
    with pytest.raises(EpochFileError, match="store_id"):
        EpochFile(str(tmp_path), REAL_FILE_OPS).load()


def test_follow_point_rules():
    m = [(1, 0, "A"), (2, 700, "B")]
    assert follow_point("B", m, 0, 1000, "C", [], 0).start == 0
    assert follow_point("B", m, 0, 1000, "A", [(1, 0, "A")], 900).truncate_to == 700
    assert follow_point("B", m, 0, 1000, "A", [(1, 0, "A")], 600).start == 600
    assert follow_point("B", m, 0, 1000, "B", m, 1000).refused
    newer = follow_point("B", m, 0, 1000, "C", m + [(3, 800, "C")], 900)
    assert newer.refused and newer.newer
    assert "no epoch history" in follow_point("B", m, 0, 1000, "C", [], 50).refused
    assert "first byte" in follow_point("B", m, 800, 1000, "A", [(1, 0, "A")], 600).refused
    assert "empty" in follow_point("B", m, 800, 1000, "C", [], 0).refused
    assert common_offset([(1, 0, "A")], 10, [(1, 0, "X")], 10) == 0
    assert clip(m, 500) == [(1, 0, "A")]


OPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(1, 30)),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 40)),
    st.tuples(st.just("promote"), st.integers(0, 2)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_a_slave_only_ever_keeps_its_masters_bytes(ops):
    names = ["A", "B", "C"]
    logs = {n: [] for n in names}          # a log is a list of tokens (epoch, writer, position)
    hist = {n: [] for n in names}
    master = "A"
    hist["A"] = as_master([], "A", 0)
    for op in ops:
        if op[0] == "write":
            epoch = hist[master][-1][0]
            logs[master] += [(epoch, master, len(logs[master]) + i) for i in range(op[1])]
        elif op[0] == "promote":
            new = names[op[1]]
            if new != master:
                master = new
                hist[new] = as_master(hist[new], new, len(logs[new]))
        else:
            slave = names[op[1]]
            if slave == master:
                continue
            mlog, slog = logs[master], logs[slave]
            point = follow_point(master, hist[master], 0, len(mlog), slave, hist[slave], len(slog))
            shared = next((i for i, (a, b) in enumerate(zip(mlog, slog)) if a != b), min(len(mlog), len(slog)))
            if point.refused:
                assert point.newer          # the only refusal a member of the group can get here
                continue
            cut = point.truncate_to if point.truncate_to is not None else point.start
            assert cut <= shared            # what is kept is the master's...
            assert cut == shared            # ...and nothing the two share is thrown away
            del slog[cut:]
            slog += mlog[cut:cut + op[2]]
            hist[slave] = clip(check_entries(hist[master]), len(slog))
            assert slog == mlog[:len(slog)]
