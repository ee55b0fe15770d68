"""A consumer-group member as its own process, for faults a process takes (SIGKILL,
SIGSTOP): `python -m cluster.drills.member NAMESRV GROUP TOPIC CLIENT_ID [HEARTBEAT_S
REBALANCE_S]` (default intervals: the client's, RocketMQ's 30 s / 20 s). Prints
`OWNED q1 q2 ...` whenever its queues change and `MSG <uniq key> <broker> <queue id>` per
message it consumed, so the drill (or a test) counts what it took."""

from __future__ import annotations

import sys

import trio

from ..client.push_consumer import Consumer
from ..client.rebalance import HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S


async def main(namesrv: str, group: str, topic: str, client_id: str, heartbeat_s: float, rebalance_s: float) -> None:
    def handle(msg) -> None:
        print("MSG", msg.properties.get("UNIQ_KEY") or msg.msg_id, msg.broker_name, msg.queue_id, flush=True)

    async with Consumer(group, topic, handle, namesrv=namesrv, heartbeat_interval_s=heartbeat_s,
                        rebalance_interval_s=rebalance_s, poll_ms=300, client_id=client_id) as consumer:
        last = None
        while True:
            owned = sorted(str(q) for q in consumer.owned if q.topic == topic)
            if owned != last:
                print("OWNED", *owned, flush=True)
                last = owned
            await trio.sleep(0.05)  # poll


if __name__ == "__main__":
    ns, group, topic, client = sys.argv[1:5]
    hb, rb = (float(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 else (HEARTBEAT_INTERVAL_S,
                                                                               REBALANCE_INTERVAL_S)
    trio.run(main, ns, group, topic, client, hb, rb)
