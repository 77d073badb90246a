"""Fault injection at the system-call boundary of a real service process, for chaos and
regression tests.

Python imports `sitecustomize` at start-up from the first directory on its path that has one;
tests put this directory on PYTHONPATH. In the service named by FAULT_FDATASYNC_SERVICE (the
process started as `python -m services.<name>`), `os.fdatasync` of a CommitLog segment raises
EIO once the file named by FAULT_FDATASYNC_TRIGGER exists; the trigger is removed as the fault
fires, so it fires once. Every other process, and every other file, is left alone.

In the service named by FAULT_START_SERVICE, start-up fails: the process prints a line and
exits with code 1 before the service module runs.

- HOLD_RECOVERY_WHILE=FILE: in `python -m supervisor.cli start ...`, while FILE exists,
  `core.store.MessageStore.load` (the start-up recovery) waits before it runs, up to 60 s; a
  signal that interrupts the supervisor's recovery interrupts the wait as well.
- NO_SPACE_SERVICE=NAME and NO_SPACE_WHILE=FILE: in `python -m services.NAME`, while FILE
  exists, `FileOps.create_file` of a consume-queue or index file, `FileOps.create_sparse_file`
  and `Mapping.write` (pwrite) of a consume-queue file (sparse files take blocks as they are
  written: a full disk shows there) and `FileOps.write_file_atomic` (config/*.json) fail with
  ENOSPC, as on a full disk, and FILE + ".fired" is created when one does.
"""
import errno
import os
import sys
import time

_SERVICE = os.environ.get("FAULT_FDATASYNC_SERVICE")
_TRIGGER = os.environ.get("FAULT_FDATASYNC_TRIGGER")
_ARGV = getattr(sys, "orig_argv", ())


def _hold_recovery(trigger: str) -> None:
    from core.store import MessageStore
    real = MessageStore.load

    def load(self, *args, **kwargs):
        deadline = time.monotonic() + 60
        while os.path.exists(trigger) and time.monotonic() < deadline:
            time.sleep(0.05)
        return real(self, *args, **kwargs)

    MessageStore.load = load


def _no_space(trigger: str) -> None:
    from core.files.fileops import FileOps, Mapping
    real = FileOps.create_file

    def create_file(self, path, size, **kwargs):
        parts = path.split(os.sep)
        if os.path.exists(trigger) and ("consumequeue" in parts or "index" in parts):
            open(trigger + ".fired", "a").close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real(self, path, size, **kwargs)

    def failing(real_call, path_of):
        def call(self, *args):
            parts = path_of(self, args).split(os.sep)
            if os.path.exists(trigger) and "consumequeue" in parts:
                open(trigger + ".fired", "a").close()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path_of(self, args))
            return real_call(self, *args)
        return call

    FileOps.create_sparse_file = failing(FileOps.create_sparse_file, lambda ops, args: args[0])
    Mapping.write = failing(Mapping.write, lambda mapping, args: mapping.path)

    real_write = FileOps.write_file_atomic

    def write_file_atomic(self, path, data):
        if os.path.exists(trigger):
            open(trigger + ".fired", "a").close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_write(self, path, data)

    FileOps.create_file = create_file
    FileOps.write_file_atomic = write_file_atomic


def _install() -> None:
    real = os.fdatasync

    def fdatasync(fd):
        if os.path.exists(_TRIGGER):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if f"{os.sep}commitlog{os.sep}" in target:
                os.unlink(_TRIGGER)
                raise OSError(errno.EIO, "injected I/O error", target)
        return real(fd)

    os.fdatasync = fdatasync


if _SERVICE and _TRIGGER and f"services.{_SERVICE}" in _ARGV:
    _install()
if os.environ.get("FAULT_START_SERVICE") and \
        f"services.{os.environ['FAULT_START_SERVICE']}" in _ARGV:
    print("injected start-up failure", file=sys.stderr, flush=True)
    os._exit(1)
if os.environ.get("HOLD_RECOVERY_WHILE") and "supervisor.cli" in _ARGV and "start" in _ARGV:
    _hold_recovery(os.environ["HOLD_RECOVERY_WHILE"])
if os.environ.get("NO_SPACE_WHILE") and \
        f"services.{os.environ.get('NO_SPACE_SERVICE')}" in _ARGV:
    _no_space(os.environ["NO_SPACE_WHILE"])
