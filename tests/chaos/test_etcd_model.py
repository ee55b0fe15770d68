"""The in-memory etcd (chaos/sim/etcd_model.py) against a real etcd: the same operation
sequences (hypothesis) give the same answers and the same watch events. Revisions count
from where each store started, lease ids are matched by grant order, and each example
works under a prefix of its own."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.sim.etcd_model import MIN_TTL_S, EtcdModel
from node.failover.etcd import (
    EtcdClient,
    EtcdError,
    KeyValue,
    WatchEvent,
    cmp_absent,
    cmp_lease,
    cmp_mod_revision,
    op_get,
    op_get_prefix,
    op_put,
    parse_endpoints,
)
from tests.examples import examples

pytestmark = pytest.mark.slow  # a real etcd

KEYS = ["a", "b", "c"]
SLOTS = [0, 1]
TTL_S = 60  # no lease runs out while an example runs: the model's expiry is tested alone
UNGRANTED = 0x7EADBEEF

keys = st.sampled_from(KEYS)
values = st.binary(max_size=6)
leases = st.none() | st.sampled_from(SLOTS)
puts = st.tuples(st.just("put"), keys, values, leases)
gets = st.tuples(st.just("get"), keys)
compares = st.one_of(
    st.tuples(st.just("absent"), keys),
    st.tuples(st.just("mod"), keys, st.integers(0, 12)),
    st.tuples(st.just("lease"), keys, leases),
)
txn_ops = st.lists(st.one_of(puts, gets, st.just(("prefix",))), max_size=3)
operations = st.lists(st.one_of(
    st.tuples(st.just("grant"), st.sampled_from(SLOTS)),
    st.tuples(st.just("revoke"), st.sampled_from(SLOTS)),
    st.tuples(st.just("keepalive"), st.sampled_from(SLOTS)),
    puts, gets,
    st.tuples(st.just("txn"), st.lists(compares, max_size=2), txn_ops, txn_ops),
), min_size=1, max_size=25)


class Runner:
    """Runs operations on one store; answers in terms both stores share."""

    def __init__(self, etcd: Any, prefix: str, base: int) -> None:
        self.etcd, self.prefix, self.base = etcd, prefix, base
        self.slots: dict[int, int] = {}  # slot → lease id of its latest grant
        self.granted: list[int] = []  # lease ids in grant order: how both stores name a lease
        self.events: list[list[WatchEvent]] = []

    def lease(self, slot: int | None) -> int:
        return 0 if slot is None else self.slots.get(slot, UNGRANTED)

    def kv(self, kv: KeyValue | None) -> Any:
        if kv is None:
            return None
        lease = f"grant {self.granted.index(kv.lease)}" if kv.lease in self.granted else kv.lease and "other"
        return (kv.key.removeprefix(self.prefix), kv.value, self.rev(kv.create_revision), self.rev(kv.mod_revision),
                lease)

    def rev(self, revision: int) -> int:
        return revision - self.base if revision else 0

    def batches(self) -> list[Any]:
        return [[(e.type, self.kv(e.kv), self.kv(e.prev)) for e in batch] for batch in self.events]

    def op(self, o: tuple) -> Any:
        key = self.prefix + o[1] if o[0] in ("put", "get") else ""
        if o[0] == "put":
            return op_put(key, o[2], lease=self.lease(o[3]))
        if o[0] == "get":
            return op_get(key)
        return op_get_prefix(self.prefix)

    def compare(self, c: tuple) -> dict[str, Any]:
        key = self.prefix + c[1]
        if c[0] == "absent":
            return cmp_absent(key)
        if c[0] == "mod":
            return cmp_mod_revision(key, self.base + c[2] if c[2] else 0)
        return cmp_lease(key, self.lease(c[2]))

    async def run(self, o: tuple) -> Any:
        try:
            return await self._run(o)
        except EtcdError:
            return "refused"

    async def _run(self, o: tuple) -> Any:
        etcd = self.etcd
        if o[0] == "grant":
            self.slots[o[1]] = lease = await etcd.grant(TTL_S)
            self.granted.append(lease)
            return "granted"
        if o[0] == "revoke":
            return await etcd.revoke(self.lease(o[1]))
        if o[0] == "keepalive":
            return await etcd.keepalive(self.lease(o[1]))
        if o[0] == "put":
            return self.rev(await etcd.put(self.prefix + o[1], o[2], lease=self.lease(o[3])))
        if o[0] == "get":
            return self.kv(await etcd.get(self.prefix + o[1]))
        result = await etcd.txn([self.compare(c) for c in o[1]], [self.op(x) for x in o[2]],
                                [self.op(x) for x in o[3]])
        return (result.succeeded, self.rev(result.revision), [[self.kv(kv) for kv in r] for r in result.ranges])


async def play(etcd: Any, prefix: str, ops: list[tuple]) -> tuple[list[Any], list[Any]]:
    """Every answer, then every watch batch once the last write's revision arrived."""
    base = (await etcd.txn([], [], [])).revision
    runner = Runner(etcd, prefix, base)
    async with trio.open_nursery() as nursery:
        created = trio.Event()
        nursery.start_soon(lambda: etcd.watch(prefix, runner.events.append, on_created=created.set))
        with trio.fail_after(10):
            await created.wait()
        answers = [await runner.run(o) for o in ops]
        last = runner.rev((await etcd.txn([], [], [])).revision)
        with trio.fail_after(10):
            while last and not (runner.events and runner.rev(runner.events[-1][-1].kv.mod_revision) == last):
                await trio.sleep(0.01)  # poll: the real watch streams over HTTP
        nursery.cancel_scope.cancel()
    return answers, runner.batches()


_examples = itertools.count()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_the_model_answers_as_etcd_does(etcd, ops) -> None:
    prefix = f"/model-check/{next(_examples)}/"

    async def both() -> tuple[Any, Any]:
        async with EtcdClient(parse_endpoints(etcd.endpoint), timeout_s=5.0) as client:
            real = await play(client, prefix, ops)
        return real, await play(EtcdModel(revision=1000), prefix, ops)
    real, model = trio.run(both)
    assert model[0] == real[0], ops
    assert model[1] == real[1], ops


async def test_a_lease_ends_at_its_deadline_and_its_keys_go_in_one_revision(autojump_clock) -> None:
    """No keep-alive: the keys go at the TTL (at least MIN_TTL_S), one DELETE revision with
    the previous values, seen by a watch although nothing calls; a renewed lease lives on."""
    etcd = EtcdModel()
    events: list[list[WatchEvent]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(etcd.run)
        nursery.start_soon(etcd.watch, "/k/", events.append)
        short, kept = await etcd.grant(1), await etcd.grant(5)
        assert await etcd.keepalive(short) == MIN_TTL_S
        await etcd.put("/k/a", "1", lease=short)
        rev = await etcd.put("/k/b", "2", lease=short)
        await etcd.put("/k/c", "3", lease=kept)
        await trio.sleep(MIN_TTL_S - 0.01)  # poll-exempt: the mock clock's own step
        assert await etcd.get("/k/a") is not None
        await etcd.keepalive(kept)
        await trio.sleep(0.02)  # poll-exempt: past the short lease's deadline
        assert [e.type for e in events[-1]] == ["DELETE", "DELETE"]
        assert [(e.kv.key, e.kv.mod_revision, e.prev.value) for e in events[-1]] == [
            ("/k/a", rev + 2, b"1"), ("/k/b", rev + 2, b"2")]
        assert await etcd.keepalive(short) == 0
        with pytest.raises(EtcdError, match="lease not found"):
            await etcd.put("/k/a", "x", lease=short)
        assert (await etcd.get("/k/c")).value == b"3"
        await trio.sleep(5.01)  # poll-exempt: the kept lease runs out too
        assert await etcd.get("/k/c") is None
        nursery.cancel_scope.cancel()
