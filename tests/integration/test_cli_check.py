"""`mqstore check` and `mqstore recover` as real subprocesses: exit codes, output, a store left
by a killed writer, and a store held by a running process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core import Message, MessageStore, StoreConfig

TINY = dict(mapped_file_size_commitlog=4096 * 4, mapped_file_size_consume_queue=20 * 50,
            max_hash_slot_num=64, max_index_num=512)
MQSTORE = os.path.join(os.path.dirname(sys.executable), "mqstore")

# A writer that puts messages and dies without shutdown (the abort file stays), or, with
# "hold", starts a store and keeps it open until its stdin closes.
CHILD = """
import os, sys
from core import Message, MessageStore, StoreConfig
root, mode = sys.argv[1], sys.argv[2]
store = MessageStore(StoreConfig(store_path_root_dir=root, **%r))
store.load()
store.start()
for i in range(200):
    store.put_message(Message(topic="T%%d" %% (i %% 2), body=b"x" * (60 + i %% 30), keys="k%%d" %% i))
store.wait_for_dispatch()
print("ready", flush=True)
if mode == "crash":
    os._exit(0)
sys.stdin.read()
store.shutdown()
""" % (TINY,)


def mqstore(*args, cwd=None, installed=False):
    cmd = [MQSTORE] if installed else [sys.executable, "-m", "supervisor.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=cwd, timeout=120)


def build_store(root, count=250) -> StoreConfig:
    cfg = StoreConfig(store_path_root_dir=str(root), **TINY)
    store = MessageStore(cfg)
    store.load()
    store.start()
    for i in range(count):
        msg = Message(topic=f"T{i % 3}", body=bytes([97 + i % 26]) * (40 + i % 50), queue_id=i % 2,
                      tags="t", keys=f"k{i}", properties={"UNIQ_KEY": f"U{i}"})
        assert store.put_message(msg).status.ok
    assert store.wait_for_dispatch()
    store.shutdown()
    return cfg


def corrupt_checkpoint(cfg) -> None:
    with open(cfg.checkpoint_path, "r+b") as f:
        f.seek(66)
        f.write(b"\x7f")


@pytest.fixture
def store(tmp_path):
    return build_store(tmp_path / "store-data")


def test_help_lists_commands_and_exit_codes():
    out = mqstore("--help")
    assert out.returncode == 0
    for word in ("check", "recover", "exit codes"):
        assert word in out.stdout
    sub = mqstore("check", "--help")
    assert sub.returncode == 0 and all(o in sub.stdout for o in ("--store", "--config", "--json", "--fix"))
    assert mqstore("recover", "--help").returncode == 0


@pytest.mark.skipif(not os.path.exists(MQSTORE), reason="console script not installed")
def test_installed_script_checks_the_default_store(store, tmp_path):
    out = mqstore("check", cwd=tmp_path, installed=True)          # --store defaults to ./store-data
    assert out.returncode == 0, out.stdout + out.stderr
    assert "result: clean" in out.stdout and "250 records" in out.stdout


def test_check_reports_problems_with_exit_1_text_and_json(store):
    corrupt_checkpoint(store)
    out = mqstore("check", "--store", store.store_path_root_dir)
    assert out.returncode == 1
    assert "checkpoint_torn (1)" in out.stdout and "result: 1 problem" in out.stdout
    assert "\r" not in out.stderr and "checking:" in out.stderr      # not a terminal: one line
    js = mqstore("check", "--store", store.store_path_root_dir, "--json")
    report = json.loads(js.stdout)
    assert js.returncode == 1 and report["ok"] is False and report["counts"] == {"checkpoint_torn": 1}
    assert report["problems"][0]["offset"] == 80


def test_usage_errors_exit_2_with_one_line(tmp_path, store):
    missing = mqstore("check", "--store", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "no store directory" in missing.stderr and not missing.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    assert mqstore("check", "--store", str(empty)).returncode == 2
    assert mqstore("recover", "--store", str(empty)).returncode == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("mapped_file_size_commitlg = 4096\n")
    out = mqstore("check", "--store", store.store_path_root_dir, "--config", str(bad))
    assert out.returncode == 2 and "mapped_file_size_commitlg" in out.stderr
    assert mqstore("check", "--bogus").returncode == 2


def test_config_file_sets_the_store_directory(store, tmp_path):
    conf = tmp_path / "mq.toml"
    conf.write_text(f"[store]\nstore_path_root_dir = {json.dumps(store.store_path_root_dir)}\n"
                    "message_index_enable = false\n")
    out = mqstore("check", "--config", str(conf), cwd=tmp_path / "..")
    assert out.returncode == 0, out.stderr
    assert "0 keys checked" in out.stdout and "index is not checked" in out.stdout


def test_check_fix_repairs_and_exits_0(store):
    corrupt_checkpoint(store)
    out = mqstore("check", "--fix", "--store", store.store_path_root_dir)
    assert out.returncode == 0, out.stdout
    assert "fixed: 1 problems (checkpoint_torn)" in out.stdout and "result: clean" in out.stdout


def test_check_fix_keeps_the_records_behind_a_damaged_one(store):
    # Regression: a fix that cut 9,524 intact records after one damaged body printed "result:
    # clean" and exited 0. Now nothing intact is cut: the damaged record is quarantined, and it
    # stays a problem (its message is damaged), so the check still exits 1.
    seg = os.path.join(store.commitlog_dir, sorted(os.listdir(store.commitlog_dir))[-2])
    with open(seg, "r+b") as f:                      # a segment normal recovery scans:
        f.seek(60)                                   # its first record's store timestamp
        byte = f.read(1)[0]
        f.seek(60)
        f.write(bytes([byte ^ 4]))
    before = mqstore("check", "--store", store.store_path_root_dir)
    assert before.returncode == 1 and "record_crc" in before.stdout, before.stdout
    out = mqstore("check", "--fix", "--store", store.store_path_root_dir)
    assert out.returncode == 1 and "quarantined the damaged bytes at" in out.stdout, out.stdout
    assert "recovery cut the log" not in out.stderr, out.stderr
    assert os.listdir(os.path.join(store.store_path_root_dir, "quarantine"))


def test_recover_after_a_killed_writer(tmp_path):
    root = str(tmp_path / "crashed")
    child = subprocess.run([sys.executable, "-c", CHILD, root, "crash"], capture_output=True,
                           text=True, timeout=120)
    assert child.stdout.startswith("ready")
    assert os.path.exists(os.path.join(root, "abort"))
    out = mqstore("recover", "--store", root)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "recovery: abnormal" in out.stdout and "abort file removed" in out.stdout
    assert "result: clean" in out.stdout and "200 records" in out.stdout
    assert "recovering:" in out.stderr
    assert not os.path.exists(os.path.join(root, "abort"))
    again = mqstore("recover", "--store", root)
    assert again.returncode == 0 and "recovery: normal" in again.stdout


def test_a_running_store_is_checked_but_not_recovered(tmp_path):
    root = str(tmp_path / "running")
    child = subprocess.Popen([sys.executable, "-c", CHILD, root, "hold"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().startswith("ready")
        refused = mqstore("recover", "--store", root)
        assert refused.returncode == 2 and "in use" in refused.stderr
        assert mqstore("check", "--fix", "--store", root).returncode == 2
        checked = mqstore("check", "--store", root)
        assert checked.returncode == 0, checked.stdout
        assert f"pid {child.pid}" in checked.stdout
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    assert child.returncode == 0 and not os.path.exists(os.path.join(root, "abort"))
    after = mqstore("recover", "--store", root)
    assert after.returncode == 0 and "recovery: normal" in after.stdout


def test_recover_clears_what_a_dead_supervisor_left_in_run(tmp_path):
    # Regression: after `recover` removed the abort file, `status` and `stop` still said "the
    # abort file stays; the next start runs the abnormal recovery", from the dead supervisor's
    # run/address and run/supervisor.pid, which recover left in place.
    root = str(tmp_path / "crashed")
    child = subprocess.run([sys.executable, "-c", CHILD, root, "crash"], capture_output=True,
                           text=True, timeout=120)
    assert child.stdout.startswith("ready")
    run = os.path.join(root, "run")
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, "address"), "w") as f:
        f.write("tcp://127.0.0.1:1\n")
    with open(os.path.join(run, "supervisor.pid"), "w") as f:
        f.write(f"{child_pid_gone()}\n")
    before = mqstore("status", "--store", root)
    assert before.returncode == 1 and "the abort file stays" in before.stderr, before.stderr
    os.unlink(os.path.join(root, "abort"))             # as if recovered by hand
    without = mqstore("status", "--store", root)
    assert "no abort file" in without.stderr and "abort file stays" not in without.stderr
    open(os.path.join(root, "abort"), "w").close()
    assert mqstore("recover", "--store", root).returncode == 0
    assert not os.path.exists(os.path.join(run, "address"))
    assert not os.path.exists(os.path.join(run, "supervisor.pid"))
    after = mqstore("status", "--store", root)
    assert after.returncode == 1 and "no run/address" in after.stderr, after.stderr


def child_pid_gone() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60)
    return int(done.stdout)
