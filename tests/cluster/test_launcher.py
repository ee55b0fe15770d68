"""The local launcher with real processes: `tidemq cluster up/status/kill/start/down`, on a
copy of conf/1m-1s-dev whose ports are rewritten to free ones. `scripts/run` end to end (its
output, a second run reusing the cluster, `--stop`) is tests/tidemq/test_readme.py's run of
it, which the README's blocks then use: the suite starts that cluster once."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import psutil
import pytest

from cluster.launch import launcher
from cluster.launch.layout import skipped_files
from cluster.launch.state import save_state
from node.config import load_config

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "conf" / "1m-1s-dev"
CMD_TIMEOUT_S = 120


def copy_dev_layout(tmp_path: Path) -> Path:
    """conf/1m-1s-dev in tmp_path with every port replaced by a free one, consistently."""
    conf = tmp_path / "conf"
    launcher.copy_layout(LAYOUT, conf)
    return conf


def tidemq(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tidemq", *args], cwd=cwd, capture_output=True, text=True,
        timeout=CMD_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"tidemq {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def status_json(base: Path, cwd: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    proc = tidemq("cluster", "status", "--base-dir", str(base), "--json", cwd=cwd, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def recorded_pids(base: Path) -> dict[str, int]:
    state = launcher.load_state(base)
    assert state is not None
    return {name: r.pid for name, r in state.nodes.items() if r.pid is not None}


@pytest.fixture
def cluster_dirs(tmp_path: Path):
    """(conf, base) for one test; whatever is still running at the end is stopped."""
    conf, base = copy_dev_layout(tmp_path), tmp_path / "data"
    yield conf, base
    launcher.down(base, grace_s=5)


def test_copy_layout_rewrites_every_port_consistently(tmp_path: Path) -> None:
    conf = copy_dev_layout(tmp_path)
    originals = set(re.findall(r"\b3\d{4}\b", "".join(p.read_text() for p in LAYOUT.iterdir())))
    for path in conf.iterdir():
        text = path.read_text()
        assert not originals & set(re.findall(r"\b\d{5}\b", text)), path.name
    master = load_config(str(conf / "broker-a.toml"), base_dir=str(tmp_path))
    twin = load_config(str(conf / "broker-a.properties"), base_dir=str(tmp_path))
    slave = load_config(str(conf / "broker-a-s.toml"), base_dir=str(tmp_path))
    namesrv_port = tomllib.loads((conf / "namesrv.toml").read_text())["listenPort"]
    assert twin.address == master.address and twin.ha_address == master.ha_address
    assert slave.store.ha_master_address == master.ha_address
    assert slave.master_addr == master.address
    assert master.namesrv_addr == slave.namesrv_addr == f"127.0.0.1:{namesrv_port}"
    ports = [master.listen_port, master.ha_listen_port, slave.listen_port, slave.ha_listen_port, namesrv_port]
    assert len(set(ports)) == len(ports)


def test_layout_order_and_properties_twin(tmp_path: Path) -> None:
    specs = launcher.read_layout(copy_dev_layout(tmp_path), tmp_path)
    # the .properties twin of broker-a is not a third broker; namesrv, masters, slaves
    assert [(s.name, s.role) for s in specs] == [
        ("namesrv", "NAMESRV"), ("broker-a", "SYNC_MASTER"), ("broker-a-s", "SLAVE")]
    assert specs[1].config.endswith("broker-a.toml")


def test_an_acl_file_beside_the_node_files_is_skipped_and_named(tmp_path: Path) -> None:
    conf = copy_dev_layout(tmp_path)
    (conf / "acl.toml").write_text('[[accounts]]\naccessKey = "broker"\nsecretKey = "s"\nadmin = true\n')
    specs = launcher.read_layout(conf, tmp_path)
    assert [s.name for s in specs] == ["namesrv", "broker-a", "broker-a-s"]
    assert [(p.name, why) for p, why in skipped_files(conf)] == [
        ("acl.toml", "an ACL file ([[accounts]]), not a node's config")]


@pytest.mark.slow
def test_up_status_kill_start_down(cluster_dirs: tuple[Path, Path]) -> None:
    conf, base = cluster_dirs
    cwd = base.parent
    out = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), cwd=cwd).stdout
    assert re.search(r"^broker-a\s+started\s+SYNC_MASTER", out, re.MULTILINE), out
    assert re.search(r"^broker-a-s\s+started\s+SLAVE", out, re.MULTILINE), out
    pids = recorded_pids(base)
    assert {"broker-a", "broker-a-s"} <= set(pids)
    state = json.loads((base / "cluster.json").read_text())
    assert state["layout"] == str(conf)
    for node in state["nodes"]:
        assert {"name", "config", "pid", "address", "role", "started_at"} <= set(node)
        assert (base / "logs" / f"{node['name']}.out").exists()

    # up again: nothing restarted
    again = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), cwd=cwd).stdout
    assert re.search(r"^broker-a\s+running", again, re.MULTILINE), again
    assert recorded_pids(base) == pids

    code, nodes = status_json(base, cwd)
    assert code == 0, nodes
    assert all(n["alive"] and n["state"] == "running" for n in nodes.values()), nodes
    assert nodes["broker-a"]["answer"]["role"] == "SYNC_MASTER"
    assert nodes["broker-a-s"]["answer"]["role"] == "SLAVE"
    table = tidemq("cluster", "status", "--base-dir", str(base), cwd=cwd).stdout
    assert "broker-a-s" in table and "running" in table

    # SIGKILL the slave: status shows it dead (exit 1), the rest alive
    tidemq("cluster", "kill", "broker-a-s", "--base-dir", str(base), cwd=cwd)
    assert gone(pids["broker-a-s"])
    code, nodes = status_json(base, cwd)
    assert code == 1
    assert nodes["broker-a-s"]["state"] == "dead" and not nodes["broker-a-s"]["alive"]
    assert nodes["broker-a"]["alive"]
    # a dead node cannot be signalled again
    assert tidemq("cluster", "kill", "broker-a-s", "--base-dir", str(base), cwd=cwd, check=False).returncode == 1

    # start brings it back under a new pid
    tidemq("cluster", "start", "broker-a-s", "--base-dir", str(base), cwd=cwd)
    new_pid = recorded_pids(base)["broker-a-s"]
    assert new_pid != pids["broker-a-s"]
    code, nodes = status_json(base, cwd)
    assert code == 0 and nodes["broker-a-s"]["answer"]["role"] == "SLAVE"
    assert tidemq("cluster", "start", "broker-a-s", "--base-dir", str(base), cwd=cwd, check=False).returncode == 1

    # a SIGSTOPped master is "stopped"; down still stops it (SIGTERM + SIGCONT)
    tidemq("cluster", "kill", "broker-a", "--signal", "STOP", "--base-dir", str(base), cwd=cwd)
    code, nodes = status_json(base, cwd)
    assert code == 1 and nodes["broker-a"]["state"] == "stopped" and nodes["broker-a"]["alive"]

    final = recorded_pids(base)
    down = tidemq("cluster", "down", "--base-dir", str(base), "--grace", "10", cwd=cwd).stdout
    assert "KILLED" not in down, down
    assert down.index("broker-a-s") < down.index("broker-a ")  # slaves first
    assert all(gone(pid) for pid in final.values()), final
    assert not list(base.glob("store/*/abort")), "a node did not shut down cleanly"
    code, nodes = status_json(base, cwd)
    assert code == 1 and all(n["state"] == "down" for n in nodes.values())
    # and `up` after `down` reuses the recorded layout
    tidemq("cluster", "up", "--base-dir", str(base), cwd=cwd)
    assert status_json(base, cwd)[0] == 0
    tidemq("cluster", "down", "--base-dir", str(base), cwd=cwd)


@pytest.mark.slow
def test_up_failure_names_the_node_and_stops_what_it_started(cluster_dirs: tuple[Path, Path]) -> None:
    conf, base = cluster_dirs
    slave_port = load_config(str(conf / "broker-a-s.toml")).listen_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", slave_port))
        squatter.listen(1)
        proc = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base),
                      cwd=base.parent, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "broker-a-s exited with code 2 before it was READY" in proc.stderr, proc.stderr
    assert f"listenPort {slave_port}" in proc.stderr  # the tail of the node's log
    state = launcher.load_state(base)
    assert state is not None and all(r.pid is None for r in state.nodes.values())
    master_log = (base / "logs" / "broker-a.out").read_text()
    assert "READY broker-a 0" in master_log  # it was started, and then stopped again
    code, nodes = status_json(base, base.parent)
    assert code == 1 and not any(n["alive"] for n in nodes.values())


@pytest.mark.slow
def test_a_recycled_pid_is_not_taken_for_the_node(cluster_dirs: tuple[Path, Path]) -> None:
    conf, base = cluster_dirs
    stranger = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        specs = launcher.read_layout(conf, base)
        for spec in specs:
            spec.pid, spec.started_at = stranger.pid, 1.0
        base.mkdir()
        save_state(launcher.ClusterState(str(conf), str(base), {s.name: s for s in specs}))
        code, nodes = status_json(base, base.parent)
        assert code == 1 and all(n["state"] == "dead" for n in nodes.values()), nodes
        tidemq("cluster", "down", "--base-dir", str(base), "--grace", "1", cwd=base.parent)
        assert stranger.poll() is None, "down signalled a process that is not a node"
    finally:
        stranger.kill()
        stranger.wait()


def test_down_with_nothing_started_leaves_nothing_behind(tmp_path: Path) -> None:
    """`scripts/run --stop` (`cluster down`) where no cluster ran: no base dir, no lock file."""
    base = tmp_path / "data"
    assert launcher.down(base) == []
    assert not base.exists()


@pytest.mark.slow
def test_after_a_failover_the_tools_show_the_roles_served(cluster_dirs: tuple[Path, Path]) -> None:
    """Issue 21.5: `cluster status` and `cluster start` print each node's live role and
    epoch after a promotion, not its config file's."""
    conf, base = cluster_dirs
    cwd = base.parent
    tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), cwd=cwd)
    namesrv = launcher.load_state(base).node("namesrv").address
    tidemq("admin", "updateTopic", "--namesrv", namesrv, "-c", "DefaultCluster", "-t", "T", cwd=cwd)
    tidemq("admin", "promote", "--namesrv", namesrv, "broker-a", "1", cwd=cwd)  # the master never stopped

    def served() -> dict[str, dict[str, Any]] | None:
        code, nodes = status_json(base, cwd)
        ok = (nodes["broker-a-s"]["role"] == "SYNC_MASTER" and nodes["broker-a"]["role"] == "SLAVE"
              and all(n["answer"] for n in nodes.values())
              and nodes["broker-a"]["answer"]["epoch"] == 2)  # rejoined: it took its master's epochs
        return nodes if ok else None
    nodes = None
    for _ in range(100):  # the old master fences and rejoins: poll with a deadline
        nodes = served()
        if nodes:
            break
        time.sleep(0.2)  # poll
    assert nodes, "the old master did not rejoin as a slave"
    assert nodes["broker-a-s"]["config_role"] == "SLAVE" and nodes["broker-a-s"]["answer"]["epoch"] == 2
    # the name server's routes follow at once (a slave that takes its master's epochs registers
    # again), well within the 10 s registration period; counted from when the slave says epoch 2
    deadline = time.monotonic() + 4.0
    while True:
        [route] = [json.loads(line) for line in tidemq("admin", "topicRoute", "--namesrv", namesrv, "-t", "T",
                                                       "--json", cwd=cwd).stdout.splitlines() if line.strip()]
        epochs = {(b["broker_id"], b["address"]): b["epoch"] for b in route["brokers"]}
        if epochs.get((1, nodes["broker-a"]["address"])) == 2:
            break
        assert time.monotonic() < deadline, f"the route {route} never showed the rejoined node's epoch 2"
        time.sleep(0.2)  # poll
    # clusterList asks each broker: its roles, epochs and max offsets are cluster status's
    listed = [json.loads(line) for line in tidemq("admin", "clusterList", "--namesrv", namesrv, "--json",
                                                  cwd=cwd).stdout.splitlines() if line.strip()]
    code, now = status_json(base, cwd)
    assert {(b["address"], b["role"], b["epoch"], b["max_offset"]) for b in listed} == {
        (n["address"], n["role"], n["answer"]["epoch"], n["answer"]["max_phy_offset"]) for n in now.values()
        if n["role"] != "NAMESRV"}
    table = tidemq("cluster", "status", "--base-dir", str(base), cwd=cwd).stdout
    assert re.search(r"broker-a\s+│\s*0\s*│\s*SYNC_MASTER\s*│", table), table  # the promoted node, id 0
    assert re.search(r"broker-a\s+│\s*1\s*│\s*SLAVE\s*│", table), table
    assert table.index("broker-a-s") < table.index("│ broker-a   "), "the node serving as master is listed first"

    tidemq("cluster", "kill", "broker-a", "--base-dir", str(base), cwd=cwd)
    started = tidemq("cluster", "start", "broker-a", "--base-dir", str(base), cwd=cwd).stdout
    assert re.search(r"broker-a started: pid \d+, SLAVE id 1 epoch 2,", started), started
    stopped = tidemq("cluster", "down", "--base-dir", str(base), cwd=cwd).stdout
    order = [line.split()[0] for line in stopped.splitlines() if "stopped" in line or "killed" in line]
    assert order.index("broker-a") < order.index("broker-a-s"), stopped  # the slave as served stops first


def test_copy_layout_command_names_the_name_server_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tidemq.cli import main

    assert main(["cluster", "copy-layout", str(LAYOUT), str(tmp_path / "copy"), "--port-offset", "7"]) == 0
    port = tomllib.loads((tmp_path / "copy" / "namesrv.toml").read_text())["listenPort"]
    assert port == tomllib.loads((LAYOUT / "namesrv.toml").read_text())["listenPort"] + 7
    assert capsys.readouterr().out.splitlines()[-1] == f"its name server listens on port {port}"
