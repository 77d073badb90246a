"""The pipeline benchmark's foreign-load sampler: no sample while paused (a sample's CPU
burst would land in a latency probe's tail), and the CPU a neighbour used meanwhile is still
counted by the next sample."""
import subprocess
import sys
import time

from tests.bench_module import load

ForeignLoad = load("pipeline").ForeignLoad

BUSY_S = 1.2


class CountingLoad(ForeignLoad):
    def __init__(self):
        super().__init__(interval=0.05)
        self.taken = []

    def _sample(self) -> dict:
        self.taken.append(time.monotonic())
        return super()._sample()


def _neighbour() -> None:
    """Start a CPU-bound process that is not our descendant (its parent shell exits at once)."""
    subprocess.run(
        ["sh", "-c", f"{sys.executable} -c 'import time\nt = time.process_time()\n"
                     f"while time.process_time() - t < {BUSY_S}: pass' >/dev/null 2>&1 &"],
        check=True)


def test_no_sample_while_paused_and_the_gap_is_still_counted():
    load = CountingLoad()
    load.start()
    time.sleep(0.2)
    _neighbour()
    with load.paused():
        t0 = time.monotonic()
        time.sleep(0.6)                       # half the neighbour's work falls in the pause
        t1 = time.monotonic()
    deadline = time.monotonic() + 10
    while load.cpu_seconds < 0.8 * BUSY_S and time.monotonic() < deadline:
        time.sleep(0.05)                      # the neighbour works on, and samples count it
    load.finish()
    during = [t for t in load.taken if t0 + 0.06 < t < t1]   # one may have begun before the pause
    assert during == []
    assert load.cpu_seconds >= 0.8 * BUSY_S   # its CPU from before, in and after the pause
