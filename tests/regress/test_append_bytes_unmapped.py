"""Regression: `MappedFile.append_bytes` on a segment nobody had mapped yet raised
AttributeError (it wrote through `self.buf`, which is None until `hold()`), and on a
destroyed segment it wrote into a closed mapping instead of refusing."""
from core.files.fileops import REAL_FILE_OPS
from core.files.mapped_file import MappedFile


def make(tmp_path, size=4096):
    path = str(tmp_path / "00000000000000000000")
    REAL_FILE_OPS.create_file(path, size)
    return MappedFile(path, size, REAL_FILE_OPS)


def test_append_maps_the_file_itself(tmp_path):
    mf = make(tmp_path)
    assert mf.append_bytes(b"hello")
    assert mf.read(0, 5) == b"hello"
    assert mf.refs == 0


def test_append_to_a_destroyed_file_is_refused(tmp_path):
    mf = make(tmp_path)
    assert mf.destroy()
    assert not mf.append_bytes(b"hello")
    assert mf.wrote_position == 0
