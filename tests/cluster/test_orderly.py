"""Orderly consumption against a real node (cluster/client/orderly.py): sharding keys keep a
key in one queue, members lease their queues on the master and consume each in order, a
failed message is retried in place and then dead-lettered, and a queue handed over on a
leave is continued in order without two members consuming it at once."""

from __future__ import annotations

import json

import pytest
import trio

from cluster.client import OrderlyConsumer, Producer
from cluster.client.routing import MessageQueue
from cluster.client.selectors import select_by_hash
from tests.cluster.helpers import broker_conf, call, cli, wait_for
from tests.cluster.test_consumer_group import setup_cluster
from tests.node.nodeproc import Nodes
from wire.client import connect
from wire.protocol import ConsumerHeartbeat, ConsumerList, ConsumerLock, Pull, Send

KEYS = [f"order-{i}" for i in range(8)]
FAST = dict(heartbeat_interval_s=0.5, rebalance_interval_s=1.0, poll_ms=200, suspend_s=0.2, lock_interval_s=1.0)


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


def test_select_by_hash_is_stable_and_spreads_keys() -> None:
    queues = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]
    picks = {k: select_by_hash(queues, k) for k in KEYS * 2}
    assert all(select_by_hash(list(queues), k) == picks[k] for k in KEYS)  # same key, same queue
    assert len(set(picks.values())) > 2
    with pytest.raises(ValueError):
        select_by_hash([], "k")


class Journal:
    """Each handler call: (member, key, seq, start, end, ok), in trio time."""

    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, str, int, float, float, bool]] = []
        self.fail = dict(fail or {})  # "key:seq" → failures left

    def handler(self, member: str):
        async def handle(msg) -> bool:
            key, seq = msg.body.decode().split(":")
            start = trio.current_time()
            await trio.sleep(0.002)  # poll-exempt: a handler that takes time, so an overlap would show
            left = self.fail.get(msg.body.decode(), 0)
            ok = left == 0
            if not ok:
                self.fail[msg.body.decode()] = left - 1 if left > 0 else left  # < 0: always fails
            self.calls.append((member, key, int(seq), start, trio.current_time(), ok))
            return ok
        return handle

    def first_done(self) -> dict[str, list[int]]:
        """Per key, the seqs in the order each was first consumed."""
        out: dict[str, list[int]] = {}
        for _, key, seq, *_rest, ok in sorted(self.calls, key=lambda c: c[4]):
            if ok and seq not in out.setdefault(key, []):
                out[key].append(seq)
        return out

    def overlaps(self, queue_of: dict[str, MessageQueue]) -> int:
        """Handler calls of two members on one queue at once (a double holder)."""
        n = 0
        for i, a in enumerate(self.calls):
            for b in self.calls[i + 1:]:
                if a[0] != b[0] and queue_of[a[1]] == queue_of[b[1]] and a[3] < b[4] and b[3] < a[4]:
                    n += 1
        return n


@pytest.mark.slow
async def test_orderly_members_consume_each_key_in_order_retry_in_place_and_dead_letter(tmp_path, nodes) -> None:
    topic, group = "Ord", "og"
    ns, master = await setup_cluster(tmp_path, nodes, topic, 4)
    journal = Journal(fail={"order-1:3": 2, "order-2:5": -1})  # order-2:5 never succeeds
    per_key = 12
    async with Producer(namesrv=ns.address) as producer:
        queue_of = {k: await producer.select_queue(topic, k) for k in KEYS}
        for seq in range(per_key):
            for k in KEYS:
                sent = await producer.send(topic, f"{k}:{seq}", sharding_key=k)
                assert (sent.broker_name, sent.queue_id) == (queue_of[k].broker_name, queue_of[k].queue_id)
    opts = dict(namesrv=ns.address, max_reconsume_times=2, **FAST)
    async with (OrderlyConsumer(group, topic, journal.handler("a"), client_id="a", **opts) as a,
                OrderlyConsumer(group, topic, journal.handler("b"), client_id="b", **opts) as b):
        async def all_done() -> bool:
            done = journal.first_done()
            return all(len(done.get(k, [])) == per_key - (k == "order-2") for k in KEYS)
        await wait_for(all_done, timeout=40, what="every key consumed")
        locks = (await call(master.address, ConsumerList(group=group))).locks
        assert {k for k in locks} == {f"{topic}:{q}" for q in range(4)}
        assert set(locks.values()) == {"a", "b"} and len(a.owned) == len(b.owned) == 2
    done = journal.first_done()
    for k in KEYS:
        assert done[k] == [s for s in range(per_key) if (k, s) != ("order-2", 5)], k
    # retried in place: order-1:3 failed twice, then succeeded, and nothing after it in its
    # queue was consumed in between
    tries = [c for c in journal.calls if c[1:3] == ("order-1", 3)]
    assert [c[5] for c in tries] == [False, False, True]
    behind = [c for c in journal.calls if queue_of[c[1]] == queue_of["order-1"] and c[1:3] != ("order-1", 3)
              and c[3] > tries[0][4] and c[4] < tries[-1][3]]
    assert behind == []
    poison = [c for c in journal.calls if c[1:3] == ("order-2", 5)]
    assert len(poison) == 3  # the first try and max_reconsume_times (2) retries
    assert a.stats.dead + b.stats.dead == 1
    [dead] = (await call(master.address, Pull(topic=f"%DLQ%{group}", queue_id=0, offset=0))).messages
    assert dead.body == b"order-2:5"
    assert journal.overlaps(queue_of) == 0
    # the members unlocked their queues as they left
    assert (await call(master.address, ConsumerList(group=group))).locks == {}


@pytest.mark.slow
async def test_a_queue_handed_over_on_a_leave_continues_in_order(tmp_path, nodes) -> None:
    topic, group = "Hand", "hg"
    ns, master = await setup_cluster(tmp_path, nodes, topic, 2)
    journal = Journal()
    opts = dict(namesrv=ns.address, **FAST)
    async with Producer(namesrv=ns.address) as producer:
        queue_of = {k: await producer.select_queue(topic, k) for k in KEYS}
        async with OrderlyConsumer(group, topic, journal.handler("a"), client_id="a", **opts) as a:
            b = OrderlyConsumer(group, topic, journal.handler("b"), client_id="b", **opts)
            async with b:
                await wait_for(lambda: _true(len(a.owned) == len(b.owned) == 1), what="one queue each")
                for seq in range(10):
                    for k in KEYS:
                        await producer.send(topic, f"{k}:{seq}", sharding_key=k)
                await wait_for(lambda: _true(len(journal.calls) >= 40), what="some consumed")
            # b left (committing and unlocking): a takes its queue from b's committed offset
            for seq in range(10, 20):
                for k in KEYS:
                    await producer.send(topic, f"{k}:{seq}", sharding_key=k)

            async def all_done() -> bool:
                return all(len(journal.first_done().get(k, [])) == 20 for k in KEYS)
            await wait_for(all_done, timeout=30, what="every key consumed after the leave")
            assert len(a.owned) == 2
    assert all(journal.first_done()[k] == list(range(20)) for k in KEYS)
    assert journal.overlaps(queue_of) == 0


async def _true(value: bool) -> bool:
    return value


@pytest.mark.slow
async def test_cli_sends_by_sharding_key_and_consumes_orderly(tmp_path, nodes) -> None:
    topic, group = "CliOrd", "cg"
    ns, _ = await setup_cluster(tmp_path, nodes, topic, 4)
    for key in ("a", "b"):
        sent = cli("send", "-n", ns.address, "-t", topic, "--sharding-key", key, "--count", "3", f"{key}-{{i}}")
        assert sent.returncode == 0, sent.stderr.decode()
        assert len({json.loads(line)["queue_id"] for line in sent.stdout.splitlines()}) == 1
    out = cli("consume", "-n", ns.address, "-t", topic, "-g", group, "--orderly", "--max", "6")
    assert out.returncode == 0, out.stderr.decode()
    bodies = [json.loads(line)["body"] for line in out.stdout.splitlines()]
    for key in ("a", "b"):
        assert [b for b in bodies if b.startswith(key)] == [f"{key}-{i}" for i in range(3)]


@pytest.mark.slow
async def test_a_master_restarted_over_its_data_fences_leases_but_not_their_holders(tmp_path, nodes) -> None:
    """Leases the master granted before it went are not in its new table: for 30 s it
    grants a lease only to a member that claims it (`renew`); membership locks are not fenced."""
    conf = broker_conf(tmp_path, "m", "broker-a", None)
    node = nodes.start(conf)
    await call(node.address, Send(topic="T", body=b"data"))
    node.stop()
    node = nodes.start(conf)
    async with connect(node.address) as conn:
        for member in ("holder", "newcomer"):
            await conn.call(ConsumerHeartbeat(group="g", client_id=member, topics=["T"]))

        async def lock(member: str, queue_ids: list[int], **kw) -> list[int]:
            return (await conn.call(ConsumerLock(group="g", client_id=member, topic="T", queue_ids=queue_ids,
                                                 **kw))).locked
        assert await lock("newcomer", [0, 1], life_ms=60_000) == []
        assert await lock("holder", [0], life_ms=60_000, renew=True) == [0]
        assert await lock("newcomer", [0], life_ms=60_000, renew=True) == []  # one claim wins
        assert await lock("newcomer", [2]) == [2]
