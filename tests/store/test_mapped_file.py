"""store.mapped_file.MappedFile appends: small ones copied into the map, large ones through
pwrite; either way the map, reads and the file on disk agree, and a failed write loses nothing."""

from __future__ import annotations

import os

import pytest

from store.layout import segment_name
from store.mapped_file import PWRITE_MIN_BYTES, MappedFile

SIZE = 256 * 1024


@pytest.fixture
def mf(tmp_path):
    f = MappedFile(str(tmp_path / segment_name(0)), SIZE, preallocate=True)
    yield f
    f.destroy(0)


def test_small_and_large_appends_read_back_everywhere(mf):
    small = os.urandom(100)
    large = os.urandom(PWRITE_MIN_BYTES + 7)  # written with pwrite
    assert mf.append(small) and mf.append(memoryview(large)) and mf.append(small)
    expected = small + large + small
    assert mf.wrote_position == len(expected)
    assert mf.read(0, len(expected)) == expected  # through the map
    with mf.select(0) as selected:
        assert bytes(selected.view) == expected
    with open(mf.path, "rb") as f:  # the file itself
        assert f.read(len(expected)) == expected
    assert mf.flush(0) == len(expected)


def test_an_append_that_does_not_fit_is_refused(mf):
    assert mf.append(bytes(SIZE - 10))
    assert not mf.append(bytes(PWRITE_MIN_BYTES))
    assert mf.wrote_position == SIZE - 10


def test_a_failed_large_write_returns_false_and_keeps_the_position(mf):
    assert mf.append(b"head")
    readonly = os.open(mf.path, os.O_RDONLY)
    try:
        os.dup2(readonly, mf._fd)  # the segment's descriptor now refuses writes (EBADF)
        assert not mf.append(os.urandom(PWRITE_MIN_BYTES))
        assert mf.wrote_position == 4 and mf.committed_position == 4
        assert mf.append(b"tail")  # small appends go through the map, which still works
        assert mf.read(0, 8) == b"headtail"
    finally:
        os.close(readonly)
