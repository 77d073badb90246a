"""`LeastPages`: RocketMQ's rule for how much a periodic flush or commit must have to do: at
least `least_pages` dirty pages, except once every `thorough_interval_ms`, when anything at
all is taken (0 pages). Used by core.jobs.FlushJob and CommitJob (threads of the embedded
store, the flusher and committer processes)."""
from __future__ import annotations

import time


class LeastPages:
    def __init__(self, least_pages: int, thorough_interval_ms: int):
        self.least_pages = least_pages
        self.thorough_s = thorough_interval_ms / 1000
        self.last_thorough = time.monotonic()

    def now(self, now: float | None = None) -> int:
        """The least-pages argument for a flush or commit made at `now` (monotonic seconds)."""
        now = time.monotonic() if now is None else now
        if now - self.last_thorough >= self.thorough_s:
            self.last_thorough = now
            return 0
        return self.least_pages
