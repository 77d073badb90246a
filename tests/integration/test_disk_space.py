"""A supervised store on a small tmpfs: when the file system is fuller than
`disk_space_warning_level_ratio` the supervisor stops puts (SERVICE_NOT_AVAILABLE, status flag
space_full), and takes them again once space is freed, as RocketMQ's isSpaceFull does."""
from __future__ import annotations

import pytest

from ipc import Producer
from tests.integration.harness import small_tmpfs, wait_for
from tests.integration.supervised import SupervisedStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def small_fs(tmp_path):
    with small_tmpfs(tmp_path, "8m") as mnt:
        yield mnt


@pytest.mark.slow
def test_puts_stop_over_the_warning_ratio_and_resume_when_space_is_freed(tmp_path, small_fs):
    store = SupervisedStore(tmp_path, root=str(small_fs / "store"),
                            disk_space_warning_level_ratio=50).start()
    try:
        with Producer(store.address) as p:
            assert p.send("Space", b"before").status == "PUT_OK"
            filler = small_fs / "filler"
            filler.write_bytes(b"\0" * (5 << 20))                  # 5 of 8 MiB: over 50 %
            assert wait_for(lambda: "space_full" in store.status()["flags"], 10)
            assert p.send("Space", b"while full").status == "SERVICE_NOT_AVAILABLE"
            filler.unlink()
            assert wait_for(lambda: "space_full" not in store.status()["flags"], 10)
            assert p.send("Space", b"after").status == "PUT_OK"
    finally:
        store.ensure_stopped()
