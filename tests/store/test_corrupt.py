"""A corrupt sector in a sealed CommitLog segment of a real store (issue 45, `corrupt`): the
damaged record is found by its body CRC, on a read of the running store or at recovery, is
reported with its range (`damaged()`, an ERROR log line naming the offsets), is never served,
and a master keeps every record around it."""

from __future__ import annotations

import logging

import pytest

from store import GetMessageStatus, Message, StoreConfig, open_store
from store.reads import CorruptRecordError
from store.tools import verify

from .test_recovery import SEGMENT, TOPIC, body, make_config, mark_crashed, segment_path

BODY_AT = 88  # IPv4 hosts: a record's body starts 88 bytes in


class Clock:
    """A store clock that moves 0.1 s per message put, so early records are stored long before
    the checkpoint's safe time (a crash's recovery trusts the CRC of nothing stored later)."""

    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        return self.now


async def write_messages(config: StoreConfig, count: int, clock: Clock) -> list[tuple[int, int, str]]:
    placed = []
    async with open_store(config, clock=clock) as store:
        for i in range(count):
            clock.now += 0.1
            r = await store.put_message(Message(TOPIC, body(i), queue_id=i % 2, keys=[f"key-{i}"]))
            assert r.ok, r.error
            placed.append((r.commitlog_offset, store.look_message_by_offset(r.commitlog_offset).size, r.msg_id))
    return placed


def flip_sector_bits(config: StoreConfig, offset: int) -> None:
    """Flip three bits of the 512-byte sector holding the start of the body of the record at `offset`."""
    path = segment_path(config, offset)
    pos = offset % SEGMENT + BODY_AT
    with open(path, "r+b") as f:
        f.seek(pos)
        data = bytearray(f.read(8))
        data[0] ^= 0x01
        data[3] ^= 0x40
        data[7] ^= 0x08
        f.seek(pos)
        f.write(data)


def victim_in_a_sealed_segment(placed: list[tuple[int, int, str]]) -> int:
    """An index of `placed` whose record lies in a segment before the last."""
    last_segment = placed[-1][0] // SEGMENT
    index = next(i for i, (off, _size, _id) in enumerate(placed) if off // SEGMENT == last_segment - 1)
    return index + 5


def read_queue(store, qid: int, until: int) -> tuple[list[bytes], CorruptRecordError | None, int]:
    """Pull queue `qid` from 0 until an error or `until`: the bodies, the error, where it stopped."""
    got: list[bytes] = []
    offset = 0
    while offset < until:
        try:
            res = store.get_message("g", TOPIC, qid, offset, 32)
        except CorruptRecordError as e:
            return got, e, offset
        assert res.status is GetMessageStatus.FOUND
        got += [m.body for m in res.messages]
        offset = res.next_begin_offset
    return got, None, offset


def check_served(store, placed: list[tuple[int, int, str]], victim: int) -> list[dict]:
    """Every record of the victim's queue before it served intact, then an error naming its
    range (never its bytes), every record after it still served; returns `damaged()`."""
    offset, size, msg_id = placed[victim]
    qid, expected = victim % 2, [i for i in range(len(placed)) if i % 2 == victim % 2]
    assert store.get_max_phy_offset() == placed[-1][0] + placed[-1][1]  # a master cut nothing
    bodies, error, stopped = read_queue(store, qid, len(expected))
    assert bodies == [body(i) for i in expected[:stopped]]
    assert expected[stopped] == victim
    assert error is not None and f"[{offset}, {offset + size})" in str(error)
    assert store.look_message_by_msg_id(msg_id) is None
    assert store.message_bytes(offset) is None
    res = store.get_message("g", TOPIC, qid, stopped + 1, 1000)
    assert [m.body for m in res.messages] == [body(i) for i in expected[stopped + 1:]]
    assert store.look_message_by_msg_id(placed[victim + 1][2]).body == body(victim + 1)
    damaged = store.damaged()
    assert [(d["start"], d["end"]) for d in damaged] == [(offset, offset + size)]
    return damaged


@pytest.mark.parametrize("when", ["running", "clean-exit", "crash"])
async def test_a_flipped_sector_is_found_reported_and_never_served(tmp_path, caplog, when):
    """`running`: the store's maps see the disk's flipped bits and a pull finds them;
    `clean-exit`: the next start's recovery finds them (it validates the last three segments)
    and keeps the log whole on a master; `crash`: recovery validates from the segment the
    checkpoint names, after the victim's, so a pull finds them."""
    config = make_config(tmp_path / "store")
    clock = Clock()
    placed = await write_messages(config, 300, clock)
    victim = victim_in_a_sealed_segment(placed)
    offset, size, _ = placed[victim]
    caplog.set_level(logging.INFO, logger="tidemq.store")
    if when == "running":
        async with open_store(config, clock=clock) as store:
            flip_sector_bits(config, offset)
            assert store.damaged() == []
            assert check_served(store, placed, victim)[0]["found_by"] == "read"
    else:
        flip_sector_bits(config, offset)
        if when == "crash":
            mark_crashed(config)
        async with open_store(config, clock=clock) as store:
            found_by = "recovery" if when == "clean-exit" else "read"
            assert check_served(store, placed, victim)[0]["found_by"] == found_by
    assert f"CommitLog damaged: the record at [{offset}, {offset + size})" in caplog.text
    summary = verify(config.store_path_root_dir)
    assert summary["badCrcs"] == 1 and summary["damage"][0]["offset"] == offset


async def test_a_crash_keeps_a_durable_damaged_record_and_cuts_at_a_recent_one(tmp_path, caplog):
    """Abnormal recovery validates the last segment: a record there stored before the
    checkpoint's safe time was durable, so a bad CRC is damage (kept, reported), and so is
    one a good record follows (the writes went on past it); the last record, stored after the
    safe time with nothing after it, may be a torn write, so the log ends before it (as before)."""
    config = make_config(tmp_path / "store")
    clock = Clock()
    placed = await write_messages(config, 300, clock)
    last_segment = [i for i, (off, _s, _id) in enumerate(placed) if off // SEGMENT == placed[-1][0] // SEGMENT]
    old, recent = last_segment[1], len(placed) - 1  # stored 3+ s before the last put / the last put
    flip_sector_bits(config, placed[old][0])
    mark_crashed(config)
    async with open_store(config, clock=clock) as store:
        assert store.damaged()[0]["found_by"] == "recovery"
        check_served(store, placed, old)
    followed = len(placed) - 3  # stored 0.2 s before the last put, two good records after it
    flip_sector_bits(config, placed[followed][0])
    flip_sector_bits(config, placed[recent][0])
    mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    async with open_store(config, clock=clock) as store:
        assert store.get_max_phy_offset() == placed[recent][0]
        assert [(d["start"], d["end"]) for d in store.damaged()] == [
            (placed[i][0], placed[i][0] + placed[i][1]) for i in (old, followed)]
    assert f"invalid record at offset {placed[recent][0]}" in caplog.text
