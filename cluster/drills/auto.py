"""The automatic-failover drills (conf/2m-2s-sync-auto: etcd elects each group's master).

- `auto-kill-master`: SIGKILL broker-a's master. Promises: etcd elects its in-sync slave
  within the lease TTL + ELECTED_WITHIN_S, with a newer epoch; producers write to broker-a
  again; the old master, restarted, fences, rejoins as a slave; nothing acknowledged lost.
- `auto-partition`: SIGSTOP broker-a's master until its slave is elected, then SIGCONT.
  Promises: the slave is elected; the resumed old master answers a write
  SERVICE_NOT_AVAILABLE (no PUT_OK after its lease ran out) and rejoins as a slave.
- `auto-soak`: `--rounds` (default 20) faults drawn from `--seed`: SIGKILL or SIGSTOP whichever
  node of broker-a is master once its peer is in sync. Promises, per round: the peer is
  elected with a newer epoch and the old master rejoins as a slave; at the end, nothing
  acknowledged is lost.
- `etcd-down`: stop etcd under load for ETCD_DOWN_S, start it again. Promises: broker-a's
  SYNC_MASTER keeps acknowledging writes past its lease deadline (every in-sync slave acks
  them), no node takes over, writes are acknowledged once etcd is back, nothing
  acknowledged is lost.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from wire.client import ConnectionLost, OutcomeUnknown, TidemqError, connect
from wire.protocol import Send, StatusReply, WireControllerView

from ..launch import launcher_etcd
from .framework import REPO, TOPIC, DrillRun, drill
from .promotion import _consumed_again, _rejoined, _status, _writes_reach

LAYOUT = REPO / "conf" / "2m-2s-sync-auto"
LEASE_S = 3.0
ELECTED_WITHIN_S = 15.0
"""Beyond the lease TTL: the election tick, the promotion's store reopen, a loaded machine."""
ETCD_BACK_S = 30.0
ETCD_DOWN_S = 8.0
"""How long the etcd-down drill keeps etcd stopped: past the lease deadline (LEASE_S) twice."""


def _controller(s: StatusReply) -> WireControllerView:
    """The node's election view; an empty one when it runs without a controller."""
    return s.controller if s.controller is not None else WireControllerView()


def _sync_state_set(s: StatusReply) -> dict[str, Any]:
    """The group's in-sync set as the node last read it from etcd ({} when none)."""
    return _controller(s).sync_state_set or {}


async def _elected(run: DrillRun, address: str) -> StatusReply | None:
    found: list[StatusReply] = []

    async def leading() -> bool:
        s = await _status(address)
        if s.broker_id == 0 and s.controller is not None and s.controller.leading:
            found.append(s)
            return True
        return False

    t0 = run.now()
    if not await run.wait_until(leading, LEASE_S + ELECTED_WITHIN_S, f"{address} elected master of broker-a"):
        return None
    run.event(f"{address} elected with epoch {found[-1].epoch} {run.now() - t0:.1f} s after the fault")
    return found[-1]


async def _probe_write(address: str) -> tuple[bool, str]:
    """(acknowledged nothing, what it answered): refused with SERVICE_NOT_AVAILABLE, or no
    connection at all (the fenced node is restarting its services as a slave: its listener is
    closed for that moment, and a write it never received is one it cannot acknowledge)."""
    try:
        async with connect(address, connect_timeout=2.0, request_timeout=10.0) as conn:
            answer = await conn.call(Send(topic=TOPIC, body=b"probe"))
        return False, f"answered {answer.status.value}"
    except OutcomeUnknown as e:  # sent, then the connection broke or no answer: not proven
        return False, e.message
    except ConnectionLost as e:  # never sent (no connection): nothing it could acknowledge
        return True, e.message
    except TidemqError as e:
        return e.status == "SERVICE_NOT_AVAILABLE", e.message


async def _fail_over(run: DrillRun, sig: str) -> None:
    await trio.sleep(1.0)  # steady load before the fault
    old, new = run.address("broker-a"), run.address("broker-a-s")

    async def slave_in_sync() -> bool:
        sync = _sync_state_set(await _status(old))
        return new in (sync.get("in_sync") or [])
    run.promise("broker-a's slave joins the in-sync set under load",
                await run.wait_until(slave_in_sync, 30, "broker-a's slave in the in-sync set"))
    epoch = (await _status(old)).epoch or 0  # a node with no epoch history: before every epoch
    run.fault(f"SIG{sig} broker-a (master)")
    await run.kill("broker-a", sig)
    try:
        elected = await _elected(run, new)
    finally:
        if sig == "STOP":
            await run.kill("broker-a", "CONT")
    run.promise(f"etcd elects broker-a's slave within the lease + {ELECTED_WITHIN_S:g} s with a newer epoch",
                elected is not None and (elected.epoch or 0) > epoch)
    if elected is None:
        return
    if sig == "STOP":
        refused, why = await _probe_write(old)
        run.event(f"a write to the resumed old master: {why}")
        run.promise("the resumed old master acknowledges nothing (its lease ran out)", refused)
    start = elected.epochs[-1][1]
    run.promise("producers write to broker-a again (its elected master)", await _writes_reach(run, new, start))
    await _consumed_again(run)
    if sig == "KILL":
        await run.start("broker-a")
    rejoined = await _rejoined(run, old)
    run.promise("the old master rejoins as a slave", rejoined is not None)
    _nothing_cut_was_read(run, rejoined, "")


def _nothing_cut_was_read(run: DrillRun, rejoined: StatusReply | None, round_: str) -> None:
    """What the old master cut when it rejoined was never on the in-sync slave, so no
    consumer may have read it (it sees only what every member holds): a consumer that had
    would skip the new term's message at that queue offset."""
    cut = rejoined.last_truncation if rejoined is not None else None
    if cut is None:
        return
    run.event(f"{round_}the old master truncated: {cut.to_wire()}")
    read = sorted(run.consumed_msg_ids.intersection(cut.msg_ids))
    run.promise(f"{round_}no consumer read a message the old master then cut ({len(read)} did: "
                f"{', '.join(read) or '-'})", not read)


@drill("auto-kill-master", "etcd mode: SIGKILL broker-a's master; its slave is elected; the old master rejoins",
       layout=LAYOUT)
async def auto_kill_master(run: DrillRun) -> None:
    await _fail_over(run, "KILL")


@drill("auto-partition", "etcd mode: SIGSTOP broker-a's master until its slave is elected, SIGCONT: it "
       "acknowledges nothing and rejoins", layout=LAYOUT)
async def auto_partition(run: DrillRun) -> None:
    await _fail_over(run, "STOP")


@drill("auto-soak", "etcd mode: --rounds seeded SIGKILL/SIGSTOP faults on broker-a's current master; each "
       "time its in-sync peer is elected and the old master rejoins; nothing acknowledged is lost", layout=LAYOUT)
async def auto_soak(run: DrillRun) -> None:
    rng = random.Random(run.seed)
    nodes = ("broker-a", "broker-a-s")
    leader = nodes[0]
    for i in range(run.rounds):
        follower = nodes[1 - nodes.index(leader)]
        old, new = run.address(leader), run.address(follower)

        async def in_sync(old: str = old, new: str = new) -> bool:
            sync = _sync_state_set(await _status(old))
            return new in (sync.get("in_sync") or [])
        if not run.promise(f"round {i}: {follower} in the in-sync set",
                           await run.wait_until(in_sync, 30, f"round {i}: {follower} in the in-sync set")):
            return
        await trio.sleep(rng.uniform(0.2, 1.0))  # writes land between faults
        epoch = (await _status(old)).epoch or 0  # a node with no epoch history: before every epoch
        sig = rng.choice(["KILL", "STOP"])
        run.fault(f"round {i}: SIG{sig} {leader} (master)")
        await run.kill(leader, sig)
        try:
            elected = await _elected(run, new)
        finally:
            if sig == "STOP":
                await run.kill(leader, "CONT")
        if not run.promise(f"round {i}: {follower} elected with a newer epoch",
                           elected is not None and (elected.epoch or 0) > epoch):
            return
        if sig == "KILL":
            await run.start(leader)
        rejoined = await _rejoined(run, old)
        if not run.promise(f"round {i}: {leader} rejoins as a slave", rejoined is not None):
            return
        _nothing_cut_was_read(run, rejoined, f"round {i}: ")
        leader = follower
    await _consumed_again(run)


@drill("etcd-down", "etcd mode: stop etcd under load: SYNC_MASTER writes go on while every in-sync "
       "slave acks them, no one takes over, nothing acknowledged is lost", layout=LAYOUT)
async def etcd_down(run: DrillRun) -> None:
    await trio.sleep(1.0)
    master, slave = run.address("broker-a"), run.address("broker-a-s")
    endpoint = _controller(await _status(master)).endpoints[0].split("://")[-1]
    run.fault("etcd stopped")
    said = await trio.to_thread.run_sync(launcher_etcd.stop_etcd, run.base)
    run.event(said or "etcd was not running")
    await trio.sleep(ETCD_DOWN_S)  # etcd stays down under load, well past every lease deadline
    answer = (await _probe_write(master))[1]
    run.promise(f"broker-a's master still acknowledges writes {ETCD_DOWN_S:g} s into the outage "
                f"(every in-sync slave acks them): {answer}", answer == "answered PUT_OK")
    st = await _status(master)
    run.promise("its status says etcd is unreachable", _controller(st).etcd_reachable is False)
    run.promise("no slave takes over while etcd is down", (await _status(slave)).role == "SLAVE")
    run.event(await trio.to_thread.run_sync(launcher_etcd.start_etcd, run.base, endpoint))
    back = run.now()

    async def writes() -> bool:  # the old master re-elected, or its in-sync slave elected
        for address in (master, slave):
            try:
                if (await _probe_write(address))[1] == "answered PUT_OK":
                    return True
            except (TidemqError, OSError):
                continue
        return False
    resumed = await run.wait_until(writes, ETCD_BACK_S, "broker-a acknowledging writes with etcd back")
    run.promise(f"broker-a acknowledges writes within {ETCD_BACK_S:g} s of etcd's return", resumed)
    if resumed:
        run.event(f"broker-a acknowledged a write {run.now() - back:.1f} s after etcd came back")
    await _consumed_again(run)
