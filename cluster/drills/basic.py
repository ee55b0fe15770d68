"""The drills `tidemq drill NAME` runs (framework: cluster/drills/framework.py).

- `kill-master`: SIGKILL broker-a's master under load. Promises: producers move to
  broker-b within 10 s with no send failing beyond the retry budget; the group consumes
  broker-a's queues from its slave; after the restart the master recovers abnormally,
  the slave catches up and consumption returns to the master; nothing acknowledged is lost.
- `rebalance`: members join and leave under load. Promises: every queue has one owner at
  a time; after each change the members split all 8 queues within two rebalance
  intervals; nothing acknowledged is skipped.
"""

from __future__ import annotations

import trio

from ..client.rebalance import allocate_averagely
from .framework import DrillRun, drill

PRODUCERS_RECOVER_S = 10.0
CONSUMPTION_RECOVER_S = 30.0


@drill("kill-master", "SIGKILL broker-a's master, read its queues from the slave, restart it")
async def kill_master(run: DrillRun) -> None:
    await trio.sleep(1.0)  # steady load before the fault
    run.gate = trio.Event()  # hold the handlers a moment: every queue gets a backlog
    await trio.sleep(1.0)
    run.fault("SIGKILL broker-a (master)")
    await run.kill("broker-a", "KILL")
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


@drill("rebalance", "members join and leave under load; one owner per queue, nothing skipped")
async def rebalance(run: DrillRun) -> None:
    limit = 2 * run.rebalance_s + 4 * run.heartbeat_s + 2.0
    slowest = 0.0
    steps = [("start", "m3"), ("stop", "m1"), ("start", "m4"), ("stop", "m2")]
    for i, (action, member) in enumerate(steps):
        await trio.sleep(1.0)  # load between changes
        changed_at = run.now()
        if i == 0:
            run.fault(f"member {member} joins")
        if action == "start":
            await run.start_member(member)
        else:
            await run.stop_member(member)
        wanted = sorted(m.client_id for m in run.members.values())

        def settled(wanted: list[str] = wanted) -> bool:
            queues = sorted(run.all_queues())
            return all(
                {q for q in m.owned if q.topic == queues[0].topic} == set(allocate_averagely(queues, wanted, m.client_id))
                for m in run.members.values()
            )

        ok = await run.wait_until(settled, limit, f"queues re-allocated over {len(wanted)} members")
        run.promise(f"after {action} {member} the members own the averagely allocated queues within {limit:g} s", ok)
        if ok:
            since = run.now()
            if await run.wait_until(lambda since=since: run.queues_consumed_since(since) == run.all_queues(),
                                    CONSUMPTION_RECOVER_S, "every queue consumed again"):
                slowest = max(slowest, run.now() - changed_at)
    run.report.consumption_recovered_s = slowest
    run.promise("every queue has one owner at a time", not run.overlaps)
    for overlap in run.overlaps[:10]:
        run.event(f"overlap: {overlap}")


from . import auto, promotion  # noqa: E402,F401  (promote, partition; auto-*, etcd-down)
