"""Fixtures of the power-loss tests: a `RecordingFileOps` over a fresh store root, and fresh
directories to materialize crash states into."""
from __future__ import annotations

import itertools

import pytest

from recording import RecordingFileOps


@pytest.fixture
def store_root(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


@pytest.fixture
def recording(store_root):
    return RecordingFileOps(store_root)


@pytest.fixture
def crash_dir(tmp_path):
    """A function returning a new, not yet existing directory for each crash state."""
    counter = itertools.count()
    return lambda: str(tmp_path / f"crash-{next(counter)}")
