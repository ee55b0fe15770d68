"""The epoch file: RocketMQ's CheckpointFile format, atomic writes, the consistent point
and suffix truncation checked against a model of labelled logs."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.epoch_file import (
    MAX_OFFSET,
    EpochEntry,
    EpochFileCache,
    EpochFileError,
    format_entries,
    parse_entries,
)
from tests.examples import examples


def entries_strategy(min_size: int = 0) -> st.SearchStrategy[list[EpochEntry]]:
    """Entries growing in epoch and start offset."""
    steps = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 1 << 40)), min_size=min_size, max_size=8)

    def build(raw: list[tuple[int, int]]) -> list[EpochEntry]:
        epoch, start, out = 0, -1, []
        for de, ds in raw:
            epoch += de
            start += ds
            out.append(EpochEntry(epoch, start))
        return out

    return steps.map(build)


# ---------------------------------------------------------------- format


def test_format_is_rocketmq_checkpoint_file() -> None:
    # the example in RocketMQ's CheckpointFile javadoc: 2 entries, crc, 7-7000, 8-8000
    text = format_entries([EpochEntry(7, 7000), EpochEntry(8, 8000)])
    lines = text.split("\n")
    assert lines[0] == "2"
    assert lines[2:] == ["7-7000", "8-8000", ""]
    assert int(lines[1]) == zlib.crc32(b"7-7000\n8-8000\n") & 0x7FFFFFFF


@given(entries_strategy(min_size=1))
def test_format_round_trip(entries: list[EpochEntry]) -> None:
    assert parse_entries(format_entries(entries)) == entries


def test_crc_zero_is_not_checked_and_a_bad_crc_or_count_is_refused() -> None:
    assert parse_entries("1\n0\n3-100\n") == [EpochEntry(3, 100)]
    with pytest.raises(EpochFileError, match="CRC"):
        parse_entries("1\n12345\n3-100\n")
    with pytest.raises(EpochFileError, match="expected 2 entries, found 1"):
        parse_entries(format_entries([EpochEntry(3, 100)]).replace("1\n", "2\n", 1))
    with pytest.raises(EpochFileError, match="integers"):
        parse_entries("x\n0\n")


def test_write_keeps_a_backup_and_a_damaged_file_is_read_from_it(tmp_path) -> None:
    path = str(tmp_path / "epochFileCheckpoint")
    cache = EpochFileCache(path)
    assert cache.append(EpochEntry(1, 0))
    assert cache.append(EpochEntry(2, 500))
    assert not os.path.exists(path + ".tmp")
    with open(path + ".bak") as f:
        assert parse_entries(f.read()) == [EpochEntry(1, 0)]
    assert EpochFileCache.load(path).entries == [EpochEntry(1, 0), EpochEntry(2, 500)]
    with open(path, "w") as f:  # a torn write of the main file
        f.write("2\n99\n1-0\n")
    assert EpochFileCache.load(path).entries == [EpochEntry(1, 0)]
    assert EpochFileCache.load(str(tmp_path / "missing")).entries == []
    with open(path + ".bak", "w") as f:  # and the backup damaged too: an error, not an empty history
        f.write("garbage")
    with pytest.raises(EpochFileError, match="epochFileCheckpoint.*no usable backup"):
        EpochFileCache.load(path)


def test_append_refuses_a_term_that_does_not_grow(tmp_path) -> None:
    cache = EpochFileCache(str(tmp_path / "e"))
    assert cache.append(EpochEntry(3, 100))
    assert not cache.append(EpochEntry(3, 200))
    assert not cache.append(EpochEntry(4, 100))
    assert cache.entries == [EpochEntry(3, 100)]
    with pytest.raises(EpochFileError):
        cache.replace([EpochEntry(2, 10), EpochEntry(1, 20)])


def test_truncating_every_entry_removes_the_files(tmp_path) -> None:
    path = str(tmp_path / "e")
    cache = EpochFileCache(path)
    cache.append(EpochEntry(1, 0))
    cache.append(EpochEntry(2, 10))
    cache.truncate_suffix_by_offset(0)
    assert cache.entries == []
    assert EpochFileCache.load(path).entries == []


# ---------------------------------------------------------------- model: labelled logs
# A log is modelled as the epoch that wrote each unit of it. Each term's master appends
# units labelled with the new epoch; the other node copies a prefix of the master's log.


def cache_of(labels: list[int], empty_term: int | None = None) -> EpochFileCache:
    entries, prev = [], None
    for i, e in enumerate(labels):
        if e != prev:
            entries.append(EpochEntry(e, i))
            prev = e
    if empty_term is not None and (not entries or entries[-1].start_offset < len(labels)):
        entries.append(EpochEntry(empty_term, len(labels)))
    cache = EpochFileCache(None, entries)
    cache.set_last_end_offset(len(labels))
    return cache


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@st.composite
def two_histories(draw) -> tuple[list[int], list[int], int | None, int | None]:
    logs: list[list[int]] = [[], []]
    empty: list[int | None] = [None, None]
    for epoch in range(1, draw(st.integers(1, 6)) + 1):
        master = draw(st.integers(0, 1))
        written = draw(st.integers(0, 4))
        logs[master] = logs[master] + [epoch] * written
        empty[master] = epoch if written == 0 else None
        if draw(st.booleans()):  # the other node replicates a prefix of the master's log
            other = 1 - master
            logs[other] = logs[master][: draw(st.integers(0, len(logs[master])))]
            empty[other] = None
    return logs[0], logs[1], empty[0], empty[1]


@settings(max_examples=examples(300))
@given(two_histories())
def test_consistent_point_is_where_the_logs_diverge(h) -> None:
    a, b, ea, eb = h
    ca, cb = cache_of(a, ea), cache_of(b, eb)
    point = ca.find_consistent_point(cb)
    assert point == cb.find_consistent_point(ca)
    lcp = common_prefix(a, b)
    if point == -1:
        assert lcp == 0
    else:
        assert point == lcp


@settings(max_examples=examples(300))
@given(two_histories(), st.integers(0, 30))
def test_truncate_suffix_by_offset_matches_a_shorter_log(h, cut) -> None:
    labels = h[0]
    cut = min(cut, len(labels))
    cache = cache_of(labels)
    cache.truncate_suffix_by_offset(cut)
    expected = cache_of(labels[:cut])
    assert cache.entries == expected.entries
    for e in expected.entries:
        assert cache.end_offset(e.epoch) == expected.end_offset(e.epoch)


@given(entries_strategy(), st.integers(0, 40))
def test_truncate_suffix_by_epoch(entries, epoch) -> None:
    cache = EpochFileCache(None, entries)
    cache.truncate_suffix_by_epoch(epoch)
    assert cache.entries == [e for e in entries if e.epoch < epoch]


def test_last_end_defaults_to_long_max() -> None:
    cache = EpochFileCache(None, [EpochEntry(1, 0)])
    assert cache.end_offset(1) == MAX_OFFSET
    cache.set_last_end_offset(42)
    assert cache.end_offset(1) == 42
