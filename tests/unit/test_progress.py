"""`ProgressBar`: bytes by default; `queues(done, total)` counts consume queues (issue 27:
the recovery of a store with tens of thousands of queues is first a pass over the queues)."""
import io

from supervisor.progress import ProgressBar


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_queues_are_counted_then_bytes_start_over():
    out, clock = Tty(), Clock()
    bar = ProgressBar("recovering", stream=out, clock=clock, interval=0)
    bar.queues(0, 80_000)
    clock.now = 2.0
    bar.queues(40_000, 80_000)
    assert "40,000/80,000 queues" in out.getvalue() and "20,000/s" in out.getvalue()
    clock.now = 4.0
    bar.queues(80_000, 80_000)
    bar(0, 10_000_000)                       # the log scan: a new line, in MB
    clock.now = 5.0
    bar(5_000_000, 10_000_000)
    text = out.getvalue()
    assert "\n" in text.split("80,000/80,000 queues")[1]      # the queue line is kept
    assert text.rstrip().endswith("\x1b[K") and "5.0/10.0 MB" in text.split("\n")[-1]
    bar.close()


def test_a_pipe_gets_one_summary_line_of_the_last_phase():
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar("recovering", stream=out, clock=clock)
    bar.queues(1, 20_000)
    clock.now = 3.0
    bar.queues(20_000, 20_000)
    bar.close()
    assert out.getvalue() == "recovering: 20,000 of 20,000 consume queues in 3.0 s\n"
