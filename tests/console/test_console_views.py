"""The console's pure parts, in process (no cluster): what a page does with its input
before anything is sent, how a body is shown, the Dashboard's series and the Cluster
page's rows from `status` answers, and the front-end install step's refusal."""

from __future__ import annotations

import argparse
import json

import pytest
import trio

from cluster.client import BrokerStatus
from cluster.console import acl, assets, dashboard, messages
from cluster.console.brokers import broker_rows
from cluster.console.cli import _duration
from cluster.console.consumers import parse_when
from cluster.console.inputs import InputError, checked_group, checked_int, checked_topic
from cluster.console.sessions import DEFAULT_LIFETIME_S
from cluster.console.topics import perm_text, topic_kind
from wire.protocol import StatusReply
from wire.protocol.values import WireHASlave, WireHAView


def test_input_is_checked_with_a_sentence_for_the_page():
    assert checked_topic("  Orders ") == "Orders"
    for bad, said in [("", "required"), ("bad topic!", "topic"), ("x" * 300, "topic")]:
        with pytest.raises(InputError, match=said):
            checked_topic(bad)
    with pytest.raises(InputError, match="group"):
        checked_group("no spaces allowed")
    assert checked_int("7", "read queues", 1, 1024) == 7
    with pytest.raises(InputError, match="read queues must be a whole number, not 'zero'"):
        checked_int("zero", "read queues", 1, 1024)
    with pytest.raises(InputError, match="between 1 and 1024, not 0"):
        checked_int("0", "read queues", 1, 1024)


def test_times_a_page_takes():
    assert parse_when("") is None and parse_when("now") is None
    assert parse_when("1700000000000") == 1_700_000_000_000
    assert parse_when("2026-11-24T10:30:00+00:00") == 1_795_516_200_000
    with pytest.raises(InputError, match="not a time"):
        parse_when("yesterday")
    with pytest.raises(InputError, match="begin is required"):
        messages.parse_time("", "begin")
    with pytest.raises(InputError, match="end 'soon' is not a time"):
        messages.parse_time("soon", "end")


def test_a_malformed_msg_id_is_refused_before_any_lookup():
    async def never(*_: object) -> None:
        raise AssertionError("no lookup for a malformed msgId")

    class NoAdmin:
        get_by_msg_id = never

    with pytest.raises(InputError, match="malformed msgId"):
        trio.run(messages.by_msg_id, NoAdmin(), "XYZ")


def test_a_body_is_shown_as_text_json_and_hex():
    shown = messages.body_views(json.dumps({"order": 7}).encode())
    assert shown["json"] == '{\n  "order": 7\n}' and shown["text"] == '{"order": 7}'
    assert shown["hex"].startswith("00000000  7b 22 6f 72")
    binary = messages.body_views(b"\xff\x00abc")
    assert binary["text"] is None and binary["json"] is None
    assert binary["hex"] == f"00000000  {'ff 00 61 62 63':<47}  ..abc"


def test_topic_kinds_and_perms_as_rocketmq_dashboard_shows_them():
    assert [topic_kind(t) for t in ("Orders", "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRANS_HALF_TOPIC")] == [
        "NORMAL", "RETRY", "DLQ", "SYSTEM"]
    assert [perm_text(p) for p in (6, 4, 2)] == ["RW", "R-", "-W"]


def test_cluster_rows_join_a_master_and_its_slave():
    master = StatusReply(role="SYNC_MASTER", address="m:1", broker_name="a", broker_id=0, epoch=3,
                         max_phy_offset=500, confirm_offset=400, last_store_timestamp=10_000,
                         ha=WireHAView(slaves=[WireHASlave(address="ha:9", ack_offset=400, lag_bytes=100,
                                                           in_sync=True)]))
    slave = StatusReply(role="SLAVE", address="s:1", broker_name="a", broker_id=1, epoch=3, max_phy_offset=400,
                        last_store_timestamp=7_500, ha=WireHAView())
    rows = broker_rows([BrokerStatus("s:1", "a", 1, "SLAVE", status=slave),
                        BrokerStatus("m:1", "a", 0, "SYNC_MASTER", status=master),
                        BrokerStatus("x:1", "b", 0, "SYNC_MASTER", error="connection refused")])
    assert [(r.group, r.broker_id) for r in rows] == [("a", 0), ("a", 1), ("b", 0)]
    m, _, down = rows
    assert (m.epoch, m.max_offset, m.confirm_offset, m.lag_bytes) == (3, 500, 400, 100)
    assert m.in_sync.startswith("m:1") and down.error == "connection refused"


def test_dashboard_series_keep_one_time_axis():
    history = dashboard.History()
    history.samples.append(dashboard.Sample(100.0, {"a/0": (5.0, 1.0)}, {"T": 5.0}, {}))
    history.samples.append(dashboard.Sample(102.0, {"a/0": (6.0, 2.0), "b/0": (1.0, 0.0)}, {"T": 6.0}, {}))
    series = history.series()
    assert series["t"] == [100.0, 102.0]
    assert series["put"] == {"a/0": [5.0, 6.0], "b/0": [None, 1.0]}
    assert series["topics"] == {"T": [5.0, 6.0]} and series["now"]["topics"] == [("T", 6.0)]


def test_install_assets_names_a_missing_npm():
    with pytest.raises(assets.AssetsError, match="no-such-npm is not installed"):
        assets.install(npm="no-such-npm")


def test_the_acl_form_is_checked_with_the_nodes_parsers_before_anything_is_sent():
    form = acl.account_form({"access_key": " ops ", "secret": "", "admin": "1", "default_topic_perm": "pub|sub",
                             "topic_perms": "orders=PUB|SUB,  logs-*=SUB", "white_remote_address": "10.0.0.0/8"})
    assert form == acl.AccountForm("ops", None, True, "PUB|SUB", "DENY", ("orders=PUB|SUB", "logs-*=SUB"), (),
                                   ("10.0.0.0/8",))
    for bad, said in [({"access_key": "a=b"}, "account name"), ({"access_key": ""}, "account name"),
                      ({"access_key": "ops", "default_group_perm": "ALL"}, "default group perm: 'ALL'"),
                      ({"access_key": "ops", "group_perms": "billing"}, "group perms: in 'billing'"),
                      ({"access_key": "ops", "white_remote_address": "10.0.0.300"}, "remote addresses: '10.0.0.300'")]:
        with pytest.raises(InputError, match=said):
            acl.account_form(bad)


def test_a_session_lifetime_is_given_as_people_say_it():
    assert [_duration(t) for t in ("90", "90s", "30m", "8h")] == [90.0, 90.0, 1800.0, 8 * 3600.0]
    assert _duration("8h") == DEFAULT_LIFETIME_S  # the option's default is the sessions'
    for bad in ("", "h", "0", "-5m", "soon", "infh"):
        with pytest.raises(argparse.ArgumentTypeError):
            _duration(bad)
