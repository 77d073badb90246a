"""`SafeStream`: the supervisor's stdout and stderr, which must never take the store down.

A store started as `mqstore start | head -1`, under `tee`, or in a terminal or SSH session that
closed keeps running: a write to a closed pipe or a hung-up terminal (EPIPE, EIO) is dropped,
and the stream stays quiet from then on. What the supervisor says still reaches
`logs/supervisor.log`, which is written by its own handler.
"""
from __future__ import annotations


class SafeStream:
    """Wraps a text stream; write and flush errors (OSError, ValueError of a closed file)
    turn the stream off instead of raising."""

    def __init__(self, stream):
        self.stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)
            except (OSError, ValueError):
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True

    def isatty(self) -> bool:
        try:
            return not self.broken and self.stream.isatty()
        except (OSError, ValueError):
            return False
