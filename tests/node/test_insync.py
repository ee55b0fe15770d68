"""node/failover/insync.py: when a manual promotion goes ahead without `unclean` (issue 42,
item 2), each case of the decision without processes (tests/cluster/test_promote_insync.py
runs them with real nodes)."""

from __future__ import annotations

from node.failover.insync import MasterView, assess
from wire.protocol import StatusReply, WireHASlave, WireHAView, WirePromoteCheck

SLAVE, HA, MASTER = "127.0.0.1:2001", "127.0.0.1:50001", "127.0.0.1:1001"


def master(end: int, confirm: int | None, *, slaves: tuple[str, ...] = (HA,),
           in_sync: tuple[str, ...] = (HA,)) -> MasterView:
    return MasterView("127.0.0.1:1001", end, confirm, slaves, in_sync)


def verdict(end: int, confirm: int | None, ha_local: str | None, view: MasterView | None, *,
            whole_end: int | None = None, asked: bool = True, caught_up_s: float | None = 1.0) -> WirePromoteCheck:
    """The check of SLAVE, whose master is MASTER (`view`: its answer, None: none), that
    last caught up with it `caught_up_s` ago (haMaxTimeSlaveNotCatchup 15 s)."""
    return assess(SLAVE, end=end, whole_end=end if whole_end is None else whole_end, known_confirm=confirm,
                  ha_local=ha_local, master=view, master_address=MASTER, asked=asked, caught_up_s=caught_up_s,
                  max_silence_s=15.0)


def test_an_in_sync_slave_holding_the_confirm_offset_is_clean_and_drops_only_the_unconfirmed_tail():
    check = verdict(900, 800, HA, master(1000, 900))
    assert check.clean and check.in_set is True and check.master_reachable
    assert (check.confirm_offset, check.drop_from, check.drop_to) == (900, 900, 1000)  # ASYNC's tail, never shown
    assert "in the in-sync set" in check.reason


def test_a_slave_the_master_names_outside_its_set_is_refused_naming_offsets_and_set():
    check = verdict(500, 500, HA, master(1000, 1000, slaves=(HA, "127.0.0.1:50002"), in_sync=("127.0.0.1:50002",)))
    assert not check.clean and check.in_set is False and check.in_sync == ["127.0.0.1:50002"]
    assert check.reason == (
        f"{SLAVE} (HA connection {HA}) is not in the in-sync set: its CommitLog ends at 500, the confirm offset "
        "is 1000 (master 127.0.0.1:1001 at offset 1000, in-sync set: 127.0.0.1:50002); promoting it drops "
        "CommitLog [500, 1000)")


def test_a_silent_slave_out_of_the_set_that_holds_the_whole_log_loses_nothing():
    check = verdict(1000, 1000, HA, master(1000, 1000, in_sync=()))
    assert check.clean and check.in_set is False and check.drop_to == 1000


def test_an_unnamed_slave_is_judged_by_the_master_s_confirm_offset():
    behind = verdict(500, 400, "127.0.0.1:60000", master(1000, 1000, in_sync=()))
    assert not behind.clean and behind.in_set is None and behind.confirm_offset == 1000
    assert "is behind the confirm offset: its CommitLog ends at 500, the confirm offset is 1000" in behind.reason
    assert "in-sync set: the master alone" in behind.reason
    holding = verdict(1000, 400, "127.0.0.1:60000", master(1000, 1000, in_sync=()))
    assert holding.clean and "judged by offsets" in holding.reason


def test_with_the_master_gone_the_confirm_offset_the_slave_learned_decides():
    clean = verdict(700, 700, None, None)
    assert clean.clean and not clean.master_reachable and clean.in_set is None and clean.drop_to == 700
    refused = verdict(700, 900, None, None)
    assert not refused.clean and (refused.drop_from, refused.drop_to) == (700, 900)
    assert "master 127.0.0.1:1001 unreachable: the confirm offset is the last this slave learned" in refused.reason
    unasked = verdict(700, 900, HA, None, asked=False)  # unclean: not waited for
    assert "master 127.0.0.1:1001 not asked (unclean)" in unasked.reason and not unasked.clean
    never = verdict(700, None, None, None)  # a RocketMQ 4.x master sends none
    assert never.clean and never.confirm_offset is None and "unknown" in never.reason


def test_with_the_master_gone_a_slave_that_has_not_caught_up_lately_is_refused():
    """Its master drops it from the set haMaxTimeSlaveNotCatchup after it last caught up and
    may confirm alone from then on; the slave, cut off, would not learn it (seed 1442)."""
    assert verdict(700, 700, None, None, caught_up_s=12.9).clean  # within 15 s less the 2 s margin
    stale = verdict(700, 700, None, None, caught_up_s=13.5)
    assert not stale.clean and "last caught up with its master 13.5 s ago" in stale.reason
    assert "haMaxTimeSlaveNotCatchup" in stale.reason and stale.reason.endswith("drops CommitLog [700, 700)")
    never = verdict(700, 700, None, None, caught_up_s=None)
    assert not never.clean and "last caught up with its master never" in never.reason
    assert verdict(700, 700, HA, master(700, 700), caught_up_s=None).clean  # the master answers: it decides
    assert verdict(700, None, None, None, caught_up_s=None).clean  # a RocketMQ 4.x master promises nothing
    # unless its log is in doubt: a power loss may have taken the checkpoint that kept one
    # (storage seed 4438)
    doubt = assess(SLAVE, end=0, whole_end=0, known_confirm=None, ha_local=None, master=None,
                   master_address=MASTER, caught_up_s=None, in_doubt=True)
    assert not doubt.clean and "last caught up with its master never" in doubt.reason


def test_a_partial_record_at_the_slave_s_end_is_dropped_too():
    check = verdict(800, 900, None, None, whole_end=600)
    assert (check.max_offset, check.drop_from, check.drop_to) == (800, 600, 900)
    assert check.reason.endswith("promoting it drops CommitLog [600, 900)")


def test_a_master_view_reads_the_in_sync_rows_of_its_status():
    rows = [WireHASlave(address=HA, in_sync=True), WireHASlave(address="127.0.0.1:50002", in_sync=False)]
    view = MasterView.of("127.0.0.1:1001", StatusReply(max_phy_offset=5, confirm_offset=4, ha=WireHAView(slaves=rows)))
    assert view == MasterView("127.0.0.1:1001", 5, 4, (HA, "127.0.0.1:50002"), (HA,))


def test_a_master_restarted_after_an_abnormal_exit_counts_its_recovered_log_as_confirmed():
    """Storage seed 1104: after a group power loss the master knew confirm offset 0 (its
    checkpoint was gone) though it had acknowledged [0, 3786) before; a slave that had lost
    everything passed as clean and its promotion cut those PUT_OK messages."""
    status = StatusReply(max_phy_offset=6573, confirm_offset=0, acked_floor=3786)
    view = MasterView.of(MASTER, status)
    assert view.confirm_offset == 3786
    check = verdict(0, None, None, view)
    assert not check.clean and "behind the confirm offset" in check.reason
    assert MasterView.of(MASTER, StatusReply(max_phy_offset=9, confirm_offset=9, acked_floor=4)).confirm_offset == 9
    assert MasterView.of(MASTER, StatusReply(max_phy_offset=9, confirm_offset=None)).confirm_offset is None
