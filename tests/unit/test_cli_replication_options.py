"""`mqstore promote`, `mqstore follow` and `mqstore start --role/--master`: bad input is a usage
error (exit 2, one line), a store that is not running is exit 1, and each has a --help."""
import pytest

from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["follow", "--master", "nohost"], "--master 'nohost': must be host:port"),
    (["follow", "--master", "h:99999"], "must be host:port"),
    (["promote", "--timeout", "0"], "--timeout 0: must be a number of seconds above 0"),
    (["promote"], "no store directory at"),
])
def test_bad_replication_options_exit_2(tmp_path, capsys, args, says):
    assert main([*args, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_start_checks_the_master_address(tmp_path, capsys):
    assert main(["start", "--store", str(tmp_path / "s"), "--master", "no-port"]) == 2
    assert "ha_master_address = 'no-port'" in capsys.readouterr().err


def test_promote_and_follow_of_a_store_that_is_not_running_exit_1(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    assert main(["promote", "--store", str(tmp_path / "s")]) == 1
    assert "no store is running" in capsys.readouterr().err
    assert main(["follow", "--store", str(tmp_path / "s"), "--master", "127.0.0.1:10912"]) == 1
    assert "no store is running" in capsys.readouterr().err


@pytest.mark.parametrize("command, words", [("promote", "new epoch"), ("follow", "truncates")])
def test_help_explains(command, words, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert words in out.replace("\n", " ") or words in out
