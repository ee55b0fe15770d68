"""Consumer groups' broker-side settings (mqadmin updateSubGroup): stored in
subscriptionGroup.json, enforced by pull and send-back, copied by a slave's sync."""

from __future__ import annotations

import json

import pytest

from node.slave_sync import SlaveSync
from node.tables.jsonfile import ConfigFileError
from node.tables.offsets import ConsumerOffsetManager
from node.tables.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from node.tables.topics import TopicConfigManager
from tests.node.nodeproc import master_conf, slave_conf
from tests.node.test_ops import send, serving_ops
from wire.client import NoPermission, ServiceUnavailable
from wire.protocol import (
    NODE_REQUESTS,
    ConsumerHeartbeat,
    ConsumerSendBack,
    Pull,
    Status,
    SubGroupList,
    SubGroupUpdate,
    TopicCreate,
)


async def test_settings_persist_and_a_partial_update_keeps_the_rest(tmp_path) -> None:
    groups = SubscriptionGroupManager(str(tmp_path))
    assert groups.get("G") is None
    await groups.update("G", retry_max_times=3)
    config = await groups.update("G", consume_enable=False)
    assert config == SubscriptionGroupConfig("G", consume_enable=False, retry_max_times=3)
    again = SubscriptionGroupManager(str(tmp_path))
    again.load()
    assert again.list() == [config]
    with open(again.path) as f:
        assert json.load(f) == {"G": {"consume_enable": False, "retry_max_times": 3}}


def test_a_damaged_file_is_named(tmp_path) -> None:
    groups = SubscriptionGroupManager(str(tmp_path))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "subscriptionGroup.json").write_text('{"G": {"consume_enable": "no", "retry_max_times": 1}}')
    with pytest.raises(ConfigFileError, match="subscriptionGroup.json: group 'G': consume_enable must be true or false"):
        groups.load()


async def test_a_disabled_group_may_not_pull_and_the_brokers_retry_limit_wins(tmp_path) -> None:
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER")) as (services, conn):
        sent = await send(conn, "T", b"x", queue_id=0)
        stored = await conn.call(SubGroupUpdate(group="G", consume_enable=False, retry_max_times=0))
        assert stored.group == {"group": "G", "consume_enable": False, "retry_max_times": 0}
        with pytest.raises(NoPermission, match="consumer group 'G' may not consume on broker-t"):
            await conn.call(Pull(topic="T", queue_id=0, offset=0, group="G"))
        assert (await conn.call(Pull(topic="T", queue_id=0, offset=0, group="Other"))).status is Status.FOUND
        # retry_max_times 0: the first send-back goes to the DLQ, whatever the member asks for
        await conn.call(ConsumerHeartbeat(group="G", client_id="c1", topics=["T"]))
        back = await conn.call(ConsumerSendBack(group="G", commitlog_offset=sent.commitlog_offset,
                                                max_reconsume_times=16))
        assert back.topic == "%DLQ%G", back
        await conn.call(SubGroupUpdate(group="G", consume_enable=True))
        assert (await conn.call(Pull(topic="T", queue_id=0, offset=0, group="G"))).status is Status.FOUND
        assert [c.group for c in services.subgroups.list()] == ["G"]


async def test_a_slave_takes_its_masters_settings_and_refuses_to_change_them(tmp_path) -> None:
    master = master_conf(tmp_path, role="ASYNC_MASTER")
    async with serving_ops(master) as (_, conn):
        await conn.call(SubGroupUpdate(group="G", retry_max_times=2))
        slave_root = tmp_path / "slave-copy"
        groups = SubscriptionGroupManager(str(slave_root))
        sync = SlaveSync(conn.address, TopicConfigManager(str(slave_root), auto_create=False, default_queue_nums=4),
                         ConsumerOffsetManager(str(slave_root)), max_frame_size=1 << 20, subgroups=groups)
        await sync.sync_once()
        assert groups.list() == [SubscriptionGroupConfig("G", retry_max_times=2)]
        assert (await conn.call(SubGroupList())).groups == [{"group": "G", "consume_enable": True,
                                                             "retry_max_times": 2}]
    async with serving_ops(slave_conf(tmp_path, master)) as (_, slave):
        with pytest.raises(ServiceUnavailable, match="refuses subscription group changes"):
            await slave.call(SubGroupUpdate(group="G", consume_enable=False))


async def test_a_master_that_predates_the_settings_still_syncs_topics(tmp_path) -> None:
    older = {op: cls for op, cls in NODE_REQUESTS.items() if op != "subgroup_list"}  # a rolling upgrade
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER"), requests=older) as (_, conn):
        await conn.call(TopicCreate(topic="Kept"))
        root = tmp_path / "slave-copy"
        topics = TopicConfigManager(str(root), auto_create=False, default_queue_nums=4)
        sync = SlaveSync(conn.address, topics, ConsumerOffsetManager(str(root)), max_frame_size=1 << 20,
                         subgroups=SubscriptionGroupManager(str(root)))
        await sync.sync_once()
        assert [t.topic for t in topics.list()] == ["Kept"]
