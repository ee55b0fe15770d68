"""Promotion, epochs and fencing: how a node changes role without forking the log.

Every master term has an epoch (store/epoch_file.py). This module keeps one node's side of it:

- **Role beside the store.** `failoverRole.json` in the store root holds the role the node
  serves after a promotion or a rejoin (brokerId, brokerRole, the epoch a promoted node
  starts); it overrides the config file's brokerId/brokerRole, which is never rewritten.
- **Promotion** (`promote`): a slave stops its HA client, dispatches everything it holds,
  records the role and epoch N+1 (N = the newest epoch it has seen), and the node restarts
  its services as brokerId 0; the new term starts epoch N+1 at the recovered max offset.
- **Fencing** (`before_write`, `after_write`): a master that has just started, stalled, or
  lost its last slave asks the name servers and its group's peers for the newest epoch
  before its next write. On a newer one it fences (writes answer SERVICE_NOT_AVAILABLE
  naming the epoch) and restarts as a slave.
- **Stalls** (`_beat`): a task notes the monotonic time every STALL_TICK_S; a gap over
  STALL_S means the process did not run (SIGSTOP, a frozen VM, swapping) and its peers may
  have promoted a slave meanwhile, while its sockets buffered sends. Every write admitted
  before the stall is then answered only after an epoch check that started after it:
  PUT_OK if no newer epoch is registered, INDETERMINATE if one is (the write is stored here
  and is cut on rejoin, unless it reached the new master first). Until a name server or
  peer answers, writes are refused. CLOCK_MONOTONIC runs on while a process is stopped, so
  the gap measures the pause; it stops while the whole host is suspended, which freezes the
  host's other nodes with it. A promoted slave waits PROMOTE_SETTLE_S (> STALL_S) between
  leaving its master and announcing its epoch, so no pause can span a promotion unseen.
- **Slaves that left**: while fewer slaves are connected than were this term (one may be
  the slave being promoted), every write is answered after an epoch check that started
  after the write was admitted (checks are shared by the writes waiting for them). So once
  a newer epoch is registered, this node answers no PUT_OK: only a check that a name server
  answered before the registration can confirm a write, and that write was decided before.
  With no name server or peer answering, such writes are answered as before (a node cut off
  from all of them cannot learn of a promotion: use etcd mode's leases for that).
- **Admission** (`admit`, before every HA connection): a slave asks the master's client
  port for its epoch history; it refuses a master whose epoch is older than the newest it
  has seen, and when its own log has a tail the master's history does not share (RocketMQ's
  findConsistentPoint) it restarts with that tail cut (MessageStore.truncate_to), reporting the
  offsets, count and msgIds dropped in the log, `lastTruncation.json` and `status`.

The 4.x HA bytes are untouched: epochs travel over the client protocol (`epoch` op) and in
the name server's registrations, so a node with no epoch history (a RocketMQ 4.x peer)
replicates as before as long as no epoch is in play.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from ha.net import TCP, Network
from store import runtime
from store.config import BrokerRole
from store.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache, EpochFileError
from store.message_store import truncate_store
from wire.client import TidemqError, connect
from wire.protocol import Epoch, EpochReply, Status, WireRequest
from wire.protocol.namesrv import ClusterInfo, ClusterInfoReply, RegisterReply

from ..config import BrokerConfig, ConfigError
from ..ops.services import FailoverHooks, NodeServices, OpError
from ..slave_sync import SlaveSync
from ..tables.changes import Changes
from ..tables.jsonfile import ConfigFileError, write_json_atomic
from .epochs import Cut, EpochView, Refuse, admission, newer_master
from .fencing import STALL_S, CheckOutcome, Fencing
from .role import ROLE_FILE, RoleState, Transition, effective_config


class ControllerHooks(Protocol):
    """What Failover asks of node/failover/controller.py's EtcdController (typed here, so the two
    modules do not import each other)."""

    leader: dict[str, Any] | None

    async def before_write(self) -> None: ...

    async def before_unreplicated_answer(self) -> None: ...

    def check_write(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


log = logging.getLogger("tidemq.node")

__all__ = ["ROLE_FILE", "Failover", "RoleState", "Transition", "effective_config"]  # role.py's re-exported

TRUNCATION_FILE = "lastTruncation.json"
ASK_TIMEOUT_S = 2.0
"""Upper bound for one round of asking the name servers and peers for epochs."""
HA_STOP_TIMEOUT_S = 5.0
LONELY_RECHECK_S = 1.0
"""A master whose last slave left asks again this often until a slave is back: the slave
may have been promoted and not yet answer with its new epoch."""
LONELY_WRITE_RECHECK_S = 0.1
"""Meanwhile a write waits for an answer no older than this (at most ~10 checks a second)."""
STALL_TICK_S = 0.05
"""How often `_beat` notes that the event loop runs (a gap over fencing.STALL_S is a stall)."""
PROMOTE_SETTLE_S = 2 * STALL_S
"""A promoted slave waits this long after leaving its master before it announces its epoch,
so no pause of the old master can span the promotion without being a stall."""


@attrs.define
class GroupMaster:
    """The group's master as the name servers last named it."""

    address: str | None = None
    ha_address: str | None = None
    epoch: int | None = None
    role: str | None = None


class Failover:
    """One node's epochs, role and fencing, across its terms (service restarts)."""

    def __init__(self, cfg: BrokerConfig, *, on_transition: Callable[[], None] | None = None,
                 controller: Callable[[BrokerConfig, Failover], ControllerHooks] | None = None,
                 net: Network = TCP) -> None:
        """`on_transition`: the node ends its term (it serves again in the new role).
        `controller`: builds the etcd controller (controllerMode etcd) that decides who writes.
        `net`: where its questions to name servers and peers go (ha/net.py)."""
        self.net = net
        self.base_cfg = cfg
        self.root = cfg.store.store_path_root_dir
        os.makedirs(self.root, exist_ok=True)
        try:
            self.role_state = RoleState.load(self.root)
            self.cfg = effective_config(cfg, self.role_state)
            self.cache = EpochFileCache.load(os.path.join(self.root, EPOCH_FILE_NAME))
        except (EpochFileError, ConfigError) as e:
            raise ConfigFileError(str(e)) from None
        self.newest_seen = self.cache.last_epoch()
        self.epoch_changes = Changes()
        """Bumped when a slave takes its master's epochs, or a candidate is elected: the
        registration registers again at once, so routes and clusterList show the epoch the
        node serves on."""
        self.candidate = False
        """etcd mode: this term started as master from local files, and no election has made
        it master yet (start_term): it neither writes nor registers."""
        self.master = GroupMaster()
        self.last_truncation = self._load_truncation()
        self.transition: Transition | None = None
        self.on_transition = on_transition
        self.services: NodeServices | None = None
        self.sync: SlaveSync | None = None
        """A slave term's topic/offset sync, re-pointed with the HA client on a new master."""
        self.fenced: str | None = None
        self.fencing = Fencing(last_beat=0.0)
        self._used_ids: set[int] = set()
        self.follow_namesrv = False
        """Set when the configured master was refused: the slave follows the name servers."""
        self.replication_refused: str | None = None
        """Why the HA client may not replicate from the master it found (a config mismatch
        that would corrupt this store); None while replication is allowed."""
        self._check_lock = trio.Lock()
        self._wake = trio.Event()
        self.controller = controller(self.cfg, self) if controller is not None else None
        """With controllerMode etcd: the election decides who writes (node/failover/controller.py)."""

    # ---- terms -------------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.cache.last_epoch()

    def start_term(self, services: NodeServices, sync: SlaveSync | None = None) -> None:
        """Services are built for `self.cfg`; a master starts its epoch and checks before writing."""
        self.services = services
        self.sync = sync
        self.transition = None
        self.fenced = None
        self.candidate = False
        self.fencing = Fencing(last_beat=trio.current_time())
        store = services.store
        if not self.cfg.role.is_master:
            return
        max_offset = store.get_max_phy_offset()
        pending = self.role_state.pending_epoch if self.role_state else None
        elected_now = pending is not None and pending > self.cache.last_epoch()
        if self.controller is not None and not elected_now:
            # etcd mode: a master's role read from local files (a first start, a restart) is
            # no mandate. The node is a candidate: no writes (the controller refuses them
            # without the lease), no registration as master, no epoch of its own, until the
            # election makes it master (begin_epoch) or fences it (seed 9100442: a restarted
            # master served on its old epoch after a newer one was elected)
            self.candidate = True
            self.fencing.needs_check = True
            return
        if elected_now and pending is not None:
            self.cache.truncate_suffix_by_offset(max_offset)
            self.cache.append(EpochEntry(pending, max_offset))
            log.warning("epoch %d starts at CommitLog offset %d: this node is the master of %s",
                        pending, max_offset, self.cfg.broker_name)
        elif not len(self.cache):
            epoch, start = max(self.newest_seen, 0) + 1, max(store.get_min_phy_offset(), 0)
            self.cache.append(EpochEntry(epoch, start))
            log.info("epoch %d starts at CommitLog offset %d (first term with epochs)", epoch, start)
        self.newest_seen = max(self.newest_seen, self.cache.last_epoch())
        self.fencing.needs_check = True  # a node that starts as master asks before its first write
        if pending is None and self.controller is None and self.cfg.namesrv_addresses:
            # restarted on its old epoch: its slave may be mid-promotion, gone before this
            # start and announcing only after its settle time (found by the simulation)
            self.fencing.settle_until = trio.current_time() + PROMOTE_SETTLE_S

    def begin_epoch(self, epoch: int) -> None:
        """A master elected by the controller starts `epoch` at its max offset (an empty
        term of its own that starts there is replaced)."""
        if self.services is None or epoch <= self.cache.last_epoch():
            return
        max_offset = self.services.store.get_max_phy_offset()
        self.cache.truncate_suffix_by_offset(max_offset)
        self.cache.append(EpochEntry(epoch, max_offset))
        self.newest_seen = max(self.newest_seen, epoch)
        self.candidate = False
        self.epoch_changes.bump()  # register as the master of `epoch` now
        log.warning("epoch %d starts at CommitLog offset %d: this node is the elected master of %s",
                    epoch, max_offset, self.cfg.broker_name)

    def request_transition(self, transition: Transition) -> None:
        """Save the new role and end the term (the node restarts its services with it)."""
        if self.transition is not None:
            return
        transition.role.save(self.root)
        self.transition = transition
        log.warning("role change to brokerId %d (%s): %s", transition.role.broker_id,
                    transition.role.broker_role, transition.role.reason)
        if self.on_transition is not None:
            self.on_transition()

    def apply(self, transition: Transition) -> None:
        """Between terms, with the store closed: cut the log, then take the new role."""
        if transition.truncate_to is not None:
            try:
                report = truncate_store(self.cfg.store, transition.truncate_to, clamp=True)
            except ValueError as e:
                log.error("cannot cut the CommitLog back to %d to rejoin: %s; stopping", transition.truncate_to, e)
                raise
            self.cache.truncate_suffix_by_offset(report.from_offset)
            if report.message_count or report.dropped_bytes:
                self.last_truncation = {
                    "from_offset": report.from_offset, "to_offset": report.to_offset,
                    "dropped_bytes": report.dropped_bytes, "message_count": report.message_count,
                    "msg_ids": list(report.msg_ids), "at_ms": int(runtime.wall_clock() * 1000),
                    "reason": transition.role.reason,
                }
                write_json_atomic(os.path.join(self.root, TRUNCATION_FILE), self.last_truncation)
                log.warning("dropped CommitLog [%d, %d): %d message(s), msgIds %s", report.from_offset,
                            report.to_offset, report.message_count, ",".join(report.msg_ids) or "-")
        self.role_state = transition.role
        self.cfg = effective_config(self.base_cfg, transition.role)

    def _load_truncation(self) -> dict[str, Any] | None:
        try:
            with open(os.path.join(self.root, TRUNCATION_FILE), encoding="utf-8") as f:
                report: dict[str, Any] | None = json.load(f)
                return report
        except (OSError, ValueError):
            return None

    # ---- what a node tells others ------------------------------------------------------------
    def epoch_answer(self) -> dict[str, Any]:
        """The `epoch` op's fields."""
        store = self.services.store if self.services else None
        return {
            "epoch": self.epoch,
            "entries": [e.to_wire() for e in self.cache.entries],
            "max_offset": store.get_max_phy_offset() if store else 0,
            "broker_id": self.cfg.broker_id,
            "role": self.cfg.role.value,
            "fenced": self.fenced,
            "mapped_file_size_commit_log": self.cfg.store.mapped_file_size_commit_log,
        }

    def status(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "epochs": [e.to_wire() for e in self.cache.entries],
            "newest_epoch_seen": self.newest_seen,
            "fenced": self.fenced,
            "stalls": self.fencing.stalls,
            "last_stall_s": self.fencing.last_stall_s,
            "writes_held": ("a candidate: no election has made this node master yet (controllerMode etcd)"
                            if self.candidate else self.fencing.held_reason()),
            "slave_left": self.fencing.slave_left_at is not None,
            "role_file": self.role_state.to_json() if self.role_state else None,
            "last_truncation": self.last_truncation,
            "replication_refused": self.replication_refused,
            "controller": self.controller.status() if self.controller else None,
        }

    # ---- name server answers -----------------------------------------------------------------
    def on_registration(self, answer: RegisterReply) -> None:
        """A registration answer names the group's master and its epoch."""
        if self.controller is not None and self.controller.leader is not None:
            return  # etcd names the master: a name server's view may lag behind it
        self.master = GroupMaster(answer.master_address, answer.master_ha_address, answer.master_epoch,
                                  answer.master_role)
        if self.master.epoch is None:
            return
        self.newest_seen = max(self.newest_seen, self.master.epoch)
        if (self.cfg.role.is_master and self.master.epoch > self.epoch
                and self.master.address not in self.cfg.own_addresses()):
            self._fence(self.master.epoch, self.master.address, "the name server")

    # ---- fencing (the decisions are node/failover/fencing.py's) -------------------------------------
    def _observe_stall(self) -> bool:
        if not self.cfg.role.is_master:
            return False
        gap = self.fencing.beat(trio.current_time())
        if gap is not None:
            log.warning("this node stalled for %.2f s: asking for the group's epoch before "
                        "answering any write", gap)
        return gap is not None

    async def _beat(self) -> None:
        while True:
            await runtime.sleep(STALL_TICK_S)
            if self._observe_stall():
                self.wake()

    def wake(self) -> None:
        """Something fencing counts happened (a stall, a slave connecting or leaving): the
        watcher looks now rather than at its next re-check."""
        self._wake.set()

    def _observe(self) -> None:
        """Note a stall, and a slave connection that ended (both mean: confirm the epoch)."""
        self._observe_stall()
        ha = self.services.ha_master if self.services else None
        if ha is not None and self.fencing.slaves(trio.current_time(), ha.connection_count, ha.slaves_accepted,
                                                  ha.slave_hosts()):
            log.warning("a slave disconnected (%d of %d left): every write is answered after an epoch "
                        "check that started after it", ha.connection_count, self.fencing.peak_slaves)

    async def watch(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Per term: notice stalls and lost slaves; run pending checks without waiting for a write."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._beat)
            task_status.started()
            await self._watch_loop()

    async def _watch_loop(self) -> None:
        """Woken by a stall or a slave connection change; while a slave is gone (it may be
        mid-promotion, not yet answering with its new epoch) or writes are held, it also asks
        again every LONELY_RECHECK_S (writes do not wait for these)."""
        while True:
            serving = self.cfg.role.is_master and self.transition is None and self.fenced is None
            if serving:
                self._observe()
                if self.fencing.wants_check(trio.current_time(), LONELY_RECHECK_S):
                    await self._check()
            fencing = self.fencing
            # fenced or leaving: no more checks, so no timer (it would be due at once, forever)
            lonely = serving and (fencing.slave_left_at is not None or fencing.held)
            with trio.move_on_at(fencing.last_check + LONELY_RECHECK_S if lonely else math.inf):
                await self._wake.wait()
            self._wake = trio.Event()

    async def before_write(self) -> float:
        """Raise OpError (SERVICE_NOT_AVAILABLE) when this master must not take the write;
        else return when it was admitted, for `after_write`."""
        if not self.cfg.role.is_master:
            return trio.current_time()
        if self.controller is not None:
            await self.controller.before_write()
        self._observe()
        # a fresh answer first (at most LONELY_WRITE_RECHECK_S old), so a fenced node stores nothing
        if self.fenced is None and self.fencing.wants_check(trio.current_time(), LONELY_WRITE_RECHECK_S):
            await self._check()
        if self.fenced is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, self.fenced)
        held = self.fencing.held_reason()
        if held is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, f"{held}: no write until one does")
        return trio.current_time()

    async def after_write(self, admitted: float, *, unreplicated: bool = False) -> None:
        """Before a stored write is answered: raise OpError (INDETERMINATE) when this node may
        no longer acknowledge it: it was fenced, its controller lease ran out, or it was
        admitted before a stall or while a slave was gone and no check that started after
        that confirmed the epoch (Fencing.needed_for). A clock read when nothing happened.
        `unreplicated`: some of it is answered SLAVE_NOT_AVAILABLE (the controller shrinks
        the in-sync set first)."""
        if not self.cfg.role.is_master:
            return
        if unreplicated and self.controller is not None:
            await self.controller.before_unreplicated_answer()
        self._observe()
        confirmed = await self._confirm_since(self.fencing.needed_for(admitted))
        if self.controller is not None:
            try:
                self.controller.check_write()
            except OpError as e:
                raise OpError(Status.INDETERMINATE, f"stored, but not acknowledged: {e.message}") from None
        if self.fenced is not None:
            raise OpError(Status.INDETERMINATE, f"stored, but not acknowledged: {self.fenced}")
        if not confirmed and self.fencing.stalled_since(admitted):
            raise OpError(Status.INDETERMINATE,
                          f"stored, but not acknowledged: {self.fencing.held_reason() or 'stalled'}")

    async def _confirm_since(self, since: float) -> bool:
        """Run epoch checks until one that started at or after `since` confirmed this node's
        epoch (True), or it is fenced or no one answered (False)."""
        if since > trio.current_time():
            await trio.sleep_until(since)  # a check that confirms must start then (Fencing.settle_until)
        for _ in range(3):  # a check that stalled, or began before `since`, is followed by one more
            if self.fenced is not None:
                return False
            if self.fencing.confirmed_at >= since:
                return True
            if await self._check(since=since) is CheckOutcome.UNANSWERED:
                return False
        return self.fencing.confirmed_at >= since

    async def _check(self, *, since: float | None = None) -> CheckOutcome | None:
        """Ask the name servers and peers for the group's epoch; fence on a newer one. None
        when it did not ask (fenced, or a check that ran meanwhile made it needless)."""
        async with self._check_lock:
            fencing = self.fencing
            if self.fenced is not None:
                return None
            if since is not None:
                if fencing.confirmed_at >= since:
                    return None  # a check that ran while this one waited for the lock did it
            elif not fencing.wants_check(trio.current_time(), LONELY_WRITE_RECHECK_S):
                return None
            check = fencing.start_check(trio.current_time())
            views, answered = await self._group_epochs()
            self.newest_seen = max([self.newest_seen, *(v.epoch for v in views)])
            newer = newer_master(views, self.epoch, self.cfg.own_addresses())
            if newer is not None:
                self._fence(newer.epoch, newer.address, newer.source)
                return None
            if answered:
                slaves = sum(1 for broker_id in self._used_ids if broker_id != 0)
                fencing.registered(slaves, trio.current_time())
                ha = self.services.ha_master if self.services else None
                if ha is not None:
                    ha.expect(slaves)
            outcome = fencing.finish_check(check, answered=bool(answered) or not self.cfg.namesrv_addresses)
            if outcome is CheckOutcome.UNANSWERED:
                log.warning("no name server or peer answered with the group's epoch%s",
                            ": writes stay held after the stall" if fencing.held
                            else f"; serving on epoch {self.epoch}")
            return outcome

    async def _group_epochs(self) -> tuple[list[EpochView], int]:
        """(epoch, address, source) from every name server and every peer of the group that
        answers within ASK_TIMEOUT_S, and how many of them answered."""
        cfg = self.cfg
        views: list[EpochView] = []
        answered = 0
        peers: set[str] = set()
        self._used_ids = set()

        async def ask_namesrv(address: str) -> None:
            nonlocal answered
            answer: ClusterInfoReply | None = await _ask(address, ClusterInfo(), self.cfg, self.net)
            answered += answer is not None
            for b in answer.brokers if answer else []:
                if b.get("broker_name") != cfg.broker_name or b.get("address") in cfg.own_addresses():
                    continue
                peers.add(b["address"])
                self._used_ids.add(b.get("broker_id", 0))
                if type(b.get("epoch")) is int:
                    views.append(EpochView(b["epoch"], b["address"], f"name server {address}"))

        async def ask_peer(address: str) -> None:
            nonlocal answered
            answer: EpochReply | None = await _ask(address, Epoch(), self.cfg, self.net)
            answered += answer is not None
            if answer and not answer.fenced:
                views.append(EpochView(answer.epoch, address, f"peer {address}"))

        with trio.move_on_after(ASK_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for address in cfg.namesrv_addresses:
                    nursery.start_soon(ask_namesrv, address)
            async with trio.open_nursery() as nursery:
                for address in peers:
                    nursery.start_soon(ask_peer, address)
        return views, answered

    def set_master(self, address: str, ha_address: str, epoch: int, role: str | None) -> None:
        self.master = GroupMaster(address, ha_address, epoch, role)

    def fence(self, epoch: int, address: str | None, source: str) -> None:
        """Stop taking writes and rejoin as a slave: `address` serves a newer `epoch`."""
        self._fence(epoch, address, source)

    async def refresh_epochs(self, address: str, ha_address: str) -> None:
        """A slave replicating from `address` (HA `ha_address`) takes its history once it grew
        (an election started a new epoch there): the log it copied is that master's up to here.

        Only while the HA client's live connection is to that master, the same one before and
        after the question (`HAClient.replicating_from`). Just after a switch of masters the
        old master's connection is still open (cancelled, not yet unwound) and the log ends
        with what that master sent: taking the new master's history then made the next
        `admit` find the new epoch in both histories and keep the old master's tail, which
        diverges from the new master's log at its epoch start (seed 9100300). That log is for
        `admit` (findConsistentPoint) to judge, with its own history."""
        client = self.services.ha_client if self.services else None
        source = client.replicating_from() if client is not None else None
        if client is None or source is None or source[0] != ha_address:
            return
        answer: EpochReply | None = await _ask(address, Epoch(), self.cfg, self.net)
        if not answer or answer.fenced or client.replicating_from() != source:
            return
        if answer.epoch > self.cache.last_epoch() and self.transition is None:
            self.cache.replace(EpochEntry(e, s) for e, s in answer.entries)
            self.newest_seen = max(self.newest_seen, answer.epoch)
            log.info("adopted master %s's epoch history (epoch %d)", address, answer.epoch)

    def _fence(self, epoch: int, address: str | None, source: str) -> None:
        if self.fenced is not None:
            return
        self.fenced = (f"fenced: {self.cfg.broker_name}'s epoch {epoch} (master {address}, from {source}) "
                       f"is newer than this node's epoch {self.epoch}; it rejoins as a slave")
        log.warning("%s", self.fenced)
        used = self._used_ids | {0}
        slave_id = next(i for i in range(1, len(used) + 2) if i not in used)
        self.request_transition(Transition(RoleState(slave_id, BrokerRole.SLAVE.value, self.fenced)))

    # ---- a slave's side ----------------------------------------------------------------------
    def follows_namesrv(self, master_epoch: int | None) -> bool:
        """Should a slave take the name servers' master over its configured address? Only
        once the group moved on: a newer epoch than the one it follows, or the configured
        master refused (not serving as master, or older). Until then a static address wins,
        so a haMasterAddress that goes through a proxy stays in use."""
        newer = master_epoch is not None and master_epoch > self.epoch >= 1
        return newer or self.follow_namesrv

    def master_client_address(self, ha_address: str) -> str | None:
        if self.master.ha_address == ha_address and self.master.address:
            return self.master.address
        if ha_address == self.cfg.store.ha_master_address:
            return self.cfg.master_addr
        return None

    async def admit(self, ha_address: str) -> bool:
        """May the HA client replicate from the master at `ha_address`? Cuts a divergent
        tail first (the decision is epochs.admission's)."""
        store = self.services.store if self.services else None
        if store is None or self.transition is not None:
            return False
        address = self.master_client_address(ha_address)
        answer = await _ask(address, Epoch(), self.cfg, self.net) if address else None
        decision = admission(answer, address=address, own=self.cache, newest_seen=self.newest_seen,
                             max_offset=store.get_max_phy_offset(),
                             segment_size=self.cfg.store.mapped_file_size_commit_log)
        if isinstance(decision, Refuse) and decision.geometry:
            if decision.reason != self.replication_refused:
                log.error("not replicating: %s", decision.reason)
            self.replication_refused = decision.reason
            return False
        if answer is not None:
            self.replication_refused = None
        if isinstance(decision, Refuse):
            log.warning("not replicating from %s: %s", ha_address, decision.reason)
            self.follow_namesrv = self.follow_namesrv or decision.follow_namesrv
            return False
        if isinstance(decision, Cut):
            self.request_transition(Transition(
                RoleState(self.cfg.broker_id, BrokerRole.SLAVE.value, decision.reason), truncate_to=decision.offset))
            return False
        if decision.epoch is not None:
            self.newest_seen = max(self.newest_seen, decision.epoch)
            before = self.cache.last_epoch()
            self.cache.replace(decision.entries)
            if self.cache.last_epoch() != before:
                self.epoch_changes.bump()
        return True

    async def promote(self, role: str | None, *, epoch: int | None = None) -> dict[str, Any]:
        """Make this slave the group's master (see the module docstring); `epoch` is the
        controller's (etcd's), else N+1."""
        services = self.services
        if services is None or self.cfg.role.is_master:
            raise OpError(Status.BAD_REQUEST, f"{self.cfg.address} is already a master "
                             f"of {self.cfg.broker_name} (epoch {self.epoch})")
        if self.transition is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, "a role change is already under way")
        if epoch is None and self.newest_seen > self.epoch:
            # it never followed the group's current master: promoting it would leave that
            # master serving its epoch beside this one (and cut its records when it rejoins)
            raise OpError(Status.BAD_REQUEST, f"{self.cfg.address} holds epoch {self.epoch} but the group is at "
                             f"epoch {self.newest_seen}: it has not rejoined that epoch's master yet; promote "
                             "it once it replicates from the current master, or promote that master's slave")
        role = role or self.master.role
        if role not in (BrokerRole.SYNC_MASTER.value, BrokerRole.ASYNC_MASTER.value):
            raise OpError(Status.BAD_REQUEST, f"the group's master role is not known here ({role!r}); "
                             "pass role SYNC_MASTER or ASYNC_MASTER")
        if services.ha_client is not None:
            await services.ha_client.stop(HA_STOP_TIMEOUT_S)
        # An old master paused across everything from here to the announcement then sees a
        # stall (> STALL_S) and re-checks its epoch before answering what its sockets
        # buffered; one that ran meanwhile saw its slave leave and checks every write.
        await runtime.sleep(PROMOTE_SETTLE_S)
        store = services.store
        while store.reput.do_reput():  # everything received is in the ConsumeQueues
            await trio.lowlevel.checkpoint()
        await self._adopt_master_topics(services)
        epoch = epoch if epoch is not None else max(self.newest_seen, self.epoch) + 1
        max_offset = store.get_max_phy_offset()
        reason = f"promoted to master of {self.cfg.broker_name} with epoch {epoch} (was brokerId {self.cfg.broker_id})"
        self.request_transition(Transition(RoleState(0, role, reason, pending_epoch=epoch)))
        return {"epoch": epoch, "max_offset": max_offset, "broker_id": 0, "role": role}


    async def _adopt_master_topics(self, services: NodeServices) -> None:
        """Topics the old master registered that this slave has not synced yet (the sync runs
        every 10 s) are created here, so the group keeps serving every topic it served."""
        tables = []
        with trio.move_on_after(ASK_TIMEOUT_S):
            for address in self.cfg.namesrv_addresses:
                answer: ClusterInfoReply | None = await _ask(address, ClusterInfo(), self.cfg, self.net)
                for b in answer.brokers if answer else []:
                    if b.get("broker_name") == self.cfg.broker_name and b.get("broker_id") == 0:
                        tables.append(b.get("topics") or {})
        for table in tables:
            for topic, q in table.items():
                if services.topics.get(topic) is None:
                    await services.topics.create(topic, q["read_queue_nums"], q["write_queue_nums"], q["perm"])
                    log.info("promotion: topic %s taken over from the old master's registration", topic)


async def _ask(address: str, request: WireRequest, cfg: BrokerConfig, net: Network) -> Any:
    """One request on a fresh connection (with the node's account and TLS): its reply, None when it fails."""
    try:
        async with connect(address, connect_timeout=ASK_TIMEOUT_S, request_timeout=ASK_TIMEOUT_S,
                           credentials=cfg.credentials, tls=cfg.client_tls, net=net) as conn:
            return await conn.call(request)
    except (TidemqError, OSError) as e:
        log.debug("%s %s: %s", address, request.OP, e)
        return None


if TYPE_CHECKING:
    def _hooks(failover: Failover) -> FailoverHooks:
        return failover  # mypy: a Failover is what NodeServices.failover (the ops) may be handed
