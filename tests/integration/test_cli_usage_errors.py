"""Usage errors that only a running store can reveal exit 2 with one line, as `mqstore --help`
promises: a queue id that the topic does not have (`consume --queues`, `produce --queue`).
A topic that does not exist yet is not checked: the store decides its queues."""
from __future__ import annotations

import pytest

from tests.integration.harness import wait_for
from tests.integration.supervised import SupervisedStore, cli


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    s = SupervisedStore(tmp_path_factory.mktemp("usage"), "usage").start()
    try:
        made = cli("topics", "--create", "four", "--queues", "4", "--address", s.address)
        assert made.returncode == 0, made.stderr
        yield s
    finally:
        s.ensure_stopped()


@pytest.mark.parametrize("args, says", [
    (["consume", "--topic", "four", "--group", "g", "--queues", "1,9"],
     "--queues 9: topic four has 4 queues: 0..3"),
    (["consume", "--topic", "four", "--group", "g", "--queues", "4", "--follow"],
     "--queues 4: topic four has 4 queues: 0..3"),
    (["produce", "--topic", "four", "--body", "x", "--queue", "9"],
     "--queue 9: topic four has 4 queues: 0..3"),
])
def test_queue_the_topic_does_not_have_exits_2(running, args, says):
    out = cli(*args, "--address", running.address, timeout=30)
    assert out.returncode == 2, out.stdout + out.stderr
    assert says in out.stderr and out.stderr.count("\n") == 1 and out.stdout == ""


def test_queues_the_topic_has_still_work(running):
    put = cli("produce", "--topic", "four", "--body", "x", "--queue", "3", "--address", running.address)
    assert put.returncode == 0, put.stderr
    got = cli("consume", "--topic", "four", "--group", "g", "--queues", "3", "--address", running.address)
    assert got.returncode == 0 and got.stdout.startswith("3:0\t"), got.stdout + got.stderr
    new = cli("consume", "--topic", "not-yet", "--group", "g", "--queues", "9", "--address", running.address)
    assert new.returncode == 0 and new.stdout == "", new.stderr


def test_a_query_that_finds_nothing_prints_nothing_on_stdout(running):
    out = cli("query", "--topic", "four", "--key", "absent", "--address", running.address)
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert "no message found" in out.stderr


def test_start_with_format_parameters_the_store_was_not_made_with_exits_2(tmp_path):
    from core import MessageStore, StoreConfig
    root = str(tmp_path / "made")
    store = MessageStore(StoreConfig(store_path_root_dir=root, mapped_file_size_commitlog=65536))
    store.load()
    store.shutdown()
    out = cli("start", "--store", root, "--port", "0", timeout=60)      # the default: 1 GiB segments
    assert out.returncode == 2, out.stdout + out.stderr
    assert "mapped_file_size_commitlog" in out.stderr and "ready" not in out.stdout


def test_a_reader_that_stops_reading_ends_the_output_quietly(running):
    """`mqstore query ... | head -1`: no BrokenPipeError traceback, the SIGPIPE status."""
    import subprocess
    import sys
    from tests.integration.supervised import REPO
    put = cli("produce", "--topic", "pipe", "--keys", "K", "--body", "x" * 8000, "--count", "40",
              "--address", running.address)
    assert put.returncode == 0, put.stderr
    args = ["query", "--topic", "pipe", "--key", "K", "--max", "40", "--json", "--address", running.address]
    assert wait_for(lambda: cli(*args).stdout.count("\n") == 40)          # indexed: 320 KB to print
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()                                  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 141 and "Traceback" not in err, err


def test_after_its_queue_count_is_lowered_a_topic_takes_puts_on_fewer_queues_and_is_read_whole(running):
    a = running.address
    assert cli("topics", "--create", "shrinks", "--queues", "4", "--address", a).returncode == 0
    assert cli("produce", "--topic", "shrinks", "--body", "x", "--queue", "3", "--address", a).returncode == 0
    assert cli("topics", "--create", "shrinks", "--queues", "2", "--address", a).returncode == 0
    put = cli("produce", "--topic", "shrinks", "--body", "y", "--queue", "3", "--address", a)
    assert put.returncode == 2, put.stdout + put.stderr
    assert "--queue 3: topic shrinks has 2 queues that take puts: 0..1" in put.stderr
    got = cli("consume", "--topic", "shrinks", "--group", "g", "--queues", "3", "--address", a)
    assert got.returncode == 0 and got.stdout.startswith("3:0\t"), got.stdout + got.stderr
