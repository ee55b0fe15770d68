"""NameServerRegistration and RoleState on their own (issue 22.6): a real name server in the
same trio run, a real store in tmp_path; no node process."""

from __future__ import annotations

import json

import attrs
import pytest
import trio

from cluster.namesrv import NameServer, NamesrvConfig
from node.config import load_config
from node.failover.promotion import ROLE_FILE, RoleState
from node.registration import NameServerRegistration
from node.tables.topics import TopicConfigManager
from store.config import BrokerRole
from store.epoch_file import EpochFileError
from store.message_store import open_store
from tests.node.nodeproc import free_port, master_conf
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol.namesrv import ClusterInfo


def test_role_state_round_trips_and_names_a_damaged_file(tmp_path) -> None:
    assert RoleState.load(str(tmp_path)) is None  # no file: the config file's role
    state = RoleState(0, BrokerRole.SYNC_MASTER.value, "promoted", since_ms=5, pending_epoch=3)
    state.save(str(tmp_path))
    assert RoleState.load(str(tmp_path)) == state
    (tmp_path / ROLE_FILE).write_text(json.dumps({"brokerId": 1, "brokerRole": "LEADER"}))
    with pytest.raises(EpochFileError, match=f"{ROLE_FILE}: cannot read the failover role"):
        RoleState.load(str(tmp_path))
    (tmp_path / ROLE_FILE).write_text("{torn")
    with pytest.raises(EpochFileError, match="cannot read the failover role"):
        RoleState.load(str(tmp_path))


async def _brokers(namesrv: str) -> list[dict]:
    async with connect(namesrv) as conn:
        return (await conn.call(ClusterInfo())).brokers


async def test_registers_with_every_name_server_at_once_on_a_change_and_unregisters(tmp_path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    async with trio.open_nursery() as nursery:
        namesrv = await nursery.start(NameServer(NamesrvConfig(listen_port=0), handle_signals=False).run)
        cfg = load_config(str(master_conf(tmp_path, role="ASYNC_MASTER", namesrvAddr=f"{namesrv};{dead}",
                                          registerNameServerPeriod=60_000)))
        topics = TopicConfigManager(str(tmp_path / "topics"), auto_create=True, default_queue_nums=4)
        answers: list[dict] = []
        async with open_store(cfg.store) as store:
            reg = NameServerRegistration(cfg, topics, store, on_master=answers.append, epoch=lambda: 1,
                                         changes=[topics.changes])
            await nursery.start(reg.run)
            registered = await wait_until(lambda: _brokers(namesrv), what="the first registration")
            assert [(b["broker_name"], b["broker_id"], b["epoch"]) for b in registered] == [("broker-t", 0, 1)]
            assert answers and answers[0].master_address == cfg.address and answers[0].master_epoch == 1
            await wait_until(lambda: reg.status()[1]["last_error"], what="the dead name server's error")
            assert reg.status()[0]["last_error"] is None and reg.status()[0]["last_register_ms"]

            await topics.create(  # registers at once (topics.changes), not at the next period
                "Fresh", 2, 2, 6)

            async def fresh_routed() -> bool:
                return any("Fresh" in (b.get("topics") or {}) for b in await _brokers(namesrv))
            await wait_until(fresh_routed, what="the new topic registered before the 60 s period")

            promoted = attrs.evolve(cfg, broker_id=0)
            await reg.announce(promoted, 7, timeout_s=2.0)
            assert [b["epoch"] for b in await _brokers(namesrv)] == [7]
        async with open_store(cfg.store) as store:
            reg2 = NameServerRegistration(cfg, topics, store, epoch=lambda: 7)
            await nursery.start(reg2.run)
            await wait_until(lambda: reg2.status()[0]["last_register_ms"], what="registered again")
            await reg2.shutdown(2.0)
            assert await _brokers(namesrv) == []  # unregistered: gone from the name server at once
        nursery.cancel_scope.cancel()


def test_a_node_without_name_servers_cannot_build_one(tmp_path) -> None:
    cfg = load_config(str(master_conf(tmp_path, role="ASYNC_MASTER")))
    topics = TopicConfigManager(str(tmp_path / "topics"), auto_create=True, default_queue_nums=4)
    with pytest.raises(ValueError, match="namesrvAddr is not set"):
        NameServerRegistration(cfg, topics, None)
