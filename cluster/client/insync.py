"""Each group's in-sync set by name, from its nodes' `status` answers.

A master lists its slaves by their HA connection (`ha.slaves[].address`, `in_sync`: the
4.x HA wire names no slave); a slave says which connection is its own
(`ha.local_address`). Joined, the set reads as client addresses, in manual mode as in etcd
mode (docs/failover.md). A connection no slave claims (a proxy or NAT on the HA link) is
shown as `ha:<address>`.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from wire.protocol import StatusReply

__all__ = ["InSyncSet", "in_sync_sets"]


@attrs.frozen
class InSyncSet:
    """One group's in-sync set as its master judges it."""

    group: str
    master: str
    members: tuple[str, ...]
    """The slaves in the set (client addresses); the master is always in it."""
    outside: tuple[str, ...]
    """Connected slaves that are not (too far behind, or silent)."""
    confirm_offset: int | None

    def has(self, address: str) -> bool:
        return address == self.master or address in self.members

    def to_json(self) -> dict[str, object]:
        return {"master": self.master, "in_sync": list(self.members), "outside": list(self.outside),
                "confirm_offset": self.confirm_offset}

    def line(self) -> str:
        out = f"in-sync set: {', '.join([self.master, *self.members])}"
        if not self.members:
            out += " (the master alone)"
        if self.outside:
            out += f"; out of it: {', '.join(self.outside)}"
        return out + f"; confirm offset {'-' if self.confirm_offset is None else self.confirm_offset}"


def in_sync_sets(answers: Iterable[StatusReply]) -> dict[str, InSyncSet]:
    """group → its set, for every group whose master answered."""
    answers = [a for a in answers if a.broker_name and a.address]
    by_ha = {a.ha.client.local_address: a.address for a in answers
             if a.ha.client is not None and a.ha.client.local_address}
    sets: dict[str, InSyncSet] = {}
    epochs: dict[str, int] = {}

    def name(ha: str) -> str:
        return by_ha.get(ha) or f"ha:{ha}"

    for a in answers:
        if a.role in (None, "SLAVE", "NAMESRV") or a.ha.slaves is None or a.fenced:
            continue
        assert a.broker_name is not None and a.address is not None
        epoch = a.epoch if a.epoch is not None else -1
        if epochs.get(a.broker_name, -2) >= epoch:
            continue  # two masters (one not yet fenced): the newer epoch's set
        epochs[a.broker_name] = epoch
        sets[a.broker_name] = InSyncSet(
            a.broker_name, a.address,
            tuple(sorted(name(s.address) for s in a.ha.slaves if s.in_sync)),
            tuple(sorted(name(s.address) for s in a.ha.slaves if not s.in_sync)),
            a.confirm_offset)
    return sets
