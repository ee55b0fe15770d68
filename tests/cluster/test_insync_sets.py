"""cluster/client/insync.py: a group's in-sync set by client address, joined from the
master's HA rows and each slave's own end of its HA connection."""

from __future__ import annotations

from cluster.client.insync import InSyncSet, in_sync_sets
from wire.protocol import StatusReply, WireHAClient, WireHASlave, WireHAView


def node(address: str, role: str, *, epoch: int = 1, slaves: list[WireHASlave] | None = None,
         local: str | None = None, fenced: str | None = None) -> StatusReply:
    ha = WireHAView(slaves=slaves) if slaves is not None else WireHAView(client=WireHAClient(local_address=local))
    return StatusReply(broker_name="broker-a", address=address, role=role, epoch=epoch, ha=ha, fenced=fenced,
                       confirm_offset=100 if slaves is not None else None)


def test_the_set_names_slaves_by_client_address_and_shows_an_unclaimed_connection_as_ha():
    rows = [WireHASlave(address="h:1", in_sync=True), WireHASlave(address="h:2", in_sync=False),
            WireHASlave(address="h:3", in_sync=True)]
    sets = in_sync_sets([node("m:1", "SYNC_MASTER", slaves=rows), node("s:1", "SLAVE", local="h:1"),
                         node("s:2", "SLAVE", local="h:2")])
    assert sets == {"broker-a": InSyncSet("broker-a", "m:1", ("ha:h:3", "s:1"), ("s:2",), 100)}
    sync = sets["broker-a"]
    assert sync.has("m:1") and sync.has("s:1") and not sync.has("s:2")
    assert sync.line() == "in-sync set: m:1, ha:h:3, s:1; out of it: s:2; confirm offset 100"


def test_a_fenced_or_older_master_does_not_stand_for_the_group():
    sets = in_sync_sets([node("old:1", "SYNC_MASTER", epoch=1, slaves=[]),
                         node("new:1", "SYNC_MASTER", epoch=2, slaves=[]),
                         node("gone:1", "SYNC_MASTER", epoch=3, slaves=[], fenced="epoch 4 is newer")])
    assert sets["broker-a"].master == "new:1"
    assert sets["broker-a"].line() == "in-sync set: new:1 (the master alone); confirm offset 100"
