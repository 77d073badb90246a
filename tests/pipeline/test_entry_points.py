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


def test_pyspark_finds_the_source_from_any_directory(tmp_path):
    """What PySpark's lookup_data_sources worker does: list sys.path for pyspark_* modules
    and import them; from outside the checkout too (the editable install alone hides it)."""
    import subprocess
    import sys
    code = ("import pkgutil, importlib\n"
            "names = [m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')]\n"
            "print(importlib.import_module('pyspark_mqstore').DefaultSource.name() if 'pyspark_mqstore' in names else names)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "mqstore", done.stdout + done.stderr
