"""The pieces behind issue 40's new admin actions, without processes: live config keys,
the producer table, per-topic stats, the name server's write-perm wipe and the admin
tables' cells."""

from __future__ import annotations

import pytest
from rich.console import Console

from cluster.cli.tables import cell, rows_table, timestamp
from cluster.namesrv import RouteTable
from node.config import BrokerConfig, ConfigError
from node.live_config import (
    LIVE_KEYS,
    apply_live_value,
    canonical_key,
    check_live_value,
    config_view,
)
from node.stats import BrokerStats
from node.tables.producers import ProducerManager
from wire.protocol.namesrv import RegisterBroker


def test_config_view_names_every_key_camel_case_with_its_running_value():
    cfg = BrokerConfig()
    view = config_view(cfg)
    assert view["brokerIP1"] == "127.0.0.1" and view["brokerRole"] == "ASYNC_MASTER"
    assert view["syncFlushTimeout"] == 5000 and view["maxTransferCountOnMessageInMemory"] == 32
    assert set(LIVE_KEYS) <= set(view) and list(view) == sorted(view)


def test_only_live_keys_change_and_the_refusal_names_the_key():
    cfg = BrokerConfig()
    assert apply_live_value(cfg, "max_transfer_count_on_message_in_memory", "2") == (
        "maxTransferCountOnMessageInMemory", 32, 2)
    assert cfg.store.max_transfer_count_on_message_in_memory == 2  # what each pull reads
    assert apply_live_value(cfg, "channelExpiredTimeout", "5000")[2] == 5000 and cfg.channel_expired_timeout == 5000
    with pytest.raises(ConfigError, match="listenPort cannot change while the node runs"):
        check_live_value("listenPort", "1")
    with pytest.raises(ConfigError, match="bad value for 'syncFlushTimeout': 'soon'"):
        check_live_value("syncFlushTimeout", "soon")
    with pytest.raises(ConfigError, match="deleteWhen must be hours of day"):
        check_live_value("deleteWhen", "25")
    with pytest.raises(ConfigError, match="did you mean 'syncFlushTimeout'"):
        canonical_key("syncFlushTimout")
    assert cfg.listen_port == 10911 and cfg.store.delete_when == "04"  # refused: untouched


def test_producers_are_listed_until_they_leave_or_go_silent():
    now = [0.0]
    producers = ProducerManager(lambda: now[0], expire_s=120)
    producers.heartbeat("PG", "b", 30_000, "127.0.0.1:2")
    producers.heartbeat("PG", "a", 1_000, "127.0.0.1:1")
    assert [p["client_id"] for p in producers.members("PG")] == ["a", "b"]
    now[0] = 100.0
    assert producers.members("PG")[0] == {"client_id": "a", "address": "127.0.0.1:1", "heartbeat_interval_ms": 1000,
                                          "silent_ms": 100_000}
    assert producers.unregister("PG", "b") and not producers.unregister("PG", "b")
    now[0] = 121.0
    assert producers.members("PG") == [] and producers.members("other") == []


def test_stats_count_per_topic_and_group():
    now = [10.0]
    stats = BrokerStats(lambda: now[0])
    stats.add_put("T", 3)
    stats.add_put("T", 2)
    stats.add_get("T", "G", 4)
    stats.add_get("T", None, 1)
    now[0] = 11.0
    topics, groups = stats.by_topic()
    assert topics == [{"topic": "T", "put_tps": 5.0, "put_total": 5}]
    assert groups == [{"topic": "T", "group": "", "get_tps": 1.0, "get_total": 1},
                      {"topic": "T", "group": "G", "get_tps": 4.0, "get_total": 4}]


def _reg(name: str, broker_id: int, address: str) -> RegisterBroker:
    return RegisterBroker(cluster="C", broker_name=name, broker_id=broker_id,
                          role="SLAVE" if broker_id else "SYNC_MASTER", address=address,
                          topics={"T": {"read_queue_nums": 4, "write_queue_nums": 4, "perm": 6},
                                  "R": {"read_queue_nums": 1, "write_queue_nums": 1, "perm": 4}})


def test_a_wiped_group_is_routed_without_the_write_bit_until_added_back():
    table = RouteTable(expire_ms=60_000)
    for name, broker_id, address in (("a", 0, "h:1"), ("a", 1, "h:2"), ("b", 0, "h:3")):
        table.register(_reg(name, broker_id, address), address, now=0)
    assert table.set_write_perm("nope", False) is None
    assert table.set_write_perm("a", False) == 2
    table.register(_reg("a", 0, "h:1"), "h:1", now=1)  # registering again does not undo it
    perms = {g.broker_name: g.queue_data.perm for g in table.route("T", now=1)}
    assert perms == {"a": 4, "b": 6}
    assert {b["broker_name"]: b["topics"]["T"]["perm"] for b in table.cluster_info(now=1)} == {"a": 4, "b": 6}
    assert table.route("R", now=1)[0].queue_data.perm == 4  # read-only stays read-only
    assert table.write_wiped() == ["a"]
    assert table.set_write_perm("a", True) == 2
    assert {g.broker_name: g.queue_data.perm for g in table.route("T", now=1)} == {"a": 6, "b": 6}


def test_cells_print_booleans_as_mqadmin_does_and_never_raw_json():
    assert [cell(True), cell(False), cell(None), cell(1.5), cell(["a", "b"]), cell({"k": True}), cell([])] == [
        "true", "false", "-", "1.5", "a, b", "k=true", "-"]
    assert timestamp(None) == "-" and len(timestamp(1_700_000_000_123)) == len("2023-11-14 22:13:20.123")
    console = Console(width=200, record=True, color_system=None)
    console.print(rows_table([{"broker_name": "a", "alive": True, "epoch": 2, "note": "[red]x[/red]"}], "t"))
    text = console.export_text()
    assert "broker name" in text and "true" in text and "True" not in text and "[red]x[/red]" in text
