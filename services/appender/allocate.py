"""The appender's side of segment creation: the allocator callable that `core.log.commitlog.CommitLog`
calls when it needs a new segment. It sends `{"op": "allocate", "rid", "path", "next_path"}`
over a DEALER to the allocator process (docs/SERVICES.md) and waits up to ALLOCATE_TIMEOUT_S
for the matching answer. A refusal or no answer in time raises OSError, which the engine turns
into CREATE_MAPPED_FILE_FAILED. Answers to earlier requests that came too late are skipped.
"""
from __future__ import annotations

import errno
import logging
import time

import zmq

from ipc.protocol import OK, pack, unpack
from ipc.sockets import ipc_endpoint, make_socket

log = logging.getLogger("mqstore.appender")
ALLOCATE_TIMEOUT_S = 5.0


class AllocatorClient:
    def __init__(self, ctx: zmq.Context, run_dir: str, timeout_s: float = ALLOCATE_TIMEOUT_S):
        self.sock = make_socket(ctx, zmq.DEALER)
        self.sock.connect(ipc_endpoint(run_dir, "allocator"))
        self.timeout_s = timeout_s
        self.rid = 0

    def __call__(self, path: str, next_path: str) -> None:
        self.rid += 1
        rid = self.rid
        self.sock.send(pack({"op": "allocate", "rid": rid, "path": path, "next_path": next_path}))
        deadline = time.monotonic() + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(left * 1000):
                break
            answer = unpack(self.sock.recv())
            if not isinstance(answer, dict) or answer.get("rid") != rid:
                continue
            if answer.get("status") == OK:
                return
            log.error("allocator refused %s: %s", path, answer.get("reason"))
            raise OSError(errno.EIO, f"allocator refused {path}: {answer.get('reason')}")
        log.error("allocator did not answer for %s within %.0f s", path, self.timeout_s)
        raise OSError(errno.ETIMEDOUT, f"allocator did not answer for {path}")

    def close(self) -> None:
        self.sock.close(0)
