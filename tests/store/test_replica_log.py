"""store/replica_log.py: the CommitLog as replication sees it. A follower's log takes only
bytes that continue it; an empty one starts at a segment boundary and drops empty
segments first; a refused append changes nothing. Real files, a real store."""

from __future__ import annotations

import os

import pytest
import trio

from store import Message, MessageStore, StoreConfig
from store.record_codec import prepare_record
from store.replica_log import BACKLOG_WINDOW_S, FollowerAppendError

SEGMENT = 64 * 1024


def _loaded(root) -> MessageStore:
    store = MessageStore(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT))
    store.load()
    return store


def _leader_bytes(root, n: int) -> bytes:
    """What a leader ships: the records of `n` puts, as its CommitLog holds them."""
    store = _loaded(root)
    try:
        for i in range(n):
            msg = Message("T", f"m{i}".encode() * 10)
            rec = prepare_record(msg, store.config.store_host, store.config.max_message_size)
            store.commit_log.append_messages([rec], msg.topic, msg.queue_id)
        selected = store.replica_log.read(0)
        with selected:
            return bytes(selected.view)
    finally:
        store.close()


def test_a_follower_appends_what_continues_its_log_and_nothing_else(tmp_path):
    data = _leader_bytes(tmp_path / "leader", 5)
    follower = _loaded(tmp_path / "follower")
    log = follower.replica_log
    try:
        assert log.end() == 0 and log.start() == -1
        assert log.append_as_follower(0, data[:100]) == []
        with pytest.raises(FollowerAppendError, match="does not continue the slave's log at 100"):
            log.append_as_follower(50, data[50:])
        assert log.end() == 100  # the refused append changed nothing
        log.append_as_follower(100, data[100:])
        assert log.end() == len(data)
        with log.read(0) as selected:
            assert bytes(selected.view) == data
    finally:
        follower.close()


def test_an_empty_follower_starts_at_a_segment_boundary_dropping_empty_segments(tmp_path):
    follower = _loaded(tmp_path / "follower")
    log = follower.replica_log
    try:
        follower.commit_log.queue.get_last_mapped_file(0)  # a crash left an empty segment 0
        first = follower.commit_log.queue.last().path
        with pytest.raises(FollowerAppendError, match="only start at a segment boundary"):
            log.append_as_follower(SEGMENT + 8, b"x" * 8)
        assert not os.path.exists(first)  # dropped: an empty log holds nothing to keep
        assert log.append_as_follower(3 * SEGMENT, b"") == []  # a heartbeat appends nothing
        log.append_as_follower(3 * SEGMENT, b"y" * 16)
        assert (log.start(), log.end()) == (3 * SEGMENT, 3 * SEGMENT + 16)
        assert log.segment_start(log.end()) == 3 * SEGMENT
    finally:
        follower.close()


async def test_a_backlog_lasts_while_reads_come_in_full_then_dispatch_goes_at_full_speed(tmp_path, autojump_clock):
    """The follower's full reads hold dispatch back (the copy goes first); a window after the
    last full read it no longer does (a caught-up slave dispatches at once)."""
    store = _loaded(tmp_path / "follower")
    log = store.replica_log
    try:
        assert not log.follower_backlog and not store.reput.follower_backlog()
        log.note_full_read()
        assert log.follower_backlog and store.reput.follower_backlog()
        await trio.sleep(BACKLOG_WINDOW_S / 2)  # poll-exempt: the backlog is a time window
        log.note_full_read()  # another full read: still behind
        await trio.sleep(BACKLOG_WINDOW_S * 0.75)  # poll-exempt: inside the window
        assert log.follower_backlog
        await trio.sleep(BACKLOG_WINDOW_S)  # poll-exempt: past the window
        assert not log.follower_backlog and not store.reput.follower_backlog()
    finally:
        store.close()
