"""node/failover/epochs.py's decisions, fed answers directly (no node, no sockets): which
master a slave may replicate from, where a divergent log is cut, when a master fences."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from node.failover.epochs import Admit, Cut, EpochView, Refuse, admission, newer_master
from store.epoch_file import EpochEntry, EpochFileCache
from wire.protocol import EpochReply

SEG = 1 << 20


def _answer(epoch: int, entries: list[tuple[int, int]], max_offset: int, **extra) -> EpochReply:
    fields = {"epoch": epoch, "entries": [list(e) for e in entries], "max_offset": max_offset, "broker_id": 0,
              "role": "SYNC_MASTER", "fenced": None, "mapped_file_size_commit_log": SEG, **extra}
    return EpochReply.from_wire(fields)


def _decide(answer, own: list[tuple[int, int]], max_offset: int, newest_seen: int | None = None):
    cache = EpochFileCache(None, [EpochEntry(e, s) for e, s in own])
    seen = cache.last_epoch() if newest_seen is None else newest_seen
    return admission(answer, address="m:1", own=cache, newest_seen=seen, max_offset=max_offset,
                     segment_size=SEG)


def test_a_slave_whose_log_the_master_shares_replicates_and_takes_its_history() -> None:
    got = _decide(_answer(2, [(1, 0), (2, 500)], 900), own=[(1, 0)], max_offset=400)
    assert got == Admit(2, (EpochEntry(1, 0), EpochEntry(2, 500)))


def test_a_tail_the_master_does_not_share_is_cut_at_the_consistent_point() -> None:
    # the old master wrote [500, 700) in epoch 1 after the slave it lost became master at 500
    got = _decide(_answer(2, [(1, 0), (2, 500)], 900), own=[(1, 0)], max_offset=700)
    assert isinstance(got, Cut) and got.offset == 500 and "[500, 700)" in got.reason


def test_no_common_epoch_cuts_everything() -> None:
    got = _decide(_answer(3, [(3, 0)], 100), own=[(1, 0)], max_offset=50)
    assert isinstance(got, Cut) and got.offset == 0


def test_bytes_no_recorded_epoch_vouches_for_are_cut_where_the_master_s_epochs_begin() -> None:
    """The HA bytes carry no epoch: a slave that replicated while its master's term began,
    and lost power before it took that history, holds them under none (storage seed 7566)."""
    got = _decide(_answer(2, [(2, 0)], 9000), own=[], max_offset=3756)
    assert isinstance(got, Cut) and got.offset == 0 and "[0, 3756)" in got.reason
    upgraded = _decide(_answer(1, [(1, 5000)], 9000), own=[], max_offset=3756)  # written before epochs
    assert upgraded == Admit(1, (EpochEntry(1, 5000),))
    assert _decide(_answer(1, [(1, 0)], 9000), own=[], max_offset=0) == Admit(1, (EpochEntry(1, 0),))


def test_masters_that_are_not_the_groups_are_refused() -> None:
    older = _decide(_answer(1, [(1, 0)], 10), own=[(1, 0)], max_offset=0, newest_seen=2)
    assert older == Refuse("its epoch 1 is older than the newest seen, 2", follow_namesrv=True)
    fenced = _decide(_answer(2, [(2, 0)], 10, fenced="fenced: ..."), own=[], max_offset=0)
    assert isinstance(fenced, Refuse) and fenced.follow_namesrv
    slave = _decide(_answer(2, [(2, 0)], 10, role="SLAVE"), own=[], max_offset=0)
    assert isinstance(slave, Refuse) and "SLAVE" in slave.reason


def test_unknown_epochs_replicate_only_while_none_are_in_play() -> None:
    assert _decide(None, own=[], max_offset=0) == Admit(None)  # a RocketMQ 4.x master
    refused = _decide(None, own=[(1, 0)], max_offset=0)
    assert isinstance(refused, Refuse) and not refused.follow_namesrv


def test_another_segment_size_is_refused_before_anything_else() -> None:
    got = _decide(_answer(2, [(2, 0)], 10, mapped_file_size_commit_log=SEG * 2), own=[(1, 0)], max_offset=700)
    assert isinstance(got, Refuse) and got.geometry and "mappedFileSizeCommitLog" in got.reason


@given(st.lists(st.tuples(st.integers(-1, 9), st.sampled_from(["a:1", "b:1", "me:1"])), max_size=6),
       st.integers(-1, 9))
def test_a_master_fences_exactly_when_another_node_has_a_newer_epoch(views, own_epoch) -> None:
    got = newer_master([EpochView(e, a, "test") for e, a in views], own_epoch, {"me:1"})
    newest = max((e for e, _ in views), default=None)
    if got is None:
        assert newest is None or newest <= own_epoch or any(
            e == newest and a == "me:1" for e, a in views)
    else:
        assert got.epoch == newest > own_epoch and got.address != "me:1"


def test_a_master_whose_epoch_is_pending_is_refused_and_the_slave_keeps_its_tail() -> None:
    """Issue 45: a master restarted after an abnormal exit (or an etcd candidate after one)
    answers with `pending`: its log may lack a tail this slave holds, so no cut, no history
    taken, and the slave keeps its configured address (no follow_namesrv)."""
    pending = _decide(_answer(1, [(1, 0)], 0, pending="restarted after an abnormal exit"), own=[(1, 0)],
                      max_offset=7488)
    assert isinstance(pending, Refuse) and not pending.follow_namesrv and "abnormal" in pending.reason


def test_the_new_epoch_at_the_restarted_master_s_end_cuts_the_slave_s_tail_there() -> None:
    # the master lost [2000, 7488) in a power loss and began epoch 2 at 2000: the slave's
    # tail of epoch 1 past 2000 is cut, never kept because the master's end has passed it
    got = _decide(_answer(2, [(1, 0), (2, 2000)], 9000), own=[(1, 0)], max_offset=7488)
    assert isinstance(got, Cut) and got.offset == 2000 and "[2000, 7488)" in got.reason
    everything = _decide(_answer(2, [(2, 0)], 9000), own=[(1, 0)], max_offset=7488)
    assert isinstance(everything, Cut) and everything.offset == 0


@given(st.lists(st.tuples(st.integers(-1, 9), st.sampled_from(["a:1", "b:1", "me:1"]), st.booleans()), max_size=6),
       st.integers(-1, 9))
def test_a_master_that_yields_ties_fences_on_another_master_of_its_epoch(views, own_epoch) -> None:
    got = newer_master([EpochView(e, a, "test", master=m) for e, a, m in views], own_epoch, {"me:1"},
                       yield_ties=True)
    newest = max((e for e, _a, _m in views), default=None)
    if got is None:  # as without ties, a view of its own at the newest epoch may win
        assert newest is None or newest < own_epoch or any(e == newest and a == "me:1" for e, a, _m in views) or (
            newest == own_epoch and not any(e == own_epoch and m and a != "me:1" for e, a, m in views))
    else:
        assert got.address != "me:1" and got.epoch == newest >= own_epoch
        assert got.epoch > own_epoch or got.master
