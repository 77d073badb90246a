"""Options of `mqstore produce`, `consume`, `query` and `topics` that cannot work together, or
values out of range, are usage errors (exit 2, one line), found before the store is looked for;
so is a missing store directory for `status` and `stop`, as for `check` and `recover`."""
import pytest

from core.record.codec import SCHEDULE_TOPIC
from supervisor.cli import main


@pytest.mark.parametrize("args, says", [
    (["produce", "--topic", "T", "--count", "5"], "--count repeats --body or --file"),
    (["produce", "--topic", "T", "--body", "x", "--count", "-1"], "--count must be >= 0"),
    (["produce", "--topic", "T", "--body", "x", "--batch", "0"], "--batch and --in-flight >= 1"),
    (["produce", "--topic", "T", "--body", "x", "--property", "novalue"], "expected NAME=VALUE"),
    (["consume", "--topic", "T", "--group", "g", "--max", "-1"], "--max must be >= 0"),
    (["consume", "--topic", "T", "--group", "g", "--queues", "0,x"], "expected queue ids"),
    (["query", "--key", "k"], "--key needs --topic"),
    (["query", "--topic", "T", "--key", ""], "--key is empty"),
    (["produce", "--topic", "T", "--body", "x", "--queue", "-1"], "--queue -1: queue ids are 0..1023"),
    (["produce", "--topic", "T", "--body", "x", "--queue", "1024"], "queue ids are 0..1023"),
    (["consume", "--topic", "T", "--group", "g", "--queues", "1,-2"], "--queues -2: queue ids are 0..1023"),
    (["topics", "--create", "q", "--queues", "2000"], "--queues 2000: a topic has 1..1024 queues"),
    (["topics", "--create", "q", "--queues", "0"], "a topic has 1..1024 queues"),
    (["produce", "--topic", "T", "--body", "x", "--property", "TAGS=zzz"], "TAGS is a system property"),
    (["produce", "--topic", "T", "--body", "x", "--property", "UNIQ_KEY=dup"], "UNIQ_KEY is a system"),
    (["produce", "--topic", "T", "--body", ""], "a message body cannot be empty"),
    (["produce", "--topic", SCHEDULE_TOPIC, "--body", "x"], "clients may not send to it"),
    (["produce", "--topic", "RMQ_SYS_TRANS_HALF_TOPIC", "--body", "x"], "clients may not send"),
    (["topics", "--create", "TBW102"], "--create TBW102: a system topic"),
    (["topics", "--create", "rmq_sys_mine"], "a system topic"),
    (["query", "--id", "0" * 32, "--topic", "T"], "--topic goes with --key only"),
    (["query", "--offset", "0", "--max", "3"], "--max goes with --key only"),
    (["query", "--topic", "T", "--key", "k", "--begin", "100", "--end", "50"], "--begin 100 is after --end 50"),
    (["status"], "no store directory at"),
    (["stop"], "no store directory at"),
])
def test_bad_options_exit_2(tmp_path, capsys, args, says):
    assert main([*args, "--store", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_an_empty_file_is_not_a_body(tmp_path, capsys):
    (tmp_path / "empty").write_bytes(b"")
    assert main(["produce", "--topic", "T", "--file", str(tmp_path / "empty"),
                 "--store", str(tmp_path / "none")]) == 2
    assert "the file is empty" in capsys.readouterr().err


def test_ctrl_c_while_the_commands_load_exits_130_without_a_traceback(monkeypatch, capsys):
    import supervisor.cli as cli

    def interrupted(only=None):
        raise KeyboardInterrupt                  # as SIGINT lands in a slow first import
    monkeypatch.setattr(cli, "command_modules", interrupted)
    assert main(["status"]) == 130
    assert capsys.readouterr().err == "mqstore: interrupted\n"


def test_every_command_help_is_wrapped_for_a_terminal():
    from supervisor.cli import command_modules
    for module in command_modules():
        long = [line for line in (module.__doc__ or "").splitlines() if len(line) > 100]
        assert not long, f"{module.__name__}: --help lines over 100 columns: {long}"
