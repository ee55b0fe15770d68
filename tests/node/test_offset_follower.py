"""node/offset_stream.py's OffsetFollower: a slave takes its master's streamed offsets, and a
master that restarted (its batch sequence starts again, its table is its file's) never
lowers what the slave holds."""

from __future__ import annotations

from functools import partial

import trio

from ha.protocol import OffsetCommit, OffsetsBatch
from node.offset_stream import OffsetFollower
from node.tables.offsets import ConsumerOffsetManager, OffsetEntry


def test_a_table_replaces_then_commits_follow_and_a_restarted_master_lowers_nothing(tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path))
    offsets.commit("G", "T", 9, 1)  # gone once the first table replaces the slave's
    follower = OffsetFollower(offsets)
    follower.take(OffsetsBatch(3, True, (OffsetCommit("G", "T", 0, 5), OffsetCommit("G", "T", 1, 7))))
    assert {(e.queue_id, e.offset) for e in offsets.entries()} == {(0, 5), (1, 7)}
    follower.take(OffsetsBatch(4, False, (OffsetCommit("G", "T", 0, 13),)))
    follower.take(OffsetsBatch(5, False, (OffsetCommit("G", "T", 1, 6),)))  # a commit may go back
    assert offsets.fetch("G", "T", 0) == 13 and offsets.fetch("G", "T", 1) == 6
    # the master restarted: its first table (sequence 1 again) is its file's, older
    follower.take(OffsetsBatch(1, True, (OffsetCommit("G", "T", 0, 9), OffsetCommit("G", "T", 1, 8),
                                          OffsetCommit("G", "T", 2, 4))))
    assert offsets.fetch("G", "T", 0) == 13  # not lowered to the file's 9
    assert offsets.fetch("G", "T", 1) == 8 and offsets.fetch("G", "T", 2) == 4  # raised, added
    follower.take(OffsetsBatch(2, False, (OffsetCommit("G", "T", 0, 10),)))  # its new commits apply
    assert offsets.fetch("G", "T", 0) == 10


def test_a_table_from_another_master_replaces_even_with_a_lower_sequence(tmp_path):
    """A slave that follows a newly promoted master (another address) takes its table whole:
    only the same master's restart makes it a floor (the new master may hold lower offsets,
    e.g. clamped by an unclean promotion, which a floor would undo: consumers would skip)."""
    offsets = ConsumerOffsetManager(str(tmp_path))
    source = ["a:1"]
    follower = OffsetFollower(offsets, lambda: source[0])
    follower.take(OffsetsBatch(9, True, (OffsetCommit("G", "T", 0, 50),)))
    source[0] = "b:1"
    follower.take(OffsetsBatch(2, True, (OffsetCommit("G", "T", 0, 30),)))
    assert offsets.fetch("G", "T", 0) == 30


def test_a_table_flagged_as_the_masters_file_raises_and_lowers_nothing(tmp_path):
    """A master whose table is still its file's (restarted, up to 5 s old) flags it: even a
    slave that restarted itself meanwhile (a new follower, no sequence to compare) keeps
    each higher offset and every queue the table lacks (seed 6025: the table replaced the
    slave's, and the slave, elected next, lacked commits answered OK)."""
    offsets = ConsumerOffsetManager(str(tmp_path))
    offsets.commit("G", "T", 0, 30)
    offsets.commit("G", "T", 9, 3)
    follower = OffsetFollower(offsets, lambda: "a:1")
    follower.take(OffsetsBatch(1, True, (OffsetCommit("G", "T", 0, 12), OffsetCommit("G", "T", 1, 8)), raise_only=True))
    assert {(e.queue_id, e.offset) for e in offsets.entries()} == {(0, 30), (1, 8), (9, 3)}
    follower.take(OffsetsBatch(1, False, (OffsetCommit("G", "T", 1, 6),)))  # a commit since sets
    assert offsets.fetch("G", "T", 1) == 6


def test_a_table_is_the_groups_only_once_taken_whole_from_a_complete_master(tmp_path):
    """`stale_keys`: None once the table came whole from a complete master's stream; until
    then (a process that started from its file, or with none) the keys not committed since,
    which a master sends to raise its slaves' offsets, never to lower them (seed 5292: a
    slave restarted before its first file write was elected and its table, taken for
    complete, replaced the other slave's)."""
    first = ConsumerOffsetManager(str(tmp_path))
    first.commit("G", "T", 0, 5)
    first.commit("G", "T", 1, 7)
    trio.run(partial(first.persist, force=True))
    offsets = ConsumerOffsetManager(str(tmp_path))
    assert offsets.stale_keys() == frozenset()  # no file read yet: nothing, but not complete
    offsets.load()
    assert offsets.stale_keys() == {("G", "T", 0), ("G", "T", 1)}
    offsets.commit("G", "T", 1, 7)  # a commit, even of the same offset, is the group's
    assert offsets.stale_keys() == {("G", "T", 0)}
    offsets.raise_to("G", "T", 2, 9)  # a floor from a table that may be behind: not a commit
    assert offsets.stale_keys() == {("G", "T", 0), ("G", "T", 2)}
    offsets.replace_all([OffsetEntry("G", "T", 0, 1)])  # the 10 s pull: not the group's whole table
    assert offsets.stale_keys() == {("G", "T", 0)}
    OffsetFollower(offsets).take(OffsetsBatch(4, True, (OffsetCommit("G", "T", 0, 3),)))
    assert offsets.stale_keys() is None and offsets.fetch("G", "T", 0) == 3
