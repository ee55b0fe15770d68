"""A consumer-group member as its own process (for crash tests and drills):
`python -m tests.cluster.group_member NAMESRV GROUP TOPIC HEARTBEAT_S REBALANCE_S`.
Prints `OWNED q1 q2 ...` whenever its queues change and `MSG <uniq key>` per message."""

from __future__ import annotations

import sys

import trio

from cluster.client.push_consumer import Consumer


async def main(namesrv: str, group: str, topic: str, heartbeat_s: float, rebalance_s: float) -> None:
    def handle(msg) -> None:
        print("MSG", msg.properties.get("UNIQ_KEY") or msg.msg_id, flush=True)

    async with Consumer(group, topic, handle, namesrv=namesrv, heartbeat_interval_s=heartbeat_s,
                        rebalance_interval_s=rebalance_s, poll_ms=300) as consumer:
        print("CLIENT", consumer.client_id, flush=True)
        last = None
        while True:
            owned = sorted(str(q) for q in consumer.owned if q.topic == topic)
            if owned != last:
                print("OWNED", *owned, flush=True)
                last = owned
            await trio.sleep(0.05)  # poll


if __name__ == "__main__":
    ns, group, topic, hb, rb = sys.argv[1:6]
    trio.run(main, ns, group, topic, float(hb), float(rb))
