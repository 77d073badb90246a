"""`ProgressBar`: a one-line progress bar on stderr for long scans (recovery, `mqstore check`).

`bar.update(done_bytes, total_bytes)` (or calling the bar itself, so that it can be passed as
a `progress` callback) shows bytes done of total, percent, MB/s and the
time left, redrawn at most every `interval` seconds (~10 a second) and when the scan reaches its
total. When the stream is not a terminal nothing is drawn while running; `close()` then prints
one summary line, so logs and pipes get a record of the scan and no carriage returns. A scan that
starts over (done going back, e.g. a second pass of a repair) restarts the rate and the clock.

`bar.queues(done, total)` counts consume queues instead of bytes (recovery reads the tail of
every queue before it scans the log: with 80,000 queues that is the part an operator waits
for); the next byte count starts the bar over in bytes.
"""
from __future__ import annotations

import sys
import time

MB = 1_000_000


def _clock_text(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ProgressBar:
    def __init__(self, label: str, stream=None, interval: float = 0.1, width: int = 24,
                 clock=time.monotonic):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.width = width
        self.clock = clock
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.done = self.total = 0
        self.started = self.last_draw = None
        self.finished = False
        self.unit = "bytes"

    def queues(self, done: int, total: int) -> None:
        """Progress in consume queues recovered of all queues."""
        self.update(done, total, unit="queues")

    def update(self, done: int, total: int, unit: str = "bytes") -> None:
        now = self.clock()
        if self.started is None or done < self.done or unit != self.unit:
            if unit != self.unit and self.tty and self.last_draw is not None:
                self.stream.write("\n")                  # keep the finished phase's line
            self.started, self.last_draw = now, None
        self.done, self.total, self.unit = done, total, unit
        if self.tty and (self.last_draw is None or now - self.last_draw >= self.interval or done >= total):
            self.last_draw = now
            self.stream.write("\r" + self.line(now) + "\x1b[K")
            self.stream.flush()

    def rate(self, now: float) -> float:
        elapsed = now - self.started if self.started is not None else 0.0
        return self.done / elapsed if elapsed > 0 else 0.0

    def line(self, now: float) -> str:
        """The bar as drawn: label, bar, percent, MB done of total, MB/s, time left."""
        fraction = min(self.done / self.total, 1.0) if self.total > 0 else 1.0
        filled = int(fraction * self.width)
        rate = self.rate(now)
        left = _clock_text((self.total - self.done) / rate) if rate > 0 else "-:--"
        if self.unit == "queues":
            return (f"{self.label} consume queues [{'#' * filled}{'.' * (self.width - filled)}] "
                    f"{fraction * 100:5.1f}% {self.done:,}/{self.total:,} queues {rate:,.0f}/s ETA {left}")
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {fraction * 100:5.1f}% "
                f"{self.done / MB:.1f}/{self.total / MB:.1f} MB {rate / MB:.1f} MB/s ETA {left}")

    def close(self) -> None:
        """End the bar: a terminal keeps its last state on its own line; elsewhere one summary
        line. Nothing when no progress was ever reported; a second call does nothing."""
        if self.finished or self.started is None:
            return
        self.finished = True
        now = self.clock()
        elapsed = now - self.started
        if self.unit == "queues":
            summary = f"{self.label}: {self.done:,} of {self.total:,} consume queues in {elapsed:.1f} s"
        else:
            summary = (f"{self.label}: {self.done / MB:.1f} MB of {self.total / MB:.1f} MB in "
                       f"{elapsed:.1f} s ({self.rate(now) / MB:.1f} MB/s)")
        self.stream.write(("\r" + summary + "\x1b[K\n") if self.tty else summary + "\n")
        self.stream.flush()

    __call__ = update
    finish = close

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
