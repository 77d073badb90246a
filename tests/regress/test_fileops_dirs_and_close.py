"""Regressions in the I/O seam: make_dirs fsyncs every directory level it creates (a power cut
could otherwise lose `consumequeue/<topic>` while `<topic>/<qid>` was synced), and
Mapping.close never leaks the descriptor when a buffer export is alive."""
import os

from core.files.fileops import FileOps


class CountingFileOps(FileOps):
    def __init__(self):
        self.synced = []

    def fsync_dir(self, path):
        self.synced.append(os.path.abspath(path))
        super().fsync_dir(path)


def test_make_dirs_fsyncs_each_new_level(tmp_path):
    ops = CountingFileOps()
    target = tmp_path / "consumequeue" / "TopicA" / "3"
    ops.make_dirs(str(target))
    assert target.is_dir()
    assert ops.synced == [str(tmp_path), str(tmp_path / "consumequeue"),
                          str(tmp_path / "consumequeue" / "TopicA")]


def test_close_with_live_export_closes_the_descriptor(tmp_path):
    ops = FileOps()
    path = str(tmp_path / "seg")
    ops.create_file(path, 4096)
    mapping = ops.map_file(path, 4096)
    fd = mapping._fd
    view = memoryview(mapping.buf)          # a live export makes mmap.close raise BufferError
    mapping.close()
    assert mapping.closed
    try:
        os.fstat(fd)
        still_open = True
    except OSError:
        still_open = False
    assert not still_open
    view.release()
