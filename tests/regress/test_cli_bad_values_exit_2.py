"""Regression: option values the store would refuse, or that cannot work, were sent anyway and
ended in exit 1 (the status for a stopped store or a refused request) instead of the usage
error (exit 2, one line naming the option) that docs/OPERATIONS.md promises for "bad or
out-of-range options (found before the store is asked)": a timeout of 0 or below (`stop
--timeout -1` even stopped the store, then reported that it had not stopped; `status --timeout
-1` waited forever), `query --max 0`, a negative `--offset`/`--begin`/`--end`, a topic or
group name the store refuses, and a `--file` that cannot be read.

The store directory exists but no store runs there: before the fix each of these was not found
bad until the store was looked for (exit 1, "no store is running")."""
import pytest

from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["produce", "--topic", "T", "--body", "x", "--timeout", "0"], "--timeout 0:"),
    (["produce", "--topic", "T", "--body", "x", "--timeout", "-1"], "--timeout -1:"),
    (["produce", "--topic", "bad topic", "--body", "x"], "--topic 'bad topic':"),
    (["produce", "--topic", "x" * 128, "--body", "x"], "over 127 UTF-8 bytes"),
    (["produce", "--topic", "T", "--file", "/nonexistent/body"], "--file /nonexistent/body:"),
    (["consume", "--topic", "T", "--group", "g", "--timeout", "0"], "--timeout 0:"),
    (["consume", "--topic", "T", "--group", "g", "--timeout", "nan"], "--timeout nan:"),
    (["consume", "--topic", "bad/t", "--group", "g"], "--topic 'bad/t':"),
    (["consume", "--topic", "T", "--group", "bad group"], "--group 'bad group': group 'bad group'"),
    (["query", "--topic", "T", "--key", "k", "--max", "0"], "--max 0:"),
    (["query", "--topic", "T", "--key", "k", "--begin", "-1"], "--begin -1:"),
    (["query", "--topic", "T", "--key", "k", "--end", "-5"], "--end -5:"),
    (["query", "--topic", "bad topic", "--key", "k"], "--topic 'bad topic':"),
    (["query", "--offset", "-1"], "--offset -1:"),
    (["topics", "--create", "bad topic"], "--create 'bad topic':"),
    (["status", "--timeout", "0"], "--timeout 0:"),
    (["status", "--timeout", "-1"], "--timeout -1:"),
    (["stop", "--timeout", "-1"], "--timeout -1:"),
])
def test_bad_values_exit_2_before_the_store_is_asked(tmp_path, capsys, args, says):
    assert main([*args, "--store", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_good_values_still_go_to_the_store(tmp_path, capsys):
    """The same commands with good values get as far as looking for the store (exit 1)."""
    for args in (["produce", "--topic", "T%|_-9", "--body", "x", "--timeout", "0.5"],
                 ["consume", "--topic", "T", "--group", "g_1", "--timeout", "0.5"],
                 ["query", "--topic", "T", "--key", "k", "--max", "1", "--begin", "0", "--end", "0"],
                 ["query", "--id", "7F00000100002A9F0000000000000000"],
                 ["query", "--offset", "0"],
                 ["topics", "--create", "T"],
                 ["status", "--timeout", "0.5"],
                 ["stop", "--timeout", "0.5"]):
        assert main([*args, "--store", str(tmp_path)]) == 1, args
        assert "no store is running" in capsys.readouterr().err
