"""Promotion and fencing: how a node changes role without forking the log.

Every master term has an epoch (store/epoch_file.py). `Failover` keeps one node's side of
it across its terms, acting on the decisions of node/failover/term.py (its state),
fencing.py (the write gate), epochs.py (admission) and election.py (etcd mode), and asking
through asker.py:

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
  findConsistentPoint) it restarts with that tail cut (node/failover/truncation.py).

The 4.x HA bytes are untouched: epochs travel over the client protocol (`epoch` op) and in
the name server's registrations, so a node with no epoch history (a RocketMQ 4.x peer)
replicates as before as long as no epoch is in play.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ha.net import TCP, Network
from store import runtime
from store.config import BrokerRole
from store.epoch_file import EpochEntry, EpochFileCache
from store.message_store import MessageStore
from store.schedule import SCHEDULE_TOPIC
from wire.protocol import Epoch, EpochReply, GetStatus, Status, StatusReply, WirePromoteCheck
from wire.protocol.namesrv import RegisterReply

from ..config import BrokerConfig
from ..ops.services import FailoverHooks, NodeServices, OpError
from ..slave_sync import SlaveSync
from ..tables.changes import Changes
from ..tables.offsets import ConsumerOffsetManager, OffsetEntry
from ..tables.topics import DEFAULT_PERM
from .asker import ASK_TIMEOUT_S, EpochAsker
from .epochs import Cut, Refuse, admission, newer_master
from .fencing import CheckOutcome
from .insync import MasterView, assess
from .role import ROLE_FILE, RoleState, Transition, effective_config
from .term import PROMOTE_SETTLE_S, GroupMaster, TermState
from .truncation import TRUNCATION_FILE, cut_log


class ControllerHooks(Protocol):
    """What Failover asks of node/failover/controller.py's EtcdController (typed here, so the two
    modules do not import each other)."""

    leader: dict[str, Any] | None

    async def before_write(self) -> None: ...

    async def before_unreplicated_answer(self) -> None: ...

    def check_write(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


log = logging.getLogger("tidemq.node")

__all__ = ["ASK_TIMEOUT_S", "PROMOTE_SETTLE_S", "ROLE_FILE", "TRUNCATION_FILE", "Failover", "GroupMaster",
           "RoleState", "TermState", "Transition", "effective_config"]  # re-exported from the modules they live in

HA_STOP_TIMEOUT_S = 5.0
LONELY_RECHECK_S = 1.0
"""A master whose last slave left asks again this often until a slave is back: the slave
may have been promoted and not yet answer with its new epoch."""
LONELY_WRITE_RECHECK_S = 0.1
"""Meanwhile a write waits for an answer no older than this (at most ~10 checks a second)."""
STALL_TICK_S = 0.05
"""How often `_beat` notes that the event loop runs (a gap over fencing.STALL_S is a stall)."""


class Failover:
    """One node's epochs, role and fencing, across its terms (service restarts): the state
    is `term`'s, the questions `asker`'s; this class acts."""

    def __init__(self, cfg: BrokerConfig, *, on_transition: Callable[[], None] | None = None,
                 controller: Callable[[BrokerConfig, Failover], ControllerHooks] | None = None,
                 net: Network = TCP) -> None:
        """`on_transition`: the node ends its term (it serves again in the new role).
        `controller`: builds the etcd controller (controllerMode etcd) that decides who writes.
        `net`: where its questions to name servers and peers go (ha/net.py)."""
        self.term = TermState.load(cfg)
        self.asker = EpochAsker(self.term, net)
        self.on_transition = on_transition
        self._check_lock = trio.Lock()
        self._wake = trio.Event()
        self.promotions: dict[str, int] = {}
        """Promotions of this node attempted in this process, by result (`promote`)."""
        self.controller = controller(self.cfg, self) if controller is not None else None
        """With controllerMode etcd: the election decides who writes (node/failover/controller.py)."""

    # ---- the state others read (term.py's) ---------------------------------------------------
    @property
    def cfg(self) -> BrokerConfig:
        return self.term.cfg

    @property
    def base_cfg(self) -> BrokerConfig:
        return self.term.base_cfg

    @property
    def epoch(self) -> int:
        return self.term.epoch

    @property
    def epoch_changes(self) -> Changes:
        return self.term.epoch_changes

    @property
    def candidate(self) -> bool:
        return self.term.candidate

    @property
    def transition(self) -> Transition | None:
        return self.term.transition

    @property
    def fenced(self) -> str | None:
        return self.term.fenced

    @property
    def epochs(self) -> EpochFileCache:
        return self.term.cache

    @property
    def last_truncation(self) -> dict[str, Any] | None:
        return self.term.last_truncation

    # ---- terms -------------------------------------------------------------------------------
    def start_term(self, services: NodeServices, sync: SlaveSync | None = None) -> None:
        """Services are built for `self.cfg`; a master starts its epoch and checks before writing."""
        self.term.start(services, sync, elected=self.controller is not None)

    async def begin_epoch(self, epoch: int) -> None:
        """A master elected by the controller starts `epoch` at its max offset; its offset
        table is the group's from now on (streamed to its slaves: HAService.offsets_ready)."""
        self.term.begin_epoch(epoch)
        await self._clamp_offsets()
        ha = self.term.services.ha_master if self.term.services else None
        if ha is not None and not self.term.candidate:
            ha.offsets_ready()

    async def _clamp_offsets(self) -> None:
        """A new epoch begins on this log: a committed offset past a queue's end here names
        records this log does not hold (a power loss took them, or a peer's term that was
        cut), and the epoch's new records take those queue offsets. Set back to the end, a
        consumer that starts from it reads them instead of skipping them (storage seed 414: a
        group power loss took a whole queue; the elected master kept the group's offset 12).
        Within an epoch nothing is lost, so a clean election or restart changes nothing.
        What it set back is written at once: the file a later crash restarts from must not
        name the old offsets again (storage seed 5840: a group power loss restarted the
        master from a file that still held 31 over a queue the clamp had set back to 19, and
        the consumer skipped what the epoch stored at 20..24)."""
        services = self.term.services
        if services is not None and clamp_offsets(services.offsets, services.store):
            await services.offsets.persist(force=True)

    def request_transition(self, transition: Transition) -> None:
        """Save the new role and end the term (the node restarts its services with it)."""
        if self.term.transition is not None:
            return
        transition.role.save(self.term.root)
        self.term.transition = transition
        log.warning("role change to brokerId %d (%s): %s", transition.role.broker_id,
                    transition.role.broker_role, transition.role.reason)
        if self.on_transition is not None:
            self.on_transition()

    def apply(self, transition: Transition) -> None:
        """Between terms, with the store closed: cut the log, then take the new role."""
        if transition.truncate_to is not None:
            report = cut_log(self.cfg, self.term.cache, transition.truncate_to, transition.role.reason)
            if report is not None:
                self.term.last_truncation = report
        self.term.take_role(transition.role)

    # ---- what a node tells others ------------------------------------------------------------
    def epoch_answer(self) -> dict[str, Any]:
        """The `epoch` op's fields."""
        return self.term.epoch_answer()

    def status(self) -> dict[str, Any]:
        return self.term.status(self.controller.status() if self.controller else None)

    # ---- name server answers -----------------------------------------------------------------
    def on_registration(self, answer: RegisterReply) -> None:
        """A registration answer names the group's master and its epoch."""
        if self.controller is not None and self.controller.leader is not None:
            return  # etcd names the master: a name server's view may lag behind it
        newer = self.term.on_registration(answer)
        if newer is not None and newer.epoch is not None:
            self._fence(newer.epoch, newer.address, "the name server")

    # ---- fencing (the decisions are node/failover/fencing.py's) -------------------------------------
    def _observe_stall(self) -> bool:
        if not self.cfg.role.is_master:
            return False
        gap = self.term.fencing.beat(trio.current_time())
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
        ha = self.term.services.ha_master if self.term.services else None
        if ha is not None and self.term.fencing.slaves(trio.current_time(), ha.connection_count,
                                                       ha.slaves_accepted, ha.slave_hosts()):
            log.warning("a slave disconnected (%d of %d left): every write is answered after an epoch "
                        "check that started after it", ha.connection_count, self.term.fencing.peak_slaves)

    async def watch(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Per term: notice stalls and lost slaves; run pending checks without waiting for a write."""
        async with trio.open_nursery() as nursery:
            if self.cfg.role.is_master:  # a term's role is fixed; a slave counts no stalls
                nursery.start_soon(self._beat)
            task_status.started()
            await self._watch_loop()

    async def _watch_loop(self) -> None:
        """Woken by a stall or a slave connection change; while a slave is gone (it may be
        mid-promotion, not yet answering with its new epoch) or writes are held, it also asks
        again every LONELY_RECHECK_S (writes do not wait for these)."""
        while True:
            serving = self.cfg.role.is_master and self.term.transition is None and self.term.fenced is None
            if serving:
                self._observe()
                if self._wants_check(LONELY_RECHECK_S):
                    await self._check()
            fencing = self.term.fencing
            # fenced or leaving: no more checks, so no timer (it would be due at once, forever)
            lonely = serving and (fencing.slave_left_at is not None or fencing.held or self.term.restart_epoch_due)
            with trio.move_on_at(fencing.last_check + LONELY_RECHECK_S if lonely else math.inf):
                await self._wake.wait()
            self._wake = trio.Event()

    def _wants_check(self, recheck_s: float) -> bool:
        """Fencing's rule, and a new epoch due after an abnormal restart (asked again every
        `recheck_s` until a check is answered)."""
        now = trio.current_time()
        due = self.term.restart_epoch_due and now >= self.term.fencing.last_check + recheck_s
        return due or self.term.fencing.wants_check(now, recheck_s)

    async def before_write(self) -> float:
        """Raise OpError (SERVICE_NOT_AVAILABLE) when this master must not take the write;
        else return when it was admitted, for `after_write`."""
        if not self.cfg.role.is_master:
            return trio.current_time()
        if self.controller is not None:
            await self.controller.before_write()
        self._observe()
        # a fresh answer first (at most LONELY_WRITE_RECHECK_S old), so a fenced node stores nothing
        if self.term.fenced is None and self._wants_check(LONELY_WRITE_RECHECK_S):
            await self._check()
        if self.term.fenced is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, self.term.fenced)
        held = self.term.restart_epoch_reason() or self.term.fencing.held_reason()
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
        confirmed = await self._confirm_since(self.term.fencing.needed_for(admitted))
        if self.controller is not None:
            try:
                self.controller.check_write()
            except OpError as e:
                raise OpError(Status.INDETERMINATE, f"stored, but not acknowledged: {e.message}") from None
        if self.term.fenced is not None:
            raise OpError(Status.INDETERMINATE, f"stored, but not acknowledged: {self.term.fenced}")
        if not confirmed and self.term.fencing.stalled_since(admitted):
            raise OpError(Status.INDETERMINATE,
                          f"stored, but not acknowledged: {self.term.fencing.held_reason() or 'stalled'}")

    async def _confirm_since(self, since: float) -> bool:
        """Run epoch checks until one that started at or after `since` confirmed this node's
        epoch (True), or it is fenced or no one answered (False)."""
        if since > trio.current_time():
            await trio.sleep_until(since)  # a check that confirms must start then (Fencing.settle_until)
        for _ in range(3):  # a check that stalled, or began before `since`, is followed by one more
            if self.term.fenced is not None:
                return False
            if self.term.fencing.confirmed_at >= since:
                return True
            if await self._check(since=since) is CheckOutcome.UNANSWERED:
                return False
        return self.term.fencing.confirmed_at >= since

    async def _check(self, *, since: float | None = None) -> CheckOutcome | None:
        """Ask the name servers and peers for the group's epoch; fence on a newer one. None
        when it did not ask (fenced, or a check that ran meanwhile made it needless)."""
        async with self._check_lock:
            fencing = self.term.fencing
            if self.term.fenced is not None:
                return None
            if since is not None:
                if fencing.confirmed_at >= since:
                    return None  # a check that ran while this one waited for the lock did it
            elif not self._wants_check(LONELY_WRITE_RECHECK_S):
                return None
            check = fencing.start_check(trio.current_time())
            self.term.used_ids = set()
            views, answered = await self.asker.group_epochs(self.term.used_ids)
            self.term.newest_seen = max([self.term.newest_seen, *(v.epoch for v in views)])
            newer = newer_master(views, self.epoch, self.cfg.own_addresses(), yield_ties=self.term.yields_ties())
            if newer is not None:
                self._fence(newer.epoch, newer.address, newer.source)
                return None
            if answered:
                slaves = sum(1 for broker_id in self.term.used_ids if broker_id != 0)
                fencing.registered(slaves, trio.current_time())
                ha = self.term.services.ha_master if self.term.services else None
                if ha is not None:
                    ha.expect(slaves)
            outcome = fencing.finish_check(check, answered=bool(answered) or not self.cfg.namesrv_addresses)
            if outcome is CheckOutcome.CONFIRMED and self.term.restart_epoch_due \
                    and check.started >= max(fencing.settle_until, fencing.stalled_at + PROMOTE_SETTLE_S):
                # only once a slave promoted just before this start (or during a stall since)
                # has announced its epoch (PROMOTE_SETTLE_S): the two would pick the same number
                self.term.begin_restart_epoch()
                await self._clamp_offsets()
            if outcome is CheckOutcome.UNANSWERED:
                log.warning("no name server or peer answered with the group's epoch%s",
                            ": writes stay held after the stall" if fencing.held
                            else f"; serving on epoch {self.epoch}")
            return outcome

    def set_master(self, address: str, ha_address: str, epoch: int, role: str | None) -> None:
        self.term.set_master(address, ha_address, epoch, role)

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
        term = self.term
        client = term.services.ha_client if term.services else None
        source = client.replicating_from() if client is not None else None
        if client is None or source is None or source[0] != ha_address:
            return
        answer: EpochReply | None = await self.asker.ask(address, Epoch())
        if not answer or answer.fenced or client.replicating_from() != source:
            return
        if answer.epoch > term.cache.last_epoch() and term.transition is None:
            term.cache.replace(EpochEntry(e, s) for e, s in answer.entries)
            term.newest_seen = max(term.newest_seen, answer.epoch)
            log.info("adopted master %s's epoch history (epoch %d)", address, answer.epoch)

    def _fence(self, epoch: int, address: str | None, source: str) -> None:
        transition = self.term.fence(epoch, address, source)
        if transition is not None:
            self.request_transition(transition)

    # ---- a slave's side ----------------------------------------------------------------------
    def follows_namesrv(self, master_epoch: int | None) -> bool:
        """Should a slave take the name servers' master over its configured address? (TermState's rule)"""
        return self.term.follows_namesrv(master_epoch)

    async def admit(self, ha_address: str) -> bool:
        """May the HA client replicate from the master at `ha_address`? Cuts a divergent
        tail first (the decision is epochs.admission's)."""
        store = self.term.services.store if self.term.services else None
        if store is None or self.term.transition is not None:
            return False
        address = self.term.master_client_address(ha_address)
        answer = await self.asker.ask(address, Epoch()) if address else None
        decision = admission(answer, address=address, own=self.term.cache, newest_seen=self.term.newest_seen,
                             max_offset=store.get_max_phy_offset(),
                             segment_size=self.cfg.store.mapped_file_size_commit_log)
        if isinstance(decision, Refuse) and decision.geometry:
            if decision.reason != self.term.replication_refused:
                log.error("not replicating: %s", decision.reason)
            self.term.replication_refused = decision.reason
            return False
        if answer is not None:
            self.term.replication_refused = None
        if isinstance(decision, Refuse):
            log.warning("not replicating from %s: %s", ha_address, decision.reason)
            self.term.follow_namesrv = self.term.follow_namesrv or decision.follow_namesrv
            return False
        if isinstance(decision, Cut):
            self.request_transition(Transition(
                RoleState(self.cfg.broker_id, BrokerRole.SLAVE.value, decision.reason), truncate_to=decision.offset))
            return False
        if decision.epoch is not None:
            self.term.newest_seen = max(self.term.newest_seen, decision.epoch)
            before = self.term.cache.last_epoch()
            self.term.cache.replace(decision.entries)
            if self.term.cache.last_epoch() != before:
                self.epoch_changes.bump()
        return True

    def promoted_term(self) -> bool:
        """The term about to start (or started) begins a new epoch this node was promoted or
        elected to (its role file's pending epoch)."""
        role_state = self.term.role_state
        return role_state is not None and role_state.pending_epoch is not None

    async def promotion_check(self, *, ask_master: bool = True) -> WirePromoteCheck:
        """Whether this slave may be promoted without `unclean` (node/failover/insync.py):
        its master's in-sync set and confirm offset when the master answers (its `status`,
        asked when `ask_master`, whether or not this slave's HA connection is up: a master
        that serves while its slaves are away confirms alone what they never got), else the
        confirm offset it last learned."""
        services = self.term.services
        if services is None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, "a role change is under way")
        if self.cfg.role.is_master:
            raise OpError(Status.BAD_REQUEST, f"{self.cfg.address} is already a master "
                             f"of {self.cfg.broker_name} (epoch {self.epoch})")
        client = services.ha_client
        master_address = self.term.master.address or self.cfg.master_addr
        master = None
        if ask_master and master_address:
            answer: StatusReply | None = await self.asker.ask(master_address, GetStatus())
            if answer is not None and answer.role != BrokerRole.SLAVE.value \
                    and answer.broker_name == self.cfg.broker_name:
                master = MasterView.of(master_address, answer)
        store = services.store
        known = client.confirm_offset if client is not None else store.replica_log.known_confirm
        caught_up = client.caught_up_at if client is not None else store.replica_log.known_caught_up
        return assess(self.cfg.address, end=store.get_max_phy_offset(), whole_end=store.complete_end(),
                      known_confirm=known, ha_local=client.local_address if client is not None else None,
                      master=master, master_address=master_address, asked=ask_master,
                      caught_up_s=None if caught_up is None else max(0.0, runtime.wall_clock() - caught_up),
                      max_silence_s=self.cfg.ha_max_time_slave_not_catchup / 1000,
                      in_doubt=store.replica_log.abnormal_start)

    async def promote(self, role: str | None, *, epoch: int | None = None, unclean: bool = False) -> dict[str, Any]:
        """`_promote`, counted by result in `promotions` (rocketmq_failover_promotions_total):
        "elected" (the controller's), "clean", "unclean", "refused" (an OpError), "failed"."""
        try:
            answer = await self._promote(role, epoch=epoch, unclean=unclean)
        except OpError:
            self._count_promotion("refused")
            raise
        except Exception:
            self._count_promotion("failed")
            raise
        self._count_promotion("elected" if epoch is not None else "unclean" if unclean else "clean")
        return answer

    def _count_promotion(self, result: str) -> None:
        self.promotions[result] = self.promotions.get(result, 0) + 1

    async def _promote(self, role: str | None, *, epoch: int | None = None, unclean: bool = False) -> dict[str, Any]:
        """Make this slave the group's master (see the module docstring); `epoch` is the
        controller's (etcd's), else N+1. A manual promotion (no `epoch`) of a slave outside
        its master's in-sync set or behind the confirm offset is refused unless `unclean`
        (`promotion_check`); the answer's `check` says what it drops."""
        services = self.term.services
        if services is None or self.cfg.role.is_master:
            raise OpError(Status.BAD_REQUEST, f"{self.cfg.address} is already a master "
                             f"of {self.cfg.broker_name} (epoch {self.epoch})")
        if self.term.transition is not None:
            raise OpError(Status.SERVICE_NOT_AVAILABLE, "a role change is already under way")
        if epoch is None and self.term.newest_seen > self.epoch:
            # it never followed the group's current master: promoting it would leave that
            # master serving its epoch beside this one (and cut its records when it rejoins)
            raise OpError(Status.BAD_REQUEST, f"{self.cfg.address} holds epoch {self.epoch} but the group is at "
                             f"epoch {self.term.newest_seen}: it has not rejoined that epoch's master yet; promote "
                             "it once it replicates from the current master, or promote that master's slave")
        role = role or self.term.master.role
        if role not in (BrokerRole.SYNC_MASTER.value, BrokerRole.ASYNC_MASTER.value):
            raise OpError(Status.BAD_REQUEST, f"the group's master role is not known here ({role!r}); "
                             "pass role SYNC_MASTER or ASYNC_MASTER")
        check = None
        if epoch is None:  # a manual promotion: no silent unclean one
            # unclean: the operator has chosen (the CLI asked promote_check first), so the
            # promotion does not wait for the master's answer; the check is logged and answered
            check = await self.promotion_check(ask_master=not unclean)
            if not check.clean and not unclean:
                raise OpError(Status.BAD_REQUEST, f"refused: {check.reason}; promote it anyway with --unclean "
                                                  "(unclean=true)")
            if not check.clean:
                log.warning("unclean promotion: %s", check.reason)
            if self.term.transition is not None or self.cfg.role.is_master:  # changed while the master was asked
                raise OpError(Status.SERVICE_NOT_AVAILABLE, "a role change is already under way")
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
        # committed offsets past this log's queue ends come back to the ends: an unclean
        # promotion's, and an election's of a slave outside a set that had shrunk to the
        # master alone, which lacks the tail consumers read there (storage seed 2842,
        # ASYNC_MASTER: the consumer skipped the new epoch's records at those offsets). A
        # clean manual promotion holds every offset a consumer could commit.
        clamped = clamp_offsets(services.offsets, store) if unclean or epoch is not None else []
        if clamped:
            await services.offsets.persist(force=True)
        if epoch is None:
            # a master restarted after an abnormal exit begins an epoch of its own (term.py),
            # which this slave may not have seen (it was refused while that epoch was due, or
            # the master paused before it reconnected): the name servers have it, so this
            # promotion takes a newer one and the two never share a number (seed 1447)
            views, _answered = await self.asker.group_epochs(set())
            self.term.newest_seen = max([self.term.newest_seen, *(v.epoch for v in views)])
        epoch = epoch if epoch is not None else max(self.term.newest_seen, self.epoch) + 1
        max_offset = store.get_max_phy_offset()
        reason = f"promoted to master of {self.cfg.broker_name} with epoch {epoch} (was brokerId {self.cfg.broker_id})"
        self.request_transition(Transition(RoleState(0, role, reason, pending_epoch=epoch)))
        return {"epoch": epoch, "max_offset": max_offset, "broker_id": 0, "role": role, "check": check,
                "offsets_clamped": len(clamped)}

    async def _adopt_master_topics(self, services: NodeServices) -> None:
        """Topics the old master registered that this slave has not synced yet (the sync runs
        every 10 s) are created here, so the group keeps serving every topic it served; and
        any topic whose records the slave holds (its ConsumeQueues), with read-write perm and
        as many queues as it holds (the delay levels' topic is the schedule service's)."""
        tables = await self.asker.master_topics()
        for table in tables:
            for topic, q in table.items():
                if services.topics.get(topic) is None:
                    await services.topics.create(topic, q["read_queue_nums"], q["write_queue_nums"], q["perm"])
                    log.info("promotion: topic %s taken over from the old master's registration", topic)
        # then what the log holds (the name servers may not answer in time, seed 114: a
        # transactional topic and the half topic created a moment before the promotion)
        for topic, queue_ids in sorted(services.store.consume_queues.topics().items()):
            if services.topics.get(topic) is None and topic != SCHEDULE_TOPIC:
                n = max(queue_ids) + 1
                await services.topics.create(topic, n, n, DEFAULT_PERM)
                log.info("promotion: topic %s (%d queue(s)) taken over from the ConsumeQueues this slave holds",
                         topic, n)


def clamp_offsets(offsets: ConsumerOffsetManager, store: MessageStore) -> list[OffsetEntry]:
    """Committed offsets past this log's ConsumeQueue ends as a new epoch begins on it (an
    unclean promotion, an election or restart after a power loss: the records there are
    gone, and the new epoch's records take those offsets) come back to the ends, so the group
    reads the new records instead of skipping them. Returns the entries as they were. A clean
    manual promotion keeps every committed offset exactly (consumers read only up to the
    confirm offset, which the slave holds); an election clamps (the set may have shrunk to
    the master alone, whose tail consumers read)."""
    out = []
    held = store.queue_ends_held()  # records not dispatched yet are the log's (storage seed 6961)
    for entry in offsets.entries():
        end = max(store.get_max_offset_in_queue(entry.topic, entry.queue_id),
                  held.get((entry.topic, entry.queue_id), 0))
        if entry.offset > end:
            out.append(entry)
            offsets.commit(entry.group, entry.topic, entry.queue_id, end)
            log.warning("new epoch: group %s's committed offset of %s:%d was %d, past this log's end %d "
                        "(records this log no longer holds: an unclean promotion, a power loss); set to %d",
                        entry.group, entry.topic, entry.queue_id, entry.offset, end, end)
    return out


if TYPE_CHECKING:
    def _hooks(failover: Failover) -> FailoverHooks:
        return failover  # mypy: a Failover is what NodeServices.failover (the ops) may be handed
