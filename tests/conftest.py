"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.nodeproc import Nodes


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    """Node and name-server processes a test starts; all stopped when it ends."""
    n = Nodes()
    yield n
    n.cleanup()
