"""The export job's arguments (refused before any Spark session starts) and the package's names."""
from __future__ import annotations

import pytest

from pipeline.export import parse_args


def test_no_store_there_exits_2_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--store", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    assert "no store there" in capsys.readouterr().err


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for option in ("--store", "--out", "--topic", "--overwrite", "--master", "--check-crc"):
        assert option in text


def test_the_source_class_is_importable_from_the_package():
    from pipeline import MqstoreDataSource
    assert MqstoreDataSource.name() == "mqstore"
    import pipeline
    with pytest.raises(AttributeError):
        pipeline.NoSuchThing
