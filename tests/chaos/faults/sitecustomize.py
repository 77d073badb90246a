"""Fault injection at the system-call boundary of a real service process, for chaos tests.

Python imports `sitecustomize` at start-up from the first directory on its path that has one;
tests put this directory on PYTHONPATH. In the service named by FAULT_FDATASYNC_SERVICE (the
process started as `python -m services.<name>`), `os.fdatasync` of a CommitLog segment raises
EIO once the file named by FAULT_FDATASYNC_TRIGGER exists; the trigger is removed as the fault
fires, so it fires once. Every other process, and every other file, is left alone.

In the service named by FAULT_START_SERVICE, start-up fails: the process prints a line and
exits with code 1 before the service module runs.
"""
import errno
import os
import sys

_SERVICE = os.environ.get("FAULT_FDATASYNC_SERVICE")
_TRIGGER = os.environ.get("FAULT_FDATASYNC_TRIGGER")


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


if _SERVICE and _TRIGGER and f"services.{_SERVICE}" in getattr(sys, "orig_argv", ()):
    _install()
if os.environ.get("FAULT_START_SERVICE") and \
        f"services.{os.environ['FAULT_START_SERVICE']}" in getattr(sys, "orig_argv", ()):
    print("injected start-up failure", file=sys.stderr, flush=True)
    os._exit(1)
