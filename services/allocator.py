"""The allocator process: creates CommitLog segments whole and atomically
(`FileOps.create_file`: tmp, fallocate, fsync, rename, fsync the directory) for the appender
(docs/SERVICES.md, allocator).

ROUTER on ipc `allocator`. `{"op": "allocate", "rid", "path", "next_path"}`: `path` is
created at once (or found whole) and answered `{"rid", "status": "OK"}`; `next_path` is
created right after the answer, so that the appender's next roll finds its segment ready,
and with `warm_mapped_file_enable` it is prefaulted (MADV_POPULATE_WRITE), advised WILLNEED
and mlocked (a logged warning where mlock is refused). Paths must name a segment of this
store's `commitlog/` (20 digits, a multiple of the segment size); anything else is refused
with BAD_FIELD.

ENOSPC on `path` sets DISK_FULL = 1 and answers an error (code UNAVAILABLE, the errno text);
the appender then answers CREATE_MAPPED_FILE_FAILED and refuses puts while DISK_FULL is set.
Because nothing asks for a segment while puts are refused, the allocator retries the failed
path every second by itself; the first success (or any later successful `allocate`) clears
DISK_FULL. A failure to create `next_path` ahead is only logged: the appender asks for it
again when it needs it.
"""
from __future__ import annotations

import errno
import logging
import os
import time

import zmq

from core.files.fileops import REAL_FILE_OPS
from ipc.control_block import Word
from ipc.protocol import OK, ErrorCode, Handlers, ProtocolError, error_reply, field, pack
from ipc.sockets import bind_ipc, ipc_endpoint, make_socket
from services.base import ServiceLoop, run_service

log = logging.getLogger("mqstore.allocator")
RETRY_S = 1.0


class Allocator(ServiceLoop):
    name = "allocator"
    interval_ms = 100

    def __init__(self, config, cb):
        super().__init__(config, cb)
        self.fileops = REAL_FILE_OPS
        self.directory = config.commitlog_dir
        self.file_size = config.mapped_file_size_commitlog
        self.warm = config.warm_mapped_file_enable
        self.pending: list[str] = []          # paths to create ahead, after the answers
        self.ahead: set[str] = set()          # made ahead, not yet asked for: deleted at a clean stop
        self.failed_path: str | None = None   # the path that hit ENOSPC, retried every RETRY_S
        self.next_retry = 0.0
        self.handlers = Handlers()
        self.handlers.op("allocate")(self._allocate)

    def setup(self) -> None:
        self.fileops.make_dirs(self.directory)
        self.sock = make_socket(self.ctx, zmq.ROUTER)
        bind_ipc(self.sock, ipc_endpoint(self.run_dir, "allocator"))
        self.poller.register(self.sock, zmq.POLLIN)

    def run_once(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            out = self.handlers.handle(frames[1:], None, log)
            try:
                self.sock.send_multipart([frames[0], *out], zmq.NOBLOCK)
            except zmq.ZMQError as e:
                log.warning("answer dropped: %s", e)
        while self.pending and not self.stopped:
            self._create_ahead(self.pending.pop(0))
        if self.failed_path is not None and time.monotonic() >= self.next_retry:
            self._retry()

    # -- the operation -------------------------------------------------------------------
    def _allocate(self, env, frames, peer):
        rid = env.get("rid", 0)
        path = self._segment_path(field(env, "path", str), "path")
        next_path = field(env, "next_path", str, None)
        if next_path is not None:
            next_path = self._segment_path(next_path, "next_path")
        self.ahead.discard(path)
        try:
            self._create(path)
        except OSError as e:
            log.error("cannot create %s: %s", path, e)
            if e.errno == errno.ENOSPC:
                self.failed_path = path
                self.next_retry = time.monotonic() + RETRY_S
                self.cb.set(Word.DISK_FULL, 1)
            return error_reply(rid, ErrorCode.UNAVAILABLE,
                               f"cannot create {path}: {os.strerror(e.errno) if e.errno else e}")
        self._created()
        if next_path is not None and next_path not in self.pending:
            self.pending.append(next_path)
        return [pack({"rid": rid, "status": OK})]

    def _segment_path(self, path: str, name: str) -> str:
        path = os.path.abspath(path)
        base = os.path.basename(path)
        if (os.path.dirname(path) != self.directory or len(base) != 20 or not base.isdigit()
                or int(base) % self.file_size):
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"field '{name}' must name a segment in {self.directory}, got {path!r}")
        return path

    def _create(self, path: str) -> bool:
        """Create `path` unless it exists whole; True if it was created now."""
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            self.fileops.create_file(path, self.file_size)
            log.info("created %s", os.path.basename(path))
            return True
        if size != self.file_size:
            raise OSError(errno.EINVAL, f"{path} exists with {size} bytes, segments are {self.file_size}")
        return False

    def _created(self) -> None:
        if self.cb.get(Word.DISK_FULL):
            log.info("segments can be created again: DISK_FULL cleared")
            self.cb.set(Word.DISK_FULL, 0)
        self.failed_path = None

    def _create_ahead(self, path: str) -> None:
        try:
            if self._create(path):
                self.ahead.add(path)
                if self.warm:
                    self._warm(path)
        except OSError as e:
            log.warning("could not create %s ahead of time: %s", path, e)

    def _warm(self, path: str) -> None:
        started = time.monotonic()
        if not self.fileops.warm_file(path, self.file_size):
            log.warning("mlock of %s not allowed here; segment warmed but not locked", path)
        log.info("warmed %s in %.3f s", os.path.basename(path), time.monotonic() - started)

    def _retry(self) -> None:
        path = self.failed_path
        try:
            self._create(path)
        except OSError as e:
            self.next_retry = time.monotonic() + RETRY_S
            if e.errno != errno.ENOSPC:
                log.warning("retry of %s failed: %s", path, e)
            return
        self._created()

    def close(self) -> None:
        self.fileops.discard_unwritten(self.ahead, log)   # RocketMQ drops its pre-allocated files
        self.sock.close(0)
        super().close()


if __name__ == "__main__":
    raise SystemExit(run_service(Allocator))
