"""The drills `tidemq drill NAME` runs (framework: cluster/drills/framework.py).

- `kill-master`: SIGKILL broker-a's master under load. Promises: producers move to
  broker-b within 10 s with no send failing beyond the retry budget; the slave holds every
  committed offset the master answered (SYNC_MASTER); the group consumes broker-a's queues
  from its slave; after the restart the master recovers abnormally,
  the slave catches up and consumption returns to the master; nothing acknowledged is lost.
- `rebalance`: with the client's default intervals, a member joins, one leaves, a member
  process is SIGKILLed and another SIGSTOPped, under load. It prints how long each change
  took until the masters' lock tables held the new allocation. Promises: a join is served
  and a leave taken over within 1 s, a crash within 2 s, a pause within the nodes'
  channelExpiredTimeout; every queue has one owner at a time, seen from the members and
  from the masters' lock tables; nothing acknowledged is skipped.
"""

from __future__ import annotations

import signal

import trio

from node.tables.consumers import EXPIRE_EXTRA_S

from .framework import DrillRun, drill

PRODUCERS_RECOVER_S = 10.0
CONSUMPTION_RECOVER_S = 30.0


@drill("kill-master", "SIGKILL broker-a's master, read its queues from the slave, restart it")
async def kill_master(run: DrillRun) -> None:
    await trio.sleep(1.0)  # steady load before the fault
    # hold the handlers a moment (every queue gets a backlog) and note the master's commits
    await run.hold_and_note_commits(run.address("broker-a"))
    run.fault("SIGKILL broker-a (master)")
    await run.kill("broker-a", "KILL")
    await run.judge_commits_on(run.address("broker-a-s"), "broker-a's slave")
    run.promise("no committed offset is lost (the slave had every commit the master answered)",
                run.report.committed_offsets_lost == 0)
    run.gate.set()
    fault = run.fault_at
    assert fault is not None

    def consumed_again() -> bool:
        since = [c for cs in run.consumed.values() for c in cs if c.at >= fault]
        a = {c.queue for c in since if c.queue.broker_name == "broker-a" and c.from_slave}
        b = {c.queue for c in since if c.queue.broker_name == "broker-b"}
        return (a | b) == run.all_queues()

    again = await run.wait_until(consumed_again, CONSUMPTION_RECOVER_S,
                                 "every queue consumed again (broker-a's from its slave)")
    if again:
        run.report.consumption_recovered_s = run.now() - fault
    run.promise("the group consumes broker-a's queues from its slave", again)
    await trio.sleep(2.0)  # producers settle on broker-b
    # a send in flight at the kill may take its whole timeout first (the C++ client's 3 s)
    await run.wait_until(lambda: run.finish().producers_recovered_s is not None,
                         max(0.0, fault + PRODUCERS_RECOVER_S - run.now()), "producers recovered")
    recovered = run.finish().producers_recovered_s
    run.promise(f"producers recover within {PRODUCERS_RECOVER_S:g} s",
                recovered is not None and recovered <= PRODUCERS_RECOVER_S)
    run.promise("no send fails beyond the retry budget", run.report.failed == 0)

    restart_at = run.now()
    await run.start("broker-a")
    run.promise("the restarted master recovers abnormally (SIGKILL left the abort file)",
                "recovery (abnormal exit)" in run.node_log("broker-a"))

    async def slave_caught_up() -> bool:
        from ..client.admin import Admin

        async with Admin(namesrv=run.namesrv) as admin:
            rows = {s.broker_id: s.status for s in await admin.status() if s.broker_name == "broker-a"}
        master, slave = rows.get(0), rows.get(1)
        return bool(master and slave and slave.max_phy_offset == master.max_phy_offset > 0)

    run.promise("broker-a's slave catches up with the restarted master",
                await run.wait_until(slave_caught_up, 30, "broker-a's slave caught up"))

    def back_on_master() -> bool:
        if any(m.reading_from_slave("broker-a") for m in run.members.values()):
            return False
        return any(c.at >= restart_at and c.queue.broker_name == "broker-a" and not c.from_slave
                   for cs in run.consumed.values() for c in cs)

    run.promise("consumption returns to broker-a's master",
                await run.wait_until(back_on_master, 30, "consumption back on broker-a's master"))


JOIN_SERVED_S = 1.0
CRASH_TAKEN_OVER_S = 2.0
"""Issue 24's goals: a joining member holds its share within 1 s; a SIGKILLed member's
queues are held by the others within 2 s (its connection closes, the master drops it and
tells the rest at once)."""


@drill("rebalance", "members join, leave, crash (SIGKILL) and pause (SIGSTOP) under load: how fast the "
       "group takes over; one owner per queue, nothing skipped")
async def rebalance(run: DrillRun) -> None:
    """With the client's default intervals (30 s heartbeats, 20 s rebalance) changes are
    noticed through the masters' notices, not the intervals: each step times how long until
    the masters' lock tables hold the new allocation."""
    expire = max(run.channel_expired_s, 2 * run.heartbeat_s + EXPIRE_EXTRA_S)  # when a silent member goes
    limit = 2 * run.rebalance_s + 4 * run.heartbeat_s + 2.0  # the intervals alone would do it by then
    run.nursery.start_soon(run.monitor_locks)
    await trio.sleep(1.0)  # load first
    run.fault("member m3 joins")
    await run.start_member("m3")
    took = await run.takeover("m3 joins: served", ["m1", "m2", "m3"], limit)
    run.promise(f"a joining member holds its share within {JOIN_SERVED_S:g} s",
                took is not None and took <= JOIN_SERVED_S)

    await trio.sleep(1.0)
    await run.stop_member("m1")  # a clean close: it unregisters
    took = await run.takeover("m1 leaves: taken over", ["m2", "m3"], limit)
    run.promise(f"a leaving member's queues are held again within {JOIN_SERVED_S:g} s",
                took is not None and took <= JOIN_SERVED_S)

    await run.start_member_process("p1")
    await run.takeover("p1 (a process) joins: served", ["m2", "m3", "p1"], limit + 10)  # incl. its start
    run.signal_member("p1", signal.SIGKILL)
    took = await run.takeover("p1 SIGKILLed: taken over", ["m2", "m3"], limit)
    run.promise(f"a crashed member's queues are held again within {CRASH_TAKEN_OVER_S:g} s",
                took is not None and took <= CRASH_TAKEN_OVER_S)

    await run.start_member_process("p2")
    await run.takeover("p2 (a process) joins: served", ["m2", "m3", "p2"], limit + 10)
    run.signal_member("p2", signal.SIGSTOP)  # its connection stays open: only its silence tells
    took = await run.takeover("p2 SIGSTOPped: taken over", ["m2", "m3"], expire + limit)
    run.promise(f"a paused member's queues are held again within its expiry ({expire:g} s: channelExpiredTimeout, "
                "at least 2 heartbeats + 10 s) + 2 s", took is not None and took <= expire + 2.0)
    run.signal_member("p2", signal.SIGCONT)  # it heartbeats again and rejoins
    await run.takeover("p2 resumed: served again", ["m2", "m3", "p2"], limit)

    since = run.now()
    consumed = await run.wait_until(lambda: run.queues_consumed_since(since) == run.all_queues(),
                                    CONSUMPTION_RECOVER_S, "every queue consumed again")
    if consumed:
        run.report.consumption_recovered_s = run.now() - since
    run.promise("every queue is consumed after the changes", consumed)
    run.promise("every queue has one owner at a time", not run.overlaps)
    for overlap in run.overlaps[:10]:
        run.event(f"overlap: {overlap}")
    seen = run.broker_overlaps()
    run.promise("no member consumed a queue the brokers' lock tables gave to another", not seen)
    for overlap in seen[:10]:
        run.event(f"overlap (brokers' view): {overlap}")


from . import auto, orderly, promotion  # noqa: E402,F401  (promote, partition; auto-*, etcd-down; orderly)
