"""`tidemq cluster up --controller etcd`: a local etcd beside the name server, shown in
status, stopped by `down`; a layout without etcd is a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
import trio

from cluster.drills.framework import REPO
from cluster.launch.health import settled
from cluster.launch.launcher import copy_layout
from cluster.launch.launcher_etcd import ETCD_STATE
from tests.cluster.helpers import call, cli, wait_for
from wire.protocol import GetStatus, StatusReply, WireControllerView

pytestmark = pytest.mark.slow

SMALL = {"mappedFileSizeCommitLog": 1024 * 1024, "mappedFileSizeConsumeQueue": 6000}


def test_controller_etcd_needs_an_etcd_layout(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    copy_layout(REPO / "conf" / "2m-2s-sync", conf)
    r = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(tmp_path / "base"), "--controller", "etcd")
    assert r.returncode == 2 and b"needs a layout whose nodes set controllerMode" in r.stderr
    assert not (tmp_path / "base" / ETCD_STATE).exists()


def test_proxies_and_an_etcd_layout_are_refused_before_anything_starts(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    copy_layout(REPO / "conf" / "2m-2s-sync-auto", conf)
    r = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(tmp_path / "base"),
            "--proxy-url", "http://127.0.0.1:1")
    assert r.returncode == 2 and b"proxies (--proxy-url) and controllerMode etcd do not go together" in r.stderr
    assert not (tmp_path / "base" / ETCD_STATE).exists()


async def test_up_starts_etcd_status_shows_the_election_and_down_stops_it(tmp_path: Path) -> None:
    conf, base = tmp_path / "conf", tmp_path / "base"
    layout = REPO / "conf" / "2m-2s-sync-auto"
    copy_layout(layout, conf, overrides={p.stem: SMALL for p in layout.glob("broker-*.toml")})
    up = await trio.to_thread.run_sync(lambda: cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base),
                                                   "--controller", "etcd", timeout=120))
    try:
        assert up.returncode == 0, up.stderr
        assert b"etcd           started" in up.stdout
        # each node is printed as it serves once the election settled: a master that holds the lease
        printed = {line.split()[0]: line for line in up.stdout.decode().splitlines() if line.startswith("broker-")}
        assert set(printed) == {"broker-a", "broker-a-s", "broker-b", "broker-b-s"}, up.stdout
        assert all("not settled" not in line for line in printed.values()), up.stdout
        assert sum("MASTER id 0" in line for line in printed.values()) == 2, up.stdout
        pid = json.loads((base / ETCD_STATE).read_text())["pid"]
        assert psutil.pid_exists(pid)
        nodes = json.loads((base / "cluster.json").read_text())["nodes"]
        master = next(n["address"] for n in nodes if n["name"] == "broker-a")

        async def leading() -> bool:
            status: StatusReply = await call(master, GetStatus())
            return bool(status.controller and status.controller.leading)
        await wait_for(leading, timeout=30, what="broker-a elected")
        shown = await trio.to_thread.run_sync(lambda: cli("cluster", "status", "--base-dir", str(base)))
        assert b"etcd lease holder, epoch" in shown.stdout, shown.stdout
    finally:
        down = await trio.to_thread.run_sync(lambda: cli("cluster", "down", "--base-dir", str(base), timeout=120))
    assert down.returncode == 0
    assert not (base / ETCD_STATE).exists()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize(("role", "controller", "final"), [
    ("SYNC_MASTER", None, True),  # manual mode: the role is the role
    ("SYNC_MASTER", {"mode": "etcd", "leading": True, "lease_holder": "a"}, True),
    ("SYNC_MASTER", {"mode": "etcd", "leading": False, "lease_holder": None}, False),  # may fence itself soon
    ("SYNC_MASTER", {"mode": "etcd", "leading": False, "lease_holder": "b"}, False),  # another holds the lease
    ("SLAVE", {"mode": "etcd", "leading": False, "lease_holder": "b"}, True),
    ("SLAVE", {"mode": "etcd", "leading": False, "lease_holder": None}, False),  # no master elected yet
])
def test_cluster_up_prints_an_etcd_node_only_once_settled(role: str, controller: dict | None, final: bool) -> None:
    answer = StatusReply(broker_cluster_name="C", broker_name="broker-a", broker_id=0, role=role,
                         address="127.0.0.1:1", ha_address="127.0.0.1:2",
                         controller=None if controller is None else WireControllerView.from_wire(controller))
    assert settled(answer) is final
