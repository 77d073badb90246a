"""Options of `mqstore produce`, `consume` and `query` that cannot work together, or values
out of range, are usage errors (exit 2, one line), found before the store is looked for."""
import pytest

from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["produce", "--topic", "T", "--count", "5"], "--count repeats --body or --file"),
    (["produce", "--topic", "T", "--body", "x", "--count", "-1"], "--count must be >= 0"),
    (["produce", "--topic", "T", "--body", "x", "--batch", "0"], "--batch and --in-flight >= 1"),
    (["produce", "--topic", "T", "--body", "x", "--property", "novalue"], "expected NAME=VALUE"),
    (["consume", "--topic", "T", "--group", "g", "--max", "-1"], "--max must be >= 0"),
    (["consume", "--topic", "T", "--group", "g", "--queues", "0,x"], "expected queue ids"),
    (["query", "--key", "k"], "--key needs --topic"),
])
def test_bad_options_exit_2(tmp_path, capsys, args, says):
    assert main([*args, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
