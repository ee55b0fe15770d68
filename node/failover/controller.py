"""Automatic failover on etcd (controllerMode = "etcd"): leases elect each group's master.

Keys, under `/tidemq/<brokerClusterName>/<brokerName>/`:

- `master`: the leadership key, held under the holder's lease (TTL controllerLeaseMs, kept
  alive every third of it). Its value names the holder (client and HA address, role) and
  its epoch.
- `epoch`: a counter bumped in the same transaction that takes `master` (compare: `master`
  absent and `epoch` unchanged since read), so no two masters ever share an epoch and
  every new one is newer than any this node has seen.
- `syncStateSet`: RocketMQ 5's SyncStateSet, written only by the holder (compare: `master`
  is under its lease): the slaves within haMaxGapNotInSync bytes that acknowledged within
  haMaxTimeSlaveNotCatchup. Only the master it names and its members may campaign; before
  any set exists only a node serving as master does.
- `replicas/<address>`: each slave's HA connection address as the master sees it (under
  the slave's lease), so the master can name its in-sync slaves by client address.

Each node runs one `EtcdController` across its terms. It ticks every third of the TTL (renew,
read the keys, decide) and sooner when its /v3/watch on the group's keys sees the
leadership key change (a released key is taken at once), when its HA client connects
(a slave names its connection at once) and, on the holder, when a slave named one. The holder writes only while
`trio.current_time()` is before its lease deadline (the time it *sent* the last successful
keep-alive plus the TTL: never later than etcd's own expiry), checked before and after every
put. A winner that serves as slave promotes itself through `Failover.promote` (what `tidemq
admin promote` runs) with the epoch from etcd; a master that finds another holder fences
and rejoins as a slave (Failover's rejoin, truncation included); slaves re-point their HA
client and topic sync to the holder.

In a SYNC_MASTER group a put waits for every member's ack (RocketMQ 5's
allAckInSyncStateSet), so whichever member wins holds every PUT_OK message: a slave joins
the set only once it acked every offset answered PUT_OK, a member that does not ack in
time is removed before the put is answered (it is acknowledged if another slave holds
it), and before a write that cannot wait for any slave (answered SLAVE_NOT_AVAILABLE) all
members are. A winner's term starts with a set of itself alone, written in the election
transaction.

While etcd is unreachable a SYNC_MASTER that held the key keeps writing past its lease
deadline (`riding_out_outage`), answering PUT_OK only for writes every in-sync member acked
and refusing at once while a member is not connected (the set cannot shrink without etcd).
No PUT_OK can be lost that way: a new master needs etcd and comes from the set, and a slave
leaves its master before it campaigns (`_stop_acking`), so the old master stops
acknowledging before any member can win, and the winner holds every PUT_OK message. An
ASYNC_MASTER stops at its lease deadline.
"""

from __future__ import annotations

import collections
import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from store import runtime
from store.config import BrokerRole
from wire.protocol import Status

from ..config import BrokerConfig
from ..ops.services import OpError
from ..tables.changes import Changes
from .election import (
    Step,
    awaits_unknown,
    eligible,
    hand_over_to,
    longer_logs,
    riding_out_outage,
    step,
    write_refusal,
)
from .etcd import (
    EtcdClient,
    EtcdError,
    KeyValue,
    WatchEvent,
    cmp_absent,
    cmp_lease,
    cmp_mod_revision,
    op_get,
    op_get_prefix,
    op_put,
    parse_endpoints,
)

if TYPE_CHECKING:
    from .promotion import Failover

log = logging.getLogger("tidemq.node")

__all__ = ["EtcdController", "key_prefix"]

REVOKE_TIMEOUT_S = 1.0
DEFER_LEASES = 2
"""Leases a member of the set leaves the election to members whose logs are longer (`_defers`)."""
UNNAMED_TICKS = 3
"""In-sync checks an HA connection may stay unnamed before it is reported."""


def key_prefix(cluster: str, broker_name: str) -> str:
    return f"/tidemq/{cluster}/{broker_name}/"


def _json(kv: KeyValue | None) -> dict[str, Any] | None:
    if kv is None:
        return None
    try:
        value = kv.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class EtcdController:
    """One node's side of the election; see the module docstring."""

    def __init__(self, cfg: BrokerConfig, failover: Failover, *,
                 etcd: Callable[[list[str], float], EtcdClient] | None = None) -> None:
        """`etcd`: how to reach etcd, (endpoints, timeout) → a client; default `EtcdClient`
        over HTTP (the simulation passes its in-memory etcd behind the simulated network)."""
        assert cfg.etcd_endpoints is not None
        self.failover = failover
        self.elections: dict[str, int] = {}
        """Campaigns this node ran in this process, by result: "won", "lost" (another node, or
        a moved epoch counter, got there first): rocketmq_failover_elections_total."""
        prefix = key_prefix(cfg.broker_cluster_name, cfg.broker_name)
        self.key_master, self.key_epoch = prefix + "master", prefix + "epoch"
        self.key_sync, self.replicas_prefix = prefix + "syncStateSet", prefix + "replicas/"
        self.ends_prefix = prefix + "ends/"
        self.ttl_s = cfg.controller_lease_ms // 1000
        self.interval_s = cfg.controller_lease_ms / 3000
        self.endpoints = parse_endpoints(cfg.etcd_endpoints)
        timeout_s = min(1.0, self.interval_s)
        self.etcd = etcd(self.endpoints, timeout_s) if etcd is not None else EtcdClient(self.endpoints,
                                                                                       timeout_s=timeout_s)
        self.lease = 0
        self.lease_deadline = -math.inf
        self.leading = False
        self.leader: dict[str, Any] | None = None
        self.sync_set: dict[str, Any] | None = None
        self.reachable: bool | None = None
        self.last_error: str | None = None
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self.changes = Changes()
        """Bumped when the lease holder or the in-sync set changes (the node registers
        again, so routes show it at once)."""
        self.watching = False
        """True while the /v3/watch stream on the group's keys is open."""
        self.watch_events = 0
        """Changes of the leadership key the watch delivered."""
        self._wake = trio.Event()
        self._published_replica: str | None = None
        self._publish_lock = trio.Lock()
        self._unnamed: dict[str, int] = {}
        self._ends: dict[str, int] = {}
        """Client address → CommitLog end each node published under `ends/` (each tick)."""
        self._logs: dict[str, tuple[int, int]] = {}
        """Client address → (last epoch, CommitLog end) for the nodes that published both."""
        self._published_end: tuple[int, int] | None = None
        self._vacant_since: float | None = None
        """When this node first found the leadership key vacant (None: it is held)."""
        self._deferred_since: float | None = None
        """The vacancy whose deferral was reported (`_defers`)."""
        self._granted_at = -math.inf
        """When this node's current lease was granted: the others' `ends/` entries, gone with
        their leases when etcd was out of reach, come back within a lease of it."""
        self._replicas: dict[str, str] = {}
        """HA connection address → client address, from the `replicas/` entries (each tick)."""

    @property
    def cfg(self) -> BrokerConfig:
        return self.failover.cfg  # the role served changes across terms

    def _event(self, text: str, *args: Any) -> None:
        message = text % args if args else text
        log.warning("controller: %s", message)
        self.events.append({"at_ms": int(runtime.wall_clock() * 1000), "event": message})

    # ---- the write path (cheap: a flag and a monotonic compare) ------------------------------
    @property
    def riding_out_outage(self) -> bool:
        """etcd is unreachable and this SYNC_MASTER held the leadership when it last reached
        it: it keeps writing while every in-sync member acks each write (the module
        docstring says why no PUT_OK can be lost that way)."""
        return riding_out_outage(leading=self.leading, reachable=self.reachable,
                                 fenced=self.failover.fenced is not None, role=self.cfg.role)

    def check_write(self) -> None:
        """Raise OpError (SERVICE_NOT_AVAILABLE) unless this node holds a live lease, or
        rides out an etcd outage (`riding_out_outage`)."""
        refusal = write_refusal(trio.current_time(), leading=self.leading, lease_deadline=self.lease_deadline,
                                holder=(self.leader or {}).get("address"), address=self.cfg.address,
                                broker_name=self.cfg.broker_name, last_error=self.last_error,
                                riding_out=self.riding_out_outage)
        if refusal is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, refusal)

    async def before_write(self) -> None:
        """check_write, and in a SYNC_MASTER group shrink the in-sync set first when the
        write cannot wait for a slave (it will answer SLAVE_NOT_AVAILABLE)."""
        self.check_write()
        services = self.failover.term.services
        members = (self.sync_set or {}).get("in_sync")
        if self.cfg.role is not BrokerRole.SYNC_MASTER or not members or services is None:
            return
        ha = services.ha_master
        if self.riding_out_outage:  # the set cannot shrink: a member gone means no PUT_OK
            missing = ha.missing_members() if ha is not None else sorted(members)
            if missing:
                raise OpError(Status.SERVICE_NOT_AVAILABLE,
                              f"etcd is unreachable ({self.last_error}) and in-sync slave(s) "
                              f"{', '.join(missing)} of {self.cfg.broker_name} are not connected: "
                              "no write can be acknowledged by every member until one is back")
            return
        if ha is not None and ha.is_slave_ok(services.store.get_max_phy_offset() + 1):
            return
        await self._shrink_alone(Status.SERVICE_NOT_AVAILABLE, "no slave to acknowledge")
        self.check_write()

    async def before_unreplicated_answer(self) -> None:
        """A write admitted while a slave was connected came back SLAVE_NOT_AVAILABLE (the
        slave left in between): shrink the set as `before_write` would have, before the
        answer; raise OpError (INDETERMINATE) when it cannot shrink."""
        if self.cfg.role is not BrokerRole.SYNC_MASTER or not (self.sync_set or {}).get("in_sync"):
            return
        if self.riding_out_outage:
            raise OpError(Status.INDETERMINATE, f"stored on the master only, and etcd is unreachable "
                          f"({self.last_error}): the in-sync set cannot be shrunk")
        await self._shrink_alone(Status.INDETERMINATE, "stored on the master only")

    async def _shrink_alone(self, status: Status, what: str) -> None:
        """Publish a set of the master alone; raise OpError(status) when etcd refuses."""
        try:
            await self._publish_sync(shrink=True)
        except EtcdError as e:
            raise OpError(status, f"{what} and the in-sync set cannot be shrunk: {e}") from None

    # ---- the loop ----------------------------------------------------------------------------
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Tick every third of the lease TTL until cancelled; a held lease is revoked at the
        end (a clean stop hands leadership over at once)."""
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_loop)
                while True:
                    await self.tick()
                    with trio.move_on_after(self.interval_s):
                        await self._wake.wait()
                    self._wake = trio.Event()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(REVOKE_TIMEOUT_S):
                if self.lease and not runtime.killed():  # a SIGKILL leaves the lease to expire
                    try:
                        await self.etcd.revoke(self.lease)
                        log.info("controller: lease revoked (leadership released)")
                    except EtcdError as e:
                        log.warning("controller: cannot revoke the lease: %s", e)
                await self.etcd.aclose()

    async def _watch_loop(self) -> None:
        """Watch the group's keys through /v3/watch, so a released or expired leadership key
        starts a campaign (and a new holder is followed) at once rather than at the next
        tick; the ticks still poll, so a broken watch only costs speed. It is re-opened a
        tick interval after it ends or fails."""
        prefix = key_prefix(self.cfg.broker_cluster_name, self.cfg.broker_name)
        while True:
            try:
                await self.etcd.watch(prefix, self._on_watch, on_created=self._on_watch_created)
            except EtcdError as e:
                if self.watching:
                    log.info("controller: the etcd watch ended (%s); ticks continue", e)
            self.watching = False
            await runtime.sleep(self.interval_s)

    def _on_watch_created(self) -> None:
        self.watching = True

    def wake(self) -> None:
        """Tick now (a slave's HA client connected: publish which connection is its own)."""
        self._wake.set()

    def _on_watch(self, events: list[WatchEvent]) -> None:
        for event in events:
            if event.kv.key.startswith(self.replicas_prefix) and event.type == "PUT" and self.leading:
                self._wake.set()  # a slave named its connection: it may join the set now
                continue
            if event.kv.key != self.key_master:
                continue
            self.watch_events += 1
            if event.type == "DELETE":
                holder = (_json(event.prev) or {}).get("address") if event.prev else None
                if holder != self.cfg.address:
                    self._event("etcd watch: the leadership key of %s is gone (holder %s): released or expired",
                                self.cfg.broker_name, holder or "unknown")
            self._wake.set()

    async def tick(self) -> None:
        view = self.route_view()
        try:
            await self._tick()
        finally:
            if self.route_view() != view:
                self.changes.bump()

    async def _tick(self) -> None:
        try:
            await self._renew()
            result = await self.etcd.txn([], [op_get(self.key_master), op_get(self.key_sync),
                                              op_get(self.key_epoch), op_get_prefix(self.replicas_prefix),
                                              op_get_prefix(self.ends_prefix)], [])
            *keys, replicas, ends = result.ranges
            master_kv, sync_kv, epoch_kv = (r[0] if r else None for r in keys)
            self.sync_set = _json(sync_kv)
            self._replicas = {r["ha_local"]: r["address"] for r in map(_json, replicas)
                              if r and isinstance(r.get("ha_local"), str) and isinstance(r.get("address"), str)}
            self._ends = {e["address"]: e["max_offset"] for e in map(_json, ends)
                          if e and isinstance(e.get("address"), str) and type(e.get("max_offset")) is int}
            self._logs = {e["address"]: (e["epoch"], e["max_offset"]) for e in map(_json, ends)
                          if e and e.get("address") in self._ends and type(e.get("epoch")) is int}
            await self._decide(master_kv, epoch_kv)
            await self._publish_replica()
            await self._publish_end()
        except EtcdError as e:
            self.last_error = f"etcd unreachable: {e}"
            if self.reachable is not False:
                self._event("etcd unreachable (%s); %s", e, "writes stop at the lease deadline"
                            if self.leading else "keeping the current role")
            self.reachable = False
            return
        if self.reachable is False:
            self._event("etcd reachable again")
        self.reachable, self.last_error = True, None

    async def _renew(self) -> None:
        sent = trio.current_time()
        if self.lease:
            ttl = await self.etcd.keepalive(self.lease)
            if ttl > 0:
                self.lease_deadline = sent + ttl
                return
            self._event("lease %x expired%s", self.lease, " (leadership lost)" if self.leading else "")
            self.lease, self.leading = 0, False
        self.lease = await self.etcd.grant(self.ttl_s)
        self.lease_deadline = sent + self.ttl_s
        self._granted_at = sent
        self._published_replica = None
        self._published_end = None

    async def _decide(self, master_kv: KeyValue | None, epoch_kv: KeyValue | None) -> None:
        """What this tick does is election.step's decision; the state it read is kept here."""
        failover = self.failover
        if master_kv is not None:
            self._vacant_since = None
        if master_kv is None:
            if self.leading:
                self._event("the leadership key is gone (lease %x)", self.lease)
            self.leader, self.leading = None, False
        else:
            self.leader, self.leading = _json(master_kv) or {}, master_kv.lease == self.lease
        may_campaign = master_kv is None and eligible(
            self.sync_set, address=self.cfg.address, is_master=self.cfg.role.is_master,
            fenced=failover.fenced is not None) and not self._defers()
        action = step(None if master_kv is None else master_kv.lease, self.lease,
                      busy=failover.transition is not None or failover.term.services is None,
                      may_campaign=may_campaign, is_master=self.cfg.role.is_master)
        if action is Step.CAMPAIGN:
            self._stop_acking()
            target = self._more_up_to_date()
            if target is not None:
                await self._hand_over(target, epoch_kv)
            else:
                await self._campaign(epoch_kv)
        elif action is Step.PUBLISH:
            await self._publish_sync()
        elif action is Step.FOLLOW:
            await self._follow(self.leader or {})

    def _defers(self) -> bool:
        """Another member of the set published a longer log (`ends/`): leave the election to
        it for DEFER_LEASES leases from when this node found the key vacant (it may be gone).
        Members that published nothing yet count too just after a start, or while this
        node's log is in doubt (`awaits_unknown`); a log in doubt waits a lease from its
        start, and from each new lease, whatever it knows."""
        term = self.failover.term
        services = term.services
        if services is None:
            return False
        now = trio.current_time()
        if self._vacant_since is None:
            self._vacant_since = now
        own = services.store.get_max_phy_offset()
        if self._in_doubt() and now < max(term.started_at, self._granted_at) + self.ttl_s:
            # the nodes that restarted with it (a group's power loss) publish their log ends
            # first, members of the set or not, so `_more_up_to_date` sees them (storage seed
            # 4872: the slave elected alone won again 85 ms after the restart, on a log its
            # old master's was longer than). So do nodes whose leases expired with this
            # one's while etcd was out of reach, their `ends/` with them (storage seeds
            # 2828, 6440: the slave won in the tick that granted its new lease, and the old
            # master's longer log, published a tick later, was cut)
            return True
        unknown = awaits_unknown(now, vacant_since=self._vacant_since, started_at=term.started_at,
                                 interval_s=self.interval_s, ttl_s=self.ttl_s, log_in_doubt=self._in_doubt())
        longer = longer_logs(self.sync_set, self._ends, address=self.cfg.address, own_end=own, now=now,
                             until=self._vacant_since + DEFER_LEASES * self.ttl_s, await_unknown=unknown)
        if longer and self._deferred_since != self._vacant_since:
            self._deferred_since = self._vacant_since
            self._event("leaving the election of %s to %s: their logs end past this node's %d",
                        self.cfg.broker_name, ", ".join(longer), own)
        return bool(longer)

    def _in_doubt(self) -> bool:
        """This node's log may lack what it acknowledged: it restarted after a crash or a
        power loss (or its recovery cut a damaged record) and has not caught up with a master
        since (TermState.log_in_doubt)."""
        term = self.failover.term
        services = term.services
        if services is None or not term.log_in_doubt:
            return False
        caught_up = services.ha_client.caught_up_at if services.ha_client is not None else None
        return caught_up is None or caught_up < term.started_wall

    def _more_up_to_date(self) -> str | None:
        """A node about to campaign on a log in doubt: another live node whose published log
        is more up to date (election.hand_over_to), else None."""
        services = self.failover.term.services
        if services is None or not self._in_doubt():
            return None
        return hand_over_to(self._logs, address=self.cfg.address, own_epoch=self.failover.epoch,
                            own_end=services.store.get_max_phy_offset())

    async def _hand_over(self, target: str, epoch_kv: KeyValue | None) -> None:
        """Name `target` the set's master, this node its member, instead of campaigning: in
        the transaction a campaign uses (the key still vacant, the epoch counter unmoved), so
        no holder's set is overwritten. `target` may campaign then, and this node, whose log
        is shorter, leaves the election to it (`_defers`)."""
        role = (self.sync_set or {}).get("role") or self.failover.term.master.role or BrokerRole.SYNC_MASTER.value
        epoch = int(epoch_kv.value or b"0") if epoch_kv else 0
        handed = {"master": target, "epoch": epoch, "role": role, "in_sync": [self.cfg.address]}
        result = await self.etcd.txn(
            [cmp_absent(self.key_master), cmp_mod_revision(self.key_epoch, epoch_kv.mod_revision if epoch_kv else 0)],
            [op_put(self.key_sync, json.dumps(handed))], [])
        if result.succeeded:
            self.sync_set = handed
            epoch_end = self._logs.get(target)
            self._event("not campaigning on a log in doubt: %s's log (epoch %s, end %s) is more up to date; "
                        "it may campaign now", target, *(epoch_end or ("?", "?")))

    async def _publish_end(self) -> None:
        """Publish this node's CommitLog end and last epoch (under its lease), which
        `_defers` and `_more_up_to_date` compare."""
        services = self.failover.term.services
        if services is None or not self.lease:
            return
        published = (self.failover.epoch, services.store.get_max_phy_offset())
        if published != self._published_end:
            await self.etcd.put(self.ends_prefix + self.cfg.address,
                                json.dumps({"address": self.cfg.address, "epoch": published[0],
                                            "max_offset": published[1]}), lease=self.lease)
            self._published_end = published

    def _stop_acking(self) -> None:
        """A slave about to campaign first leaves the master whose lease is gone: a master
        riding out an etcd outage cut off from etcd alone then stops acknowledging before
        this node is elected (it needs every member's ack). The HA client follows whichever
        node wins (`_follow`)."""
        services = self.failover.term.services
        client = services.ha_client if services else None
        if client is not None and client.master_address is not None and not self.cfg.role.is_master:
            self._event("the leadership key is gone: leaving master HA %s before campaigning",
                        client.master_address)
            client.update_master_address(None)

    async def _campaign(self, epoch_kv: KeyValue | None) -> None:
        failover = self.failover
        counter = int(epoch_kv.value or b"0") if epoch_kv else 0
        epoch = max(counter, failover.term.newest_seen, failover.epoch) + 1
        role = self.cfg.role.value if self.cfg.role.is_master else (self.sync_set or {}).get("role")
        if role not in (BrokerRole.SYNC_MASTER.value, BrokerRole.ASYNC_MASTER.value):
            role = failover.term.master.role or BrokerRole.SYNC_MASTER.value
        info = {"address": self.cfg.address, "ha_address": self.cfg.ha_address, "epoch": epoch,
                "role": role, "since_ms": int(runtime.wall_clock() * 1000)}
        # the winner's term starts with a set of itself alone (as RocketMQ 5's controller
        # elects), written in the same transaction: a slave that acks the new term's first
        # writes cannot be outvoted by the old set's members, who may lack them
        previous = self.sync_set
        own_set: dict[str, Any] = {"master": self.cfg.address, "epoch": epoch, "role": role, "in_sync": []}
        result = await self.etcd.txn(
            [cmp_absent(self.key_master), cmp_mod_revision(self.key_epoch, epoch_kv.mod_revision if epoch_kv else 0)],
            [op_put(self.key_master, json.dumps(info), lease=self.lease), op_put(self.key_epoch, str(epoch)),
             op_put(self.key_sync, json.dumps(own_set))], [])
        self.elections["won" if result.succeeded else "lost"] = self.elections.get(
            "won" if result.succeeded else "lost", 0) + 1
        if not result.succeeded:
            return  # another node won (or the counter moved): the next tick follows it
        self.leading, self.leader, self.sync_set = True, info, own_set
        if self.cfg.role.is_master:
            self._event("elected master of %s with epoch %d", self.cfg.broker_name, epoch)
            await failover.begin_epoch(epoch)
            await self._publish_sync(force=True)
            return
        self._event("elected master of %s with epoch %d: promoting this slave (%s)",
                    self.cfg.broker_name, epoch, role)
        try:
            await failover.promote(role, epoch=epoch)
        except OpError as e:
            self._event("promotion failed (%s): releasing the lease", e.message)
            await self._resign(previous)

    async def _resign(self, sync_set: dict[str, Any] | None = None) -> None:
        """Give the leadership up; `sync_set` (the set this node was elected from) is put
        back first, so its other members may still campaign."""
        lease, self.lease, self.leading = self.lease, 0, False
        if lease and sync_set is not None:
            await self.etcd.txn([cmp_lease(self.key_master, lease)], [op_put(self.key_sync, json.dumps(sync_set))], [])
        if lease:
            await self.etcd.revoke(lease)

    async def _follow(self, info: dict[str, Any]) -> None:
        """Another node holds the key: a master fences, a slave follows the holder."""
        failover, cfg = self.failover, self.cfg
        epoch, address, ha_address = info.get("epoch"), info.get("address"), info.get("ha_address")
        if type(epoch) is not int or not isinstance(address, str) or not isinstance(ha_address, str):
            return
        failover.term.newest_seen = max(failover.term.newest_seen, epoch)
        failover.set_master(address, ha_address, epoch, info.get("role"))
        if address == cfg.address:
            return  # a key left by this node's previous run: it expires with that lease
        if cfg.role.is_master:
            if failover.fenced is None:
                self._event("%s holds the leadership of %s with epoch %d: fencing and rejoining as a slave",
                            address, cfg.broker_name, epoch)
                failover.fence(epoch, address, f"etcd {self.endpoints[0]}")
            return
        services = failover.term.services
        client = services.ha_client if services else None
        if client is None:
            return
        if client.master_address != ha_address:
            self._event("following master %s (HA %s, epoch %d)", address, ha_address, epoch)
            client.update_master_address(ha_address)
        if failover.term.sync is not None:
            failover.term.sync.set_master_addr(address)
        # the same master, elected again: take its new epochs, only over the live connection
        # to it (refresh_epochs: right after the switch above, the old master's is still open)
        if epoch > failover.epoch:
            await failover.refresh_epochs(address, ha_address)

    async def _publish_sync(self, *, force: bool = False, shrink: bool = False) -> None:
        """Write the in-sync set (only while this node holds the key under its lease).

        A slave joins once the master's in-sync rule holds for it (haMaxGapNotInSync,
        haMaxTimeSlaveNotCatchup) and it acked every offset a PUT_OK was answered for; a
        member leaves when the rule no longer holds (or, `shrink`, all leave). The HA
        service waits for a joining slave's acks before etcd names it and for a leaving
        one's until etcd no longer does, so every member always holds every PUT_OK."""
        async with self._publish_lock:
            services = self.failover.term.services
            ha = services.ha_master if services else None
            peers: list[str] = []
            if ha is not None and not shrink:
                peers = ha.in_sync(self.cfg.ha_max_gap_not_in_sync, self.cfg.ha_max_time_slave_not_catchup / 1000)
            self._note_unnamed([p for p in peers if p not in self._replicas])
            await self._write_sync(self._named(peers), force=force)

    def _named(self, peers: list[str]) -> dict[str, str]:
        """HA connection → client address of the slave on it, for the connections a
        `replicas/` entry names (as the last tick read them)."""
        return {p: self._replicas[p] for p in peers if p in self._replicas}

    def _note_unnamed(self, peers: list[str]) -> None:
        """A slave publishes its HA connection's local address within a tick of connecting;
        one still unnamed after UNNAMED_TICKS is reported (a proxy or NAT on the HA link
        hides it: that slave can never join the in-sync set)."""
        self._unnamed = {p: self._unnamed.get(p, 0) + 1 for p in peers}
        for peer, ticks in self._unnamed.items():
            if ticks == UNNAMED_TICKS:
                self._event("cannot name the slave on HA connection %s: no replicas/ entry has that address "
                            "(a proxy or NAT on the HA link?); it cannot join the in-sync set", peer)

    async def _write_sync(self, named: dict[str, str], *, force: bool = False) -> None:
        """Publish the set of these slaves (HA connection → client address); a slave not yet
        a member joins only if it acked every offset answered PUT_OK (checked with no await
        before the HA service starts waiting for it)."""
        cfg = self.cfg
        services = self.failover.term.services
        ha = services.ha_master if services else None
        if ha is not None:
            keep = ha.ack_members or frozenset()
            holders = set(ha.acked_by(ha.confirmed_offset))
            named = {p: a for p, a in named.items() if p in keep or p in holders}
            ha.set_ack_members(keep | frozenset(named))  # joining slaves: waited for from now on
        members = sorted(set(named.values()))
        value = {"master": cfg.address, "epoch": self.failover.epoch, "role": cfg.role.value, "in_sync": members}
        if force or self.sync_set is None or {k: self.sync_set.get(k) for k in value} != value:
            result = await self.etcd.txn([cmp_lease(self.key_master, self.lease)],
                                         [op_put(self.key_sync, json.dumps(value))], [])
            if not result.succeeded:
                self.leading = False
                raise EtcdError("the leadership key is no longer under this node's lease")
            before = (self.sync_set or {}).get("in_sync")
            self.sync_set = value
            if before != members:
                self._event("in-sync set of %s: master %s, slaves %s", cfg.broker_name, cfg.address,
                            ", ".join(members) or "none")
        if ha is not None:  # leaving slaves: no longer waited for once etcd no longer names them
            ha.set_ack_members(frozenset(named))

    async def on_ack_timeout(self, next_offset: int) -> bool:
        """The HA service's hook when a SYNC_MASTER put's wait for the members ran out:
        shrink the set to the slaves holding `next_offset` (RocketMQ 5 shrinks before it
        stops waiting), so the put is acknowledged; False when none does, or etcd refuses
        (the put then answers FLUSH_SLAVE_TIMEOUT)."""
        services = self.failover.term.services
        ha = services.ha_master if services else None
        if ha is None or not self.leading or self.reachable is False:
            return False  # (etcd unreachable: the set cannot shrink, the put is not acknowledged)
        try:
            async with self._publish_lock:
                if ha.acked_offset() >= next_offset:
                    return True  # another put's shrink already covered this one
                named = self._named(ha.acked_by(next_offset))
                if not named:
                    return False
                await self._write_sync(named)
        except EtcdError as e:
            self._event("cannot shrink the in-sync set past a lagging slave: %s", e)
            return False
        return ha.acked_offset() >= next_offset

    async def _publish_replica(self) -> None:
        """A slave tells the master which HA connection is its own."""
        services = self.failover.term.services
        client = services.ha_client if services else None
        local = client.local_address if client is not None and not self.cfg.role.is_master else None
        if local is None or local == self._published_replica or not self.lease:
            return
        value = {"address": self.cfg.address, "ha_local": local, "broker_id": self.cfg.broker_id}
        await self.etcd.put(self.replicas_prefix + self.cfg.address, json.dumps(value), lease=self.lease)
        self._published_replica = local

    # ---- status ------------------------------------------------------------------------------
    def route_view(self) -> dict[str, Any]:
        """What this node registers with the name servers: the lease holder's address and the
        in-sync slaves (RocketMQ 5's SyncStateSet), as this node last read them from etcd."""
        view: dict[str, Any] = {}
        holder = (self.leader or {}).get("address")
        if isinstance(holder, str):
            view["lease_holder"] = holder
        members = (self.sync_set or {}).get("in_sync")
        if isinstance(members, list) and all(isinstance(m, str) for m in members):
            view["in_sync"] = list(members)
        return view

    def status(self) -> dict[str, Any]:
        now = trio.current_time()
        return {
            "mode": "etcd",
            "endpoints": self.endpoints,
            "lease": f"{self.lease:x}" if self.lease else None,
            "lease_left_ms": max(0, int((self.lease_deadline - now) * 1000)) if self.lease else 0,
            "leading": self.leading and now < self.lease_deadline,
            "lease_holder": self.leader,
            "sync_state_set": self.sync_set,
            "etcd_reachable": self.reachable,
            "unnamed_slaves": sorted(p for p, n in self._unnamed.items() if n >= UNNAMED_TICKS),
            "watching": self.watching,
            "watch_events": self.watch_events,
            "last_error": self.last_error,
            "events": list(self.events),
        }
