"""cluster/cli/tables.py: the status table's columns per group, from `status` answers."""

from __future__ import annotations

from rich.console import Console

from cluster.cli.tables import BrokerRow, broker_table, controller_line
from wire.protocol import StatusReply, WireControllerView


def render(table) -> str:
    console = Console(width=300, record=True, color_system=None)
    console.print(table)
    return console.export_text()


def answer(max_offset: int, ts: int, ha: dict, **extra) -> StatusReply:
    return StatusReply.from_wire({"max_phy_offset": max_offset, "last_store_timestamp": ts, "ha": ha,
                                  "running_flags": [], "disk": {"used_ratio": 0.42},
                                  "stats": {"put_tps": 12.5, "get_tps": 3.0}, **extra})


def test_group_rows_lag_in_bytes_and_seconds_tps_epoch_and_catch_up():
    master = BrokerRow("broker-a", 0, "SYNC_MASTER", "127.0.0.1:1", node="broker-a", pid=11, state="running",
                       answer=answer(4096, 10_000, {"slaves": [{"lag_bytes": 2048}]}, epoch=3))
    slave = BrokerRow("broker-a", 1, "SLAVE", "127.0.0.1:2", node="broker-a-s", pid=12, state="running",
                      answer=answer(2048, 7_500, {"connected": True, "lag_bytes": 2048}))
    down = BrokerRow("broker-b", 0, "ASYNC_MASTER", "127.0.0.1:3", node="broker-b", state="dead",
                     error="connection refused [Errno 111]")
    text = render(broker_table([down, slave, master], "t", processes=True))
    rows = [line for line in text.splitlines() if "127.0.0.1" in line]
    assert [r.split("│")[1].strip() for r in rows] == ["broker-a", "broker-a-s", "broker-b"]  # by group, id
    m, s, d = rows
    assert " 3 " in m and "4,096" in m and "2.0 KiB" in m and "2.5" in m, m  # epoch, offset, lag, lag s
    assert "42%" in m and "12.5" in m and "1 slave(s)" in m
    assert " - " in s and "2,048" in s and "2.5" in s and "50%" in s and "connected" in s, s  # no epoch yet
    assert "2.0 KiB behind" in s, s
    assert "connection refused [Errno 111]" in d and "dead" in d


def test_a_slave_with_every_byte_lags_zero_seconds():
    master = BrokerRow("g", 0, "ASYNC_MASTER", "a:1", answer=answer(100, 9_000, {"slaves": [{"lag_bytes": 0}]}))
    slave = BrokerRow("g", 1, "SLAVE", "a:2", answer=answer(100, 5_000, {"connected": True, "lag_bytes": 0}))
    text = render(broker_table([master, slave], "t"))
    assert all(" 0.0 " in line for line in text.splitlines() if "a:" in line), text


def test_catch_up_counts_from_where_the_slave_starts_and_says_caught_up() -> None:
    master = BrokerRow("g", 0, "ASYNC_MASTER", "a:1", node="m", answer=answer(0, 0, {"slaves": []}))
    empty = BrokerRow("g", 1, "SLAVE", "a:2", node="s", answer=answer(0, 0, {"connected": True}))
    text = render(broker_table([master, empty], "t", processes=True))
    assert "caught up" in text and "0%" not in text.replace("42%", ""), text  # an empty group: nothing to copy
    master = BrokerRow("g", 0, "ASYNC_MASTER", "a:1", node="m", answer=answer(3 << 20, 0, {"slaves": []}))
    late = BrokerRow("g", 1, "SLAVE", "a:2", node="s",  # a new slave starts at the newest segment (2 MiB)
                     answer=answer((2 << 20) + (512 << 10), 0, {"connected": True}, min_phy_offset=2 << 20))
    text = render(broker_table([master, late], "t", processes=True))
    assert "50%" in text and "512.0 KiB behind" in text, text


def test_a_node_reporting_damaged_records_shows_their_ranges():
    damaged = [{"start": 21669, "end": 21981, "reason": "body CRC mismatch", "found_by": "read"}]
    master = BrokerRow("g", 0, "SYNC_MASTER", "a:1", answer=answer(100, 9_000, {"slaves": []}, damaged=damaged))
    text = render(broker_table([master], "t"))
    assert "DAMAGED [21669, 21981)" in text, text


def test_controller_line_names_the_holder_the_set_and_what_is_wrong():
    holder = {"address": "127.0.0.1:1", "epoch": 4}
    leading = {"leading": True, "lease_holder": holder, "lease_left_ms": 1900, "etcd_reachable": True,
               "sync_state_set": {"master": "127.0.0.1:1", "in_sync": ["127.0.0.1:2"]}, "unnamed_slaves": []}
    assert controller_line(WireControllerView.from_wire(leading)) == ("etcd lease holder, epoch 4, lease 1900 ms left, "
                                        "in-sync set: 127.0.0.1:1, 127.0.0.1:2")
    troubled = {**leading, "unnamed_slaves": ["127.0.0.1:9"], "etcd_reachable": False, "last_error": "refused"}
    line = controller_line(WireControllerView.from_wire(troubled))
    assert "cannot name the slave(s) on HA connection(s) 127.0.0.1:9" in line and "etcd UNREACHABLE: refused" in line
    assert controller_line(WireControllerView(leading=False, lease_holder=holder)) == "etcd holder 127.0.0.1:1 (epoch 4)"
