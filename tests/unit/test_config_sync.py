"""The metadata files a master gives its slaves: the `config` push of the replication wire
(ipc/ha_protocol.py: built by one side, parsed by the other; anything else a ConfigRejected,
never another exception) and core.meta.config_sync (which files, the master's change detection by
content, the slave's checked atomic install through the I/O seam)."""
from __future__ import annotations

import json
import os

import msgpack
import pytest
from hypothesis import given, settings, strategies as st

from core.meta import config_sync
from core.meta.consumer_offsets import ConsumerOffsetStore
from core.files.fileops import REAL_FILE_OPS
from core.meta.topics import TopicTable
from ipc import ha_protocol as wire
from ipc.protocol import ProtocolError

names = st.sampled_from(sorted(config_sync.SYNCED_FILES))


@given(name=names, data=st.binary(max_size=2000))
def test_config_push_round_trips(name, data):
    msg = wire.parse_from_master(wire.config_file(name, data))
    assert msg == wire.ConfigFile(name, data)


@settings(max_examples=200)
@given(name=st.one_of(names, st.text(max_size=12), st.integers(-2**63, 2**64 - 1), st.none()),
       length=st.one_of(st.integers(-2, 70), st.text(max_size=3), st.none()),
       body=st.lists(st.binary(max_size=70), max_size=2))
def test_garbage_config_pushes_are_refused_never_crash(name, length, body):
    env = {"op": "config", "name": name, "length": length}
    try:
        msg = wire.parse_from_master([msgpack.packb(env), *body])
    except wire.ConfigRejected:
        return
    # whatever was taken is exactly a replicated file's name with its one frame of that length
    assert msg.name in config_sync.SYNCED_FILES and len(body) == 1 and len(msg.data) == env["length"]


def test_oversized_unknown_and_mismatched_pushes_are_rejected():
    big = config_sync.MAX_FILE_BYTES + 1
    cases = [
        [msgpack.packb({"op": "config", "name": "topics.json", "length": big}), b"x"],
        [msgpack.packb({"op": "config", "name": "../../etc/passwd", "length": 1}), b"x"],
        [msgpack.packb({"op": "config", "name": "epochs.json", "length": 1}), b"x"],
        [msgpack.packb({"op": "config", "name": "topics.json", "length": 3}), b"xy"],
        [msgpack.packb({"op": "config", "name": "topics.json", "length": 1})],
    ]
    for frames in cases:
        with pytest.raises(wire.ConfigRejected):
            wire.parse_from_master(frames)
    assert issubclass(wire.ConfigRejected, ProtocolError)


def test_install_checks_with_the_files_own_parser_and_writes_atomically(tmp_path):
    cfg = str(tmp_path / "config")
    good = json.dumps({"offsetTable": {"T@g": {"0": 5, "1": 7}}}).encode()
    assert config_sync.install(cfg, "consumer_offsets.json", good, REAL_FILE_OPS)
    assert not config_sync.install(cfg, "consumer_offsets.json", good, REAL_FILE_OPS)  # same bytes
    offsets = ConsumerOffsetStore(cfg)
    offsets.load()
    assert offsets.fetch("g", "T", 1) == 7
    for name, bad in [("consumer_offsets.json", b"{not json"),
                      ("consumer_offsets.json", b'{"offsetTable": {"nogroup": {"0": 1}}}'),
                      ("topics.json", b'{"topicConfigTable": {"bad name!": {"writeQueueNums": 4}}}'),
                      ("delayOffset.json", b'{"offsetTable": {"0": 3}}'),
                      ("delayOffset.json", b"\xff\xfe"),
                      ("epochs.json", b"[]")]:
        with pytest.raises(config_sync.ConfigFileError):
            config_sync.install(cfg, name, bad, REAL_FILE_OPS)
    assert sorted(os.listdir(cfg)) == ["consumer_offsets.json"]     # nothing else, no tmp left
    assert open(os.path.join(cfg, "consumer_offsets.json"), "rb").read() == good


def test_snapshot_reports_content_changes_only(tmp_path):
    cfg = str(tmp_path)
    snap = config_sync.ConfigSnapshot(cfg, REAL_FILE_OPS)
    assert snap.refresh() == []
    table = TopicTable(os.path.join(cfg, "topics.json"))
    table.set_queues("A", 4)
    assert snap.refresh() == ["topics.json"]
    assert snap.refresh() == []                                # nothing moved
    data = snap.files["topics.json"][1]
    REAL_FILE_OPS.write_file_atomic(os.path.join(cfg, "topics.json"), data)   # rewritten, same bytes
    assert snap.refresh() == []
    table.set_queues("B", 2)
    (tmp_path / "delayOffset.json").write_bytes(b'{"offsetTable": {"1": 3}}')
    assert sorted(snap.refresh()) == ["delayOffset.json", "topics.json"]
    (tmp_path / "consumer_offsets.json").write_bytes(b"torn{")   # damaged: not sent, kept out
    assert snap.refresh() == [] and "consumer_offsets.json" not in snap.files


def test_a_slaves_offsets_take_the_masters_copy(tmp_path):
    cfg = str(tmp_path)
    slave = ConsumerOffsetStore(cfg)
    slave.load()
    slave.commit("local", "T", 0, 9)             # a commit served on the slave: memory only
    slave.commit("g", "T", 0, 1)
    assert not slave.take_replicated()           # no copy yet
    master = ConsumerOffsetStore(str(tmp_path / "m"))
    master.commit("g", "T", 0, 40)
    master.commit("g", "T", 1, 41)
    master.persist()
    raw = open(master.path, "rb").read()
    config_sync.install(cfg, "consumer_offsets.json", raw, REAL_FILE_OPS)
    assert slave.take_replicated()
    assert (slave.fetch("g", "T", 0), slave.fetch("g", "T", 1), slave.fetch("local", "T", 0)) == (40, 41, 9)
    assert not slave.take_replicated()           # unchanged file: not read again
