"""Fixtures shared by the unit tests."""
from __future__ import annotations

import pytest

from tests.unit.scripted_peer import Peer


@pytest.fixture
def peers():
    """`peers(script=None, version=1)`: a started scripted Peer, closed at teardown."""
    made = []

    def make(*args, **kwargs):
        p = Peer(*args, **kwargs)
        made.append(p)
        return p
    yield make
    for p in made:
        p.close()
