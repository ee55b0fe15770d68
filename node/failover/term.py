"""One node's failover state across its terms: epochs, role, fencing, the group's master.

`TermState` is what node/failover/promotion.py's `Failover` knows and decides without
asking anyone: it awaits nothing and opens no connection, so the rules below are read (and
tested) as plain state changes. Its only writes are its own files: the epoch file
(store/epoch_file.py, through `EpochFileCache`), which is the history it keeps.

- **A term starts** (`start`): a master starts its epoch (N+1 after a promotion, 1 on a
  first start) and checks before its first write; one restarted on its old epoch waits
  PROMOTE_SETTLE_S for a check (its slave may be mid-promotion); in etcd mode a master
  read from local files is a candidate until elected (`begin_epoch`).
- **A master restarted after an abnormal exit** (the abort file was there: a crash or a
  power loss, whose recovery may have cut an unflushed tail its slaves hold) takes no
  write on its old epoch: the first check that finds no newer master begins a new one at
  its recovered end (`begin_restart_epoch`), so the slaves' admission cuts their tails
  there instead of keeping bytes the master now writes differently (issue 45).
- **It ends** (`fence`, or a transition Failover requests): the role a node serves next.
- **What it tells others**: the `epoch` op's answer and `status`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import attrs
import trio

from store import runtime
from store.config import BrokerRole
from store.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache, EpochFileError
from wire.protocol.namesrv import RegisterReply

from ..config import BrokerConfig, ConfigError
from ..ops.services import NodeServices
from ..slave_sync import SlaveSync
from ..tables.changes import Changes
from ..tables.jsonfile import ConfigFileError
from .fencing import STALL_S, Fencing
from .role import RoleState, Transition, effective_config
from .truncation import keep_report, load_truncation

log = logging.getLogger("tidemq.node")

__all__ = ["PROMOTE_SETTLE_S", "GroupMaster", "TermState"]

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


@attrs.define(eq=False)
class TermState:
    """One node's epochs, role and fencing state; see the module docstring."""

    base_cfg: BrokerConfig
    """The config file's settings (never rewritten)."""
    role_state: RoleState | None
    cfg: BrokerConfig
    """`base_cfg` with the stored role in place of its own: what the node serves as."""
    cache: EpochFileCache
    newest_seen: int
    """The newest epoch this node has seen anywhere (its own, a master's, a name server's)."""
    last_truncation: dict[str, Any] | None = None
    epoch_changes: Changes = attrs.field(factory=Changes)
    """Bumped when a slave takes its master's epochs, or a candidate is elected: the
    registration registers again at once, so routes and clusterList show the epoch the
    node serves on."""
    candidate: bool = False
    """etcd mode: this term started as master from local files, and no election has made
    it master yet (start): it neither writes nor registers."""
    master: GroupMaster = attrs.field(factory=GroupMaster)
    transition: Transition | None = None
    services: NodeServices | None = None
    sync: SlaveSync | None = None
    """A slave term's topic/offset sync, re-pointed with the HA client on a new master."""
    fenced: str | None = None
    fencing: Fencing = attrs.field(factory=lambda: Fencing(last_beat=0.0))
    used_ids: set[int] = attrs.field(factory=set)
    """The group's brokerIds the name servers listed at the last check."""
    follow_namesrv: bool = False
    """Set when the configured master was refused: the slave follows the name servers."""
    replication_refused: str | None = None
    """Why the HA client may not replicate from the master it found (a config mismatch
    that would corrupt this store); None while replication is allowed."""
    restart_epoch_due: bool = False
    """Manual mode: this master restarted after an abnormal exit and has not begun its new
    epoch yet (no check answered so far): it takes no write."""
    restart_end: int = 0
    """Where its recovery ended: the new epoch starts there (a record its own services,
    such as the schedule service, stored meanwhile belongs to the new epoch)."""
    acked_floor: int | None = None
    """A master restarted after an abnormal exit: its recovered CommitLog end. It may have
    acknowledged all of it before (its confirm offset may not have survived), so a slave
    below it is not promoted cleanly (storage seed 1104)."""
    restarted_epoch: int | None = None
    """The epoch this node began itself after an abnormal restart. A master serving it
    yields to another master of the same epoch (one promoted while it was down, that
    picked the same number): only a promotion or an election makes an epoch number its own."""
    abnormal_restart: bool = False
    """This term's store found the abort file (a crash or a power loss before it)."""
    log_in_doubt: bool = False
    """This term's store may lack what the node held, and acknowledged, before: it found
    the abort file, or its recovery cut bytes the log held (a damaged record). Cleared when
    the node is elected (its log is the group's from then); node/failover/controller.py."""
    started_at: float = 0.0
    """When this term started (trio's clock)."""
    started_wall: float = 0.0
    """When this term started (`runtime.wall_clock`, the HA client's caught-up clock)."""

    @classmethod
    def load(cls, cfg: BrokerConfig) -> TermState:
        """The state kept in the store root (role file, epoch file, last truncation);
        ConfigFileError when the role or epoch file is damaged."""
        root = cfg.store.store_path_root_dir
        os.makedirs(root, exist_ok=True)
        try:
            role_state = RoleState.load(root)
            effective = effective_config(cfg, role_state)
            cache = EpochFileCache.load(os.path.join(root, EPOCH_FILE_NAME))
        except (EpochFileError, ConfigError) as e:
            raise ConfigFileError(str(e)) from None
        return cls(cfg, role_state, effective, cache, cache.last_epoch(), load_truncation(root))

    @property
    def root(self) -> str:
        return self.base_cfg.store.store_path_root_dir

    @property
    def epoch(self) -> int:
        return self.cache.last_epoch()

    # ---- terms -------------------------------------------------------------------------------
    def start(self, services: NodeServices, sync: SlaveSync | None, *, elected: bool) -> None:
        """Services are built for `self.cfg`; a master starts its epoch and checks before
        writing. `elected`: an etcd controller decides who is master (controllerMode etcd)."""
        self.services = services
        self.sync = sync
        self.transition = None
        self.fenced = None
        self.candidate = False
        self.fencing = Fencing(last_beat=trio.current_time())
        self.started_at = trio.current_time()
        self.started_wall = runtime.wall_clock()
        store = services.store
        self.restart_epoch_due = False
        self.abnormal_restart = not store.last_exit_ok
        self.log_in_doubt = self.abnormal_restart or store.recovery_dropped
        if not self.cfg.role.is_master:
            recovered = store.recovery_cut
            if recovered is not None and recovered.dropped_msg_ids:
                # a slave's recovery cuts at a damaged or torn record and fetches the rest
                # again from its master: what the master no longer holds is gone, and the
                # operator learns which (storage seed 1521: an old master rejoining over a
                # record a flipped bit damaged dropped its own tail so)
                self.last_truncation = keep_report(
                    self.cfg, recovered.end, recovered.dropped_to, recovered.dropped_msg_ids,
                    "recovery cut the log at a damaged or torn record; the rest is fetched again from the master")
            return
        max_offset = store.get_max_phy_offset()
        self.acked_floor = max_offset if self.abnormal_restart else None
        pending = self.role_state.pending_epoch if self.role_state else None
        elected_now = pending is not None and pending > self.cache.last_epoch()
        if elected and not elected_now:
            # etcd mode: a master's role read from local files (a first start, a restart) is
            # no mandate. The node is a candidate: no writes (the controller refuses them
            # without the lease), no registration as master, no epoch of its own, until the
            # election makes it master (begin_epoch) or fences it (seed 9100442: a restarted
            # master served on its old epoch after a newer one was elected)
            self.candidate = True
            self.fencing.needs_check = True
            store.replica_log.cap_at_known_confirm()  # its consumers see no tail a slave may lack
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
        elif self.abnormal_restart:
            self.restart_epoch_due, self.restart_end = True, max_offset
            log.warning("restarted after an abnormal exit at CommitLog offset %d: a new epoch begins there "
                        "once a name server or peer confirms that no newer master serves", max_offset)
        self.newest_seen = max(self.newest_seen, self.cache.last_epoch())
        self.fencing.needs_check = True  # a node that starts as master asks before its first write
        if pending is None and not elected and self.cfg.namesrv_addresses:
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
        self.log_in_doubt = False
        self.services.store.replica_log.release_cap()
        self.epoch_changes.bump()  # register as the master of `epoch` now
        log.warning("epoch %d starts at CommitLog offset %d: this node is the elected master of %s",
                    epoch, max_offset, self.cfg.broker_name)

    def begin_restart_epoch(self) -> None:
        """A check found no newer master: the master restarted after an abnormal exit begins
        epoch newest+1 where its recovery ended (one write of the epoch file: an empty term
        of its own that starts there is replaced)."""
        if self.services is None or not self.restart_epoch_due:
            return
        max_offset = self.restart_end
        epoch = max(self.newest_seen, self.cache.last_epoch()) + 1
        kept = [e for e in self.cache.entries if e.start_offset < max_offset]
        self.cache.replace([*kept, EpochEntry(epoch, max_offset)])
        self.restart_epoch_due = False
        self.restarted_epoch = epoch
        self.newest_seen = max(self.newest_seen, epoch)
        self.epoch_changes.bump()  # register as the master of `epoch` now
        log.warning("epoch %d starts at CommitLog offset %d: this master of %s restarted after an abnormal exit",
                    epoch, max_offset, self.cfg.broker_name)

    def restart_epoch_reason(self) -> str | None:
        """Why writes wait for the new epoch (None: they do not)."""
        if not self.restart_epoch_due:
            return None
        return ("this master restarted after an abnormal exit and begins a new epoch once a name server or "
                "peer confirms that no newer master serves")

    def yields_ties(self) -> bool:
        """Does this master yield to another one on its own epoch? While its new epoch is
        due (it wrote nothing this term), and while it serves the epoch it began itself
        (`restarted_epoch`)."""
        return self.restart_epoch_due or (
            self.restarted_epoch is not None and self.restarted_epoch == self.cache.last_epoch())

    def take_role(self, role: RoleState) -> None:
        """Between terms: serve as `role` from the next term on."""
        self.role_state = role
        self.cfg = effective_config(self.base_cfg, role)

    def fence(self, epoch: int, address: str | None, source: str) -> Transition | None:
        """`address` serves a newer `epoch`: stop taking writes. The role change to request
        (rejoin as a slave under a brokerId the group does not use), None when already fenced."""
        if self.fenced is not None:
            return None
        self.fenced = (f"fenced: {self.cfg.broker_name}'s epoch {epoch} (master {address}, from {source}) "
                       f"is newer than this node's epoch {self.epoch}; it rejoins as a slave")
        log.warning("%s", self.fenced)
        used = self.used_ids | {0}
        slave_id = next(i for i in range(1, len(used) + 2) if i not in used)
        return Transition(RoleState(slave_id, BrokerRole.SLAVE.value, self.fenced))

    # ---- the group's master ------------------------------------------------------------------
    def set_master(self, address: str, ha_address: str, epoch: int, role: str | None) -> None:
        self.master = GroupMaster(address, ha_address, epoch, role)

    def on_registration(self, answer: RegisterReply) -> GroupMaster | None:
        """A registration answer names the group's master and its epoch: that master when
        this master must fence (it serves a newer epoch), else None."""
        self.master = GroupMaster(answer.master_address, answer.master_ha_address, answer.master_epoch,
                                  answer.master_role)
        if self.master.epoch is None:
            return None
        self.newest_seen = max(self.newest_seen, self.master.epoch)
        newer = self.master.epoch > self.epoch or (self.master.epoch == self.epoch and self.yields_ties())
        if (self.cfg.role.is_master and newer
                and self.master.address not in self.cfg.own_addresses()):
            return self.master
        return None

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
            "pending": self.pending_reason(),
        }

    def pending_reason(self) -> str | None:
        """Why this master's epoch is not the group's yet (None: it is, or this is a slave).
        A candidate after a clean exit holds every byte it ever served; one after an abnormal
        exit may have lost a tail its slaves hold."""
        if self.candidate and self.abnormal_restart:
            return "a candidate: no election has made this node master yet (controllerMode etcd)"
        return self.restart_epoch_reason()

    def status(self, controller: dict[str, Any] | None) -> dict[str, Any]:
        """`status`'s failover fields; `controller`: the etcd controller's view, if any."""
        return {
            "epoch": self.epoch,
            "epochs": [e.to_wire() for e in self.cache.entries],
            "newest_epoch_seen": self.newest_seen,
            "fenced": self.fenced,
            "stalls": self.fencing.stalls,
            "last_stall_s": self.fencing.last_stall_s,
            "writes_held": ("a candidate: no election has made this node master yet (controllerMode etcd)"
                            if self.candidate else self.restart_epoch_reason() or self.fencing.held_reason()),
            "slave_left": self.fencing.slave_left_at is not None,
            "role_file": self.role_state.to_json() if self.role_state else None,
            "last_truncation": self.last_truncation,
            "acked_floor": self.acked_floor if self.cfg.role.is_master else None,
            "replication_refused": self.replication_refused,
            "controller": controller,
        }
