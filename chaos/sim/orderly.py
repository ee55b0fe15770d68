"""The simulation's orderly consumer (cluster/client/orderly.py), when a run asks for it
(`--orderly`): two members of group `sim-orderly` on the client host read the topic every
producer writes; the second joins a third into the load and leaves at two thirds, so
queues change hands while the schedule's faults strike. Each handler call takes a few
simulated milliseconds (drawn from the message), so two members running one queue at once,
or one member running a queue's messages side by side, would show.

Its promises, judged at the end: each queue's messages are first consumed in queue order
(a redelivery of one already consumed is a duplicate, not a violation; a queue whose
offsets were reused by an unclean promotion, one offset seen with two messages, is not
judged), and no two members run the handler on one queue at once.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

import attrs
import trio

from cluster.client.base import ReceivedMessage
from cluster.client.orderly import OrderlyConsumer

from .cluster import CLIENT_HOST, NAMESRV_ADDRESS
from .load import TOPIC
from .network import SimNetwork
from .schedule import Schedule

__all__ = ["ORDERLY_GROUP", "SimOrderly", "judge_orderly"]

ORDERLY_GROUP = "sim-orderly"
HANDLER_MS = (20, 120)
"""A handler call's simulated duration, drawn per message in this range."""


@attrs.frozen
class Handled:
    member: str
    queue: tuple[str, int]  # broker name, queue id
    offset: int
    msg_id: str
    start: float
    end: float


class SimOrderly:
    """Two orderly members and what their handlers did."""

    def __init__(self, network: SimNetwork, schedule: Schedule) -> None:
        self.network = network
        self.schedule = schedule
        self.calls: list[Handled] = []

    def _handler(self, member: str) -> Callable[[ReceivedMessage], Awaitable[None]]:
        async def handle(msg: ReceivedMessage) -> None:
            start = trio.current_time()
            lo, hi = HANDLER_MS
            await trio.sleep((lo + zlib.crc32(msg.msg_id.encode()) % (hi - lo)) / 1000)  # poll: simulated time (the handler's work)
            self.calls.append(Handled(member, (msg.broker_name or "", msg.queue_id), msg.queue_offset, msg.msg_id,
                                      start, trio.current_time()))
        return handle

    async def _member(self, name: str, until: trio.Event) -> None:
        async with OrderlyConsumer(ORDERLY_GROUP, TOPIC, self._handler(name), namesrv=NAMESRV_ADDRESS,
                                   client_id=f"{CLIENT_HOST}@orderly@{name}", heartbeat_interval_s=1.0,
                                   rebalance_interval_s=5.0, lock_interval_s=5.0, poll_ms=1000, route_ttl_s=5.0,
                                   request_timeout=3.0, net=self.network.host(CLIENT_HOST)):
            await until.wait()

    async def run(self, stop: trio.Event) -> None:
        """m1 from the start, m2 from a third of the load to two thirds, until `stop`."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._member, "m1", stop)
            leave = trio.Event()
            await trio.sleep(self.schedule.span / 3)  # poll: simulated time (the member joins then)
            nursery.start_soon(self._member, "m2", leave)
            with trio.move_on_after(self.schedule.span / 3):
                await stop.wait()
            leave.set()


def judge_orderly(calls: list[Handled]) -> list[str]:
    """The orderly promises' violations (see the module docstring)."""
    by_queue: dict[tuple[str, int], list[Handled]] = {}
    for c in calls:
        by_queue.setdefault(c.queue, []).append(c)
    out_of_order: list[str] = []
    doubles: list[str] = []
    for queue, cs in sorted(by_queue.items()):
        ids: dict[int, set[str]] = {}
        for c in cs:
            ids.setdefault(c.offset, set()).add(c.msg_id)
        if all(len(v) == 1 for v in ids.values()):  # else an unclean promotion reused offsets
            first: set[int] = set()
            highest = -1
            for c in sorted(cs, key=lambda c: c.end):
                if c.offset in first:
                    continue
                first.add(c.offset)
                if c.offset < highest:
                    out_of_order.append(f"{queue[0]}:{queue[1]} offset {c.offset} first consumed after {highest}")
                highest = max(highest, c.offset)
        running: Handled | None = None
        for c in sorted(cs, key=lambda c: c.start):
            if running is not None and c.member != running.member and c.start < running.end:
                doubles.append(f"{queue[0]}:{queue[1]}: {running.member} and {c.member} at {c.start:.3f} s")
            if running is None or c.end > running.end:
                running = c
    out = []
    if out_of_order:
        out.append(f"orderly: {len(out_of_order)} message(s) consumed out of queue order: {out_of_order[:3]}")
    if doubles:
        out.append(f"orderly: {len(doubles)} handler call(s) while another member ran the queue: {doubles[:3]}")
    return out
