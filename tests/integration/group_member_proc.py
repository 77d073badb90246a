"""A consumer-group member in a process of its own, for tests/integration/test_consumer_groups.py:
`python -m tests.integration.group_member_proc ADDRESS GROUP TOPIC OUT SESSION_MS HEARTBEAT_MS`
joins GROUP, appends `QUEUE OFFSET BODY` per message to OUT (flushed after each poll, before
the next poll can commit them), and on SIGTERM closes the consumer (final commit, leave_group)
and exits 0. SIGKILL leaves the group to find out through the session timeout."""
from __future__ import annotations

import signal
import sys
import threading

from ipc import Consumer


def main(address: str, group: str, topic: str, out: str, session_ms: str, heartbeat_ms: str) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    c = Consumer(address, group, topic, session_timeout_ms=int(session_ms),
                 heartbeat_interval_ms=int(heartbeat_ms), auto_commit_interval_ms=200, long_poll_ms=200)
    with open(out, "a") as f:
        print("joined", flush=True)
        while not stop.is_set():
            msgs = c.poll(100)
            for m in msgs:
                f.write(f"{m.queue_id} {m.queue_offset} {bytes(m.body).decode()}\n")
            f.flush()
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
