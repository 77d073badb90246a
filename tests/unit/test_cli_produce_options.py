"""`mqstore produce` options that cannot work together are usage errors (exit 2, one line),
found before the store is looked for."""
import pytest

from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["--count", "5"], "--count repeats --body or --file"),
    (["--body", "x", "--count", "-1"], "--count must be >= 0"),
    (["--body", "x", "--batch", "0"], "--batch and --in-flight >= 1"),
    (["--body", "x", "--property", "novalue"], "expected NAME=VALUE"),
])
def test_bad_produce_options_exit_2(tmp_path, capsys, args, says):
    assert main(["produce", "--topic", "T", "--store", str(tmp_path / "none"), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
