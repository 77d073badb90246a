"""Regression: usage errors that ended in a traceback, a wait or the wrong usage text.

Before the fix: a malformed `--address` raised ZMQError with a traceback (exit 1) and an
address whose port cannot exist waited for the timeout; `start --store` on a regular file
raised NotADirectoryError; a malformed `query --id` was sent to the store (exit 1, BAD_FIELD);
`topics --queues N` without `--create` was ignored; an unknown option of a subcommand printed
the top-level usage instead of the subcommand's. Each is now one line (or the subcommand's
usage) on stderr and exit 2, decided before any store is looked for."""
import socket

import pytest

from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["status", "--address", "foo"], "--address 'foo': expected tcp://HOST:PORT"),
    (["produce", "--topic", "T", "--body", "b", "--address", "foo"], "--address 'foo'"),
    (["topics", "--address", "tcp://127.0.0.1:99999"], "PORT 1..65535"),
    (["stop", "--address", "tcp://127.0.0.1"], "expected tcp://HOST:PORT"),
    (["consume", "--topic", "T", "--group", "g", "--address", "tcp://:5"], "expected tcp://HOST:PORT"),
    (["query", "--id", "zz", "--address", "tcp://127.0.0.1:1"], "--id 'zz': not an offset message id"),
    (["query", "--id", "0" * 31, "--address", "tcp://127.0.0.1:1"], "not an offset message id"),
    (["topics", "--queues", "8", "--address", "tcp://127.0.0.1:1"], "--queues needs --create"),
])
def test_found_before_the_store_is_asked(capsys, args, says):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_an_ipv6_address_is_accepted(capsys):
    # Well formed, nobody there: the usual "not running" answer (exit 1), not a usage error.
    assert main(["status", "--address", "tcp://[::1]:1", "--timeout", "0.2"]) == 1


@pytest.mark.parametrize("store", ["a_file", "a_file/below"])
def test_start_on_a_store_that_cannot_be_a_directory(tmp_path, capsys, store):
    (tmp_path / "a_file").write_text("not a store")
    assert main(["start", "--store", str(tmp_path / store), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and "not a directory" in err and err.count("\n") == 1, err


def test_an_unknown_option_prints_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["produce", "--topic", "T", "--body", "b", "--frobnicate"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: mqstore produce") and "--frobnicate" in err, err


@pytest.mark.parametrize("host, says", [
    ("example.invalid", "--host example.invalid: cannot resolve it"),
    ("192.0.2.1", "--host 192.0.2.1: cannot listen there"),       # TEST-NET-1: not this machine's
])
def test_start_on_a_host_that_is_not_here_writes_nothing(tmp_path, capsys, host, says):
    # Before: "no free port found on example.invalid" or "another mqstore is using it", and a
    # skeleton store (checkpoint, commitlog/, config/, lock) was left behind.
    store = tmp_path / "store"
    assert main(["start", "--store", str(store), "--host", host, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert not store.exists()


def test_start_on_a_taken_port_writes_nothing(tmp_path, capsys):
    store = tmp_path / "store"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["start", "--store", str(store), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port} for the front door" in err and err.count("\n") == 1, err
    assert not store.exists()
