"""StoreLock (one store per directory, across processes and within one) and AbortFile."""
import os
import subprocess
import sys
import textwrap

import pytest

from core.files.fileops import FileOps
from core.files.store_files import AbortFile, StoreLock, StoreLockedError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import sys
    from core.files.store_files import StoreLock, StoreLockedError
    lock = StoreLock(sys.argv[1])
    try:
        lock.acquire()
    except StoreLockedError as exc:
        print(exc)
        sys.exit(3)
    print("acquired")
    lock.release()
""")


def try_in_child(lock_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", CHILD, str(lock_path)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_second_process_is_refused_then_admitted(tmp_path):
    lock_path = tmp_path / "lock"
    AbortFile(str(tmp_path / "abort"), FileOps()).create()
    lock = StoreLock(str(lock_path))
    lock.acquire()
    try:
        child = try_in_child(lock_path)
        assert child.returncode == 3, child.stderr
        assert str(lock_path) in child.stdout
        assert f"pid {os.getpid()}" in child.stdout
    finally:
        lock.release()
    child = try_in_child(lock_path)
    assert child.returncode == 0 and "acquired" in child.stdout, child.stderr


def test_lock_freed_when_holder_dies(tmp_path):
    lock_path = tmp_path / "lock"
    env = dict(os.environ, PYTHONPATH=REPO)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from core.files.store_files import StoreLock; "
         "l = StoreLock(sys.argv[1]); l.acquire(); print('held', flush=True); sys.stdin.read()",
         str(lock_path)], env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLockedError):
            StoreLock(str(lock_path)).acquire()
    finally:
        holder.kill()
        holder.wait(timeout=30)
    with StoreLock(str(lock_path)) as lock:
        assert lock.held


def test_second_lock_in_same_process_refused(tmp_path):
    path = str(tmp_path / "lock")
    first = StoreLock(path)
    first.acquire()
    first.acquire()                       # same object: no-op
    second = StoreLock(path)
    with pytest.raises(StoreLockedError) as info:
        second.acquire()
    assert path in str(info.value) and info.value.path == path
    assert info.value.holder_pid is None  # no abort file to read a pid from
    assert not second.held
    first.release()
    second.acquire()
    assert second.held
    second.release()
    second.release()                      # releasing twice is harmless


def test_lock_file_content_and_kept_after_release(tmp_path):
    path = tmp_path / "lock"
    path.write_bytes(b"garbage from before")
    with StoreLock(str(path)):
        assert path.read_bytes() == b"lock"
    assert path.exists()


def test_abort_file_lifecycle(tmp_path):
    calls = []

    class Recording(FileOps):
        def write_file_atomic(self, p, data):
            calls.append(("write_file_atomic", p, data))
            super().write_file_atomic(p, data)

        def unlink(self, p):
            calls.append(("unlink", p))
            super().unlink(p)

    path = str(tmp_path / "abort")
    abort = AbortFile(path, Recording())
    assert not abort.exists() and abort.read_pid() is None
    abort.create()
    assert abort.exists() and abort.read_pid() == os.getpid()
    assert calls == [("write_file_atomic", path, str(os.getpid()).encode())]
    abort.remove()
    assert not abort.exists() and calls[-1] == ("unlink", path)
    abort.remove()                        # missing: fine
    abort.create(pid=1234)
    assert abort.read_pid() == 1234


def test_empty_abort_file_from_rocketmq4(tmp_path):
    path = tmp_path / "abort"
    path.write_bytes(b"")
    abort = AbortFile(str(path), FileOps())
    assert abort.exists() and abort.read_pid() is None
