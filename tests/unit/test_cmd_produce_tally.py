"""What `mqstore produce` says it did: a put that got no answer is "unconfirmed" (it may have
been stored), not counted as lost. Regression: a SIGKILLed appender's 8 in-flight puts were
reported as "29992 of 30000 messages stored" while all 30,000 were there, inviting a resend of
duplicates."""
from concurrent.futures import Future

from core.status import PutMessageStatus
from ipc.send_result import SendResult
from supervisor.cmd_produce import Tally


def done(value=None, error=None) -> Future:
    f = Future()
    if error is not None:
        f.set_exception(error)
    else:
        f.set_result(value)
    return f


def test_unanswered_puts_are_unconfirmed_not_lost(capsys):
    t = Tally(quiet=True)
    t.sent = 30
    t.settle(done(SendResult(PutMessageStatus.PUT_OK, "t", ["A"], 0, 0, 0, 0, 10)), 10)
    t.settle(done(error=TimeoutError("put: no reply from appender in time")), 10)
    t.settle(done(SendResult(PutMessageStatus.MESSAGE_ILLEGAL, "t", reason="too big")), 10)
    line = t.summary(2.0, 0)
    assert line.startswith("mqstore produce: 10 of 30 messages stored")
    assert "10 refused" in line and "10 unconfirmed (no answer: they may have been stored" in line
    assert t.failed
    err = capsys.readouterr().err.splitlines()
    assert err == ["mqstore produce: put: no reply from appender in time",
                   "mqstore produce: more failures; --quiet counts them in the summary"]
