"""node/failover/etcd.py against a real etcd: leases, keys, the election transaction, errors."""

from __future__ import annotations

import pytest
import trio

from cluster.launch.etcd_server import EtcdServer
from node.failover.etcd import (
    EtcdClient,
    EtcdError,
    WatchEvent,
    cmp_absent,
    cmp_lease,
    op_get,
    op_get_prefix,
    op_put,
    parse_endpoints,
)
from tests.node.nodeproc import free_port

pytestmark = pytest.mark.slow


def client(etcd: EtcdServer) -> EtcdClient:
    return EtcdClient(parse_endpoints(etcd.endpoint))


async def test_put_get_prefix_and_missing_key(etcd: EtcdServer) -> None:
    async with client(etcd) as c:
        assert await c.get("/t/none") is None
        rev = await c.put("/t/a/1", '{"x": 1}')
        await c.put("/t/a/2", b"\x00\xff")
        await c.put("/t/b", "other")
        kv = await c.get("/t/a/1")
        assert kv is not None and kv.json() == {"x": 1} and kv.create_revision == rev
        [under] = (await c.txn([], [op_get_prefix("/t/a/")], [])).ranges  # what the controller's tick reads
        assert [kv.key for kv in under] == ["/t/a/1", "/t/a/2"]
        assert (await c.get("/t/a/2")).value == b"\x00\xff"


async def test_campaign_has_one_winner_and_the_key_dies_with_its_lease(etcd: EtcdServer) -> None:
    async with client(etcd) as c:
        a, b = await c.grant(1), await c.grant(5)
        won = [await c.txn([cmp_absent("/t/m")], [op_put("/t/m", name, lease=lease)], [op_get("/t/m")])
               for name, lease in (("a", a), ("b", b))]
        assert [w.succeeded for w in won] == [True, False]
        assert won[1].ranges[0][0].value == b"a" and won[1].ranges[0][0].lease == a
        assert (await c.txn([cmp_lease("/t/m", b)], [op_put("/t/m", "b")], [])).succeeded is False
        assert await c.keepalive(b) == 5
        # a's lease of 1 s is not renewed: etcd deletes the key, then b can take it

        async def gone() -> None:
            while await c.get("/t/m") is not None:
                await trio.sleep(0.1)  # poll
        with trio.fail_after(5):
            await gone()
        assert await c.keepalive(a) == 0
        assert (await c.txn([cmp_absent("/t/m")], [op_put("/t/m", "b", lease=b)], [])).succeeded
        await c.revoke(b)
        assert await c.get("/t/m") is None


async def test_watch_streams_puts_and_deletes_under_a_prefix_with_the_previous_value(etcd: EtcdServer) -> None:
    seen: list[WatchEvent] = []
    created = trio.Event()
    async with client(etcd) as c, trio.open_nursery() as nursery:
        nursery.start_soon(lambda: c.watch("/w/", seen.extend, on_created=created.set))
        with trio.fail_after(5):
            await created.wait()
        lease = await c.grant(5)
        await c.put("/w/m", "one", lease=lease)
        await c.put("/elsewhere", "not watched")
        await c.put("/w/m", "two", lease=lease)
        await c.revoke(lease)  # the lease's end deletes its keys: a DELETE event

        async def three() -> None:
            while len(seen) < 3:
                await trio.sleep(0.05)  # poll: the events arrive on the stream
        with trio.fail_after(5):
            await three()
        nursery.cancel_scope.cancel()
    assert [(e.type, e.kv.key, e.kv.value) for e in seen] == [("PUT", "/w/m", b"one"), ("PUT", "/w/m", b"two"),
                                                              ("DELETE", "/w/m", b"")]
    assert seen[0].kv.lease == lease and seen[2].prev is not None and seen[2].prev.value == b"two"


async def test_a_watch_on_a_dead_endpoint_is_an_error_naming_it() -> None:
    port = free_port()
    async with EtcdClient(parse_endpoints(f"127.0.0.1:{port}"), timeout_s=0.5) as c:
        with pytest.raises(EtcdError, match=f"kept a watch.*127.0.0.1:{port}"):
            await c.watch("/w/", lambda events: None)


async def test_unreachable_endpoint_is_an_error_naming_it() -> None:
    port = free_port()
    async with EtcdClient(parse_endpoints(f"127.0.0.1:{port}"), timeout_s=0.5) as c:
        with pytest.raises(EtcdError, match=f"127.0.0.1:{port}"):
            await c.get("/x")


async def test_a_dead_endpoint_is_skipped_for_a_live_one(etcd: EtcdServer) -> None:
    async with EtcdClient(parse_endpoints(f"127.0.0.1:{free_port()};{etcd.endpoint}")) as c:
        await c.put("/t/k", "v")
        assert (await c.get("/t/k")).value == b"v"


@pytest.mark.parametrize("bad", ["", ";", "localhost", "h:0", "h:x", "h:70000"])
def test_bad_endpoints_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_endpoints(bad)
