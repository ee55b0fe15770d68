"""The promotion drills `tidemq drill NAME` runs (framework: cluster/drills/framework.py).

- `promote`: SIGKILL broker-a's master, promote its slave (a new epoch), keep producing to
  broker-a; restart the old master. Promises: the slave serves as master with the next
  epoch, holding every committed offset the master answered (SYNC_MASTER); producers
  write to broker-a again; the old master truncates any unreplicated tail and rejoins as
  a slave, its report naming what it dropped; no acknowledged message was among what it
  dropped; nothing acknowledged is lost (the framework's check); the messages delivered
  again after the promotion are only ones consumed but not committed at the kill.
- `partition`: SIGSTOP broker-a's master past haHousekeepingInterval (its slave drops it),
  promote the slave, SIGCONT the old master. Promises: the old master fences itself — a
  write sent to it answers SERVICE_NOT_AVAILABLE naming the new epoch, so in a SYNC_MASTER
  group it answers no write PUT_OK after the promotion — and rejoins as a slave; whatever
  it took before it fenced is reported and truncated (ASYNC_MASTER); nothing
  acknowledged is lost.
"""

from __future__ import annotations

from typing import Any

import trio

from wire.client import ConnectionLost, TidemqError, connect
from wire.protocol import GetStatus, Send, StatusReply

from ..client.admin import Admin
from .framework import TOPIC, DrillRun, drill

PROBE_S = 10.0
"""How long the partition drill tries to reach the resumed old master."""

GROUP = "broker-a"
PROMOTE_TIMEOUT_S = 30.0
REJOIN_TIMEOUT_S = 60.0
PRODUCERS_RECOVER_S = 15.0
CPP_PRODUCERS_RECOVER_S = 45.0
"""The C++ client (`--client rocketmq`) refreshes a route every 30 s and only then sees the
new master: until then its retries take broker-b."""
CONSUMPTION_RECOVER_S = 30.0


async def _status(address: str) -> StatusReply:
    async with connect(address, connect_timeout=2.0, request_timeout=5.0) as conn:
        return await conn.call(GetStatus())


async def _promote(run: DrillRun) -> dict[str, Any] | None:
    async with Admin(namesrv=run.namesrv) as admin:
        try:
            result = await admin.promote(GROUP, 1, timeout=PROMOTE_TIMEOUT_S)
        except TidemqError as e:
            run.event(f"promotion failed: {e}")
            return None
    run.event(f"{result['address']} promoted: epoch {result['epoch']} from offset {result['start_offset']}, "
              f"{result['role']}")
    return result


async def _writes_reach(run: DrillRun, address: str, start_offset: int) -> bool:
    """The producers store on the new master (its log grows past the epoch's start)."""
    async def grew() -> bool:
        return (await _status(address)).max_phy_offset > start_offset
    limit = CPP_PRODUCERS_RECOVER_S if run.client == "rocketmq" else PRODUCERS_RECOVER_S
    return await run.wait_until(grew, limit, f"producers write to broker-a's new master {address}")


async def _rejoined(run: DrillRun, address: str) -> StatusReply | None:
    """Wait until the old master serves as a slave of the new one and has caught up."""
    found: list[StatusReply] = []

    async def slave() -> bool:
        s = await _status(address)
        if s.role == "SLAVE" and s.ha.connected:
            found.append(s)
            return True
        return False

    if not await run.wait_until(slave, REJOIN_TIMEOUT_S, f"the old master {address} rejoined as a slave"):
        return None
    return found[-1]


async def _consumed_again(run: DrillRun) -> None:
    """Every queue (broker-a's on its new master) consumed again since the fault."""
    fault = run.fault_at
    assert fault is not None
    again = await run.wait_until(lambda: run.queues_consumed_since(fault) == run.all_queues(),
                                 CONSUMPTION_RECOVER_S, "every queue consumed again")
    if again:
        run.report.consumption_recovered_s = run.now() - fault
    run.promise(f"every queue is consumed again within {CONSUMPTION_RECOVER_S:g} s", again)


def _check_truncation(run: DrillRun, rejoined: StatusReply, old_address: str) -> None:
    report = rejoined.last_truncation
    if report is None:
        run.event("the old master had nothing to truncate")
        return
    run.event(f"the old master truncated [{report.from_offset}, {report.to_offset}): "
              f"{report.message_count} message(s): {', '.join(report.msg_ids[:5])}"
              f"{' ...' if len(report.msg_ids) > 5 else ''}")
    run.promise("the truncation report names every dropped message",
                report.message_count == len(report.msg_ids) or len(report.msg_ids) >= 10_000)
    run.promise("the truncation is in the old master's log",
                "dropped CommitLog" in run.node_log("broker-a"))


@drill("promote", "SIGKILL broker-a's master, promote its slave, restart the old master: it truncates and rejoins")
async def promote(run: DrillRun) -> None:
    await trio.sleep(1.0)  # steady load before the fault
    old = run.address("broker-a")
    new = run.address("broker-a-s")
    await run.hold_and_note_commits(old)
    run.fault("SIGKILL broker-a (master)")
    await run.kill("broker-a", "KILL")
    await run.judge_commits_on(new, "broker-a's slave")  # what the promotion carries (no client commits to a slave)
    result = await _promote(run)
    run.gate.set()
    run.promise("broker-a's slave is promoted with a new epoch", result is not None and result["epoch"] >= 2)
    _judge_commits(run)
    if result is None:
        return
    run.promise("producers write to broker-a again (its new master)",
                await _writes_reach(run, new, result["start_offset"]))
    await _consumed_again(run)
    await trio.sleep(1.0)  # load on the new master
    await run.start("broker-a")
    rejoined = await _rejoined(run, old)
    run.promise("the old master rejoins as a slave", rejoined is not None)
    if rejoined is not None:
        run.promise("the old master follows the new epoch", rejoined.epoch == result["epoch"])
        _check_truncation(run, rejoined, old)
    _judge_redelivery(run)


def _judge_redelivery(run: DrillRun) -> None:
    again = run.redelivered_committed()
    if again:
        run.event(f"delivered again though committed: {', '.join(sorted(again)[:5])}{' ...' if len(again) > 5 else ''}")
    run.promise("messages delivered again after the fault were consumed but not committed", not again)


def _judge_commits(run: DrillRun) -> None:
    """SYNC_MASTER: every commit answered OK is on the slave (node/offset_stream.py)."""
    run.promise("no committed offset is lost (the slave had every commit the master answered)",
                run.report.committed_offsets_lost == 0)


async def _probe_old_master(old: str, epoch: int) -> tuple[bool, str]:
    """Send one write to the resumed old master: (fenced, what it said). A node that fenced
    itself may be between terms (its client port closed while it restarts as a slave), so a
    refused connection is tried again for a few seconds; fenced is a SERVICE_NOT_AVAILABLE
    naming the new epoch, or the slave's refusal once it rejoined."""
    why = "no answer"
    with trio.move_on_after(PROBE_S):
        while True:
            try:
                async with connect(old, connect_timeout=2.0, request_timeout=10.0) as conn:
                    answer = await conn.call(Send(topic=TOPIC, body=b"probe after the promotion"))
                return False, f"answered {answer.status.value}"
            except ConnectionLost as e:
                why = e.message
                await trio.sleep(0.2)  # poll: the node is restarting its term
            except TidemqError as e:
                fenced = e.status == "SERVICE_NOT_AVAILABLE" and (f"epoch {epoch}" in e.message
                                                                  or "is a SLAVE" in e.message)
                return fenced, e.message
    return False, f"no answer within {PROBE_S:g} s: {why}"


@drill("partition", "SIGSTOP broker-a's master, promote its slave, SIGCONT: the old master fences itself")
async def partition(run: DrillRun) -> None:
    await trio.sleep(1.0)
    old = run.address("broker-a")
    new = run.address("broker-a-s")
    run.fault("SIGSTOP broker-a (master)")
    await run.kill("broker-a", "STOP")
    try:
        async def dropped() -> bool:
            return not (await _status(new)).ha.connected
        run.promise("the slave drops the silent master (haHousekeepingInterval)",
                    await run.wait_until(dropped, 60, "broker-a's slave dropped its paused master"))
        result = await _promote(run)
    finally:
        await run.kill("broker-a", "CONT")
    run.promise("broker-a's slave is promoted with a new epoch", result is not None and result["epoch"] >= 2)
    if result is None:
        return
    refused, why = await _probe_old_master(old, result["epoch"])
    run.event(f"a write to the old master after SIGCONT: {why}")
    run.promise("the resumed old master fences itself (no write PUT_OK after the promotion)", refused)
    run.promise("producers write to broker-a again (its new master)",
                await _writes_reach(run, new, result["start_offset"]))
    await _consumed_again(run)
    rejoined = await _rejoined(run, old)
    run.promise("the fenced old master rejoins as a slave", rejoined is not None)
    if rejoined is not None:
        _check_truncation(run, rejoined, old)
