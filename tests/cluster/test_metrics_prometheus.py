"""A real Prometheus (Debian's package) scrapes a real local cluster started with
`tidemq cluster up --metrics` (issue 46): sends, a consumer group, a stopped and then killed
slave; Prometheus's HTTP API shows the in-counters, the consumer lag, the replication lag
and the shipped alert that must fire. Also: `promtool check metrics` on every endpoint's
output, and `promtool test rules` on conf/prometheus."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.launch import launcher
from cluster.launch.layout import free_ports
from tests.node.wire import Wire
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "conf" / "prometheus"
CMD_TIMEOUT_S = 120


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: scripts/test installs Debian's prometheus package"
    return path


def tidemq(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "tidemq", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=CMD_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert done.returncode in (0, 1), f"tidemq {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_shipped_rules_pass_their_promtool_tests():
    checked = subprocess.run([_tool("promtool"), "check", "rules", str(RULES / "tidemq-alerts.yml")],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([_tool("promtool"), "test", "rules", "tidemq-alerts.test.yml"], cwd=RULES,
                            capture_output=True, text=True, check=False)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


class Prometheus:
    """One Prometheus server on a free port with a scratch TSDB."""

    def __init__(self, work: Path, config: Path) -> None:
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(
            [_tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _fast_rules(work: Path) -> Path:
    """The shipped rules with every `for:` at 1s: the test waits seconds, not minutes."""
    text = re.sub(r"for: \w+", "for: 1s", (RULES / "tidemq-alerts.yml").read_text(encoding="utf-8"))
    path = work / "tidemq-alerts.yml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.slow
async def test_prometheus_scrapes_a_cluster_and_the_alert_fires(tmp_path: Path):
    conf, base = tmp_path / "conf", tmp_path / "data"
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf)
    base.mkdir()
    # the README's scrape config, with intervals short enough for a test; Prometheus starts
    # first and finds the targets when `cluster up` writes them (file_sd watches the file)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{_fast_rules(tmp_path)}]\n"
        "scrape_configs:\n"
        "  - job_name: tidemq\n"
        f"    file_sd_configs: [{{files: ['{base / 'prometheus-targets.json'}']}}]\n", encoding="utf-8")
    prometheus = Prometheus(tmp_path, config)
    p = prometheus
    try:
        up = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--metrics", cwd=tmp_path)
        assert "broker-a-s" in up, up
        table = tidemq("cluster", "status", "--base-dir", str(base), cwd=tmp_path)
        targets = dict(re.findall(r"^metrics (\S+)\s+(\S+)$", table, re.MULTILINE))
        assert set(targets) == {"namesrv", "broker-a", "broker-a-s"}, table
        for url in targets.values():  # every endpoint's output is valid exposition text
            text = httpx.get(url, timeout=5).text
            check = subprocess.run([_tool("promtool"), "check", "metrics"], input=text, capture_output=True,
                                   text=True, check=False)
            assert check.returncode == 0, (url, check.stdout + check.stderr)
            if url == targets["namesrv"]:  # the name server's own series
                assert "rocketmq_namesrv_route_changes_total" in text and "rocketmq_namesrv_brokers{" in text, text
        await wait_until(lambda: p.value('count(up{job="tidemq"} == 1)') == 3, timeout=30,
                         what="Prometheus scraping the 3 processes", retry_on=(httpx.HTTPError,))

        state = launcher.load_state(base)
        assert state is not None
        w = await Wire.connect(state.nodes["broker-a"].address)
        try:
            for i in range(5):
                sent = await w.call("send", topic="Orders", body=b"order %d" % i, queue_id=0)
                assert sent["status"] == "PUT_OK", sent
            pulled = await w.call("pull", topic="Orders", queue_id=0, offset=0, group="G1", max_msgs=2)
            assert len(pulled["messages"]) == 2
            assert (await w.call("commit_offset", group="G1", topic="Orders", queue_id=0, offset=2))["status"] == "OK"
            await wait_until(lambda: p.value('sum(rocketmq_messages_in_total{topic="Orders"})') == 5, timeout=20,
                             what="the in-counter in Prometheus")
            await wait_until(lambda: p.value('rocketmq_consumer_lag_messages{consumer_group="G1",topic="Orders",'
                                             'broker_id="0"}') == 3, timeout=20, what="the consumer lag")
            assert p.value('rocketmq_replication_lag_bytes{node_id="broker-a"}') == 0
            assert p.value('rocketmq_namesrv_brokers{alive="true"}') is not None

            # the slave stops: what the master stores now, it lacks (bytes, then seconds)
            launcher.kill(base, "broker-a-s", "STOP")
            sent = await w.call("send", topic="Orders", body=b"while the slave is stopped", queue_id=0, wait=False)
            assert sent["status"] == "PUT_OK", sent
            await wait_until(lambda: (p.value('rocketmq_replication_lag_bytes{node_id="broker-a"}') or 0) > 0
                             and (p.value('rocketmq_replication_lag_seconds{node_id="broker-a"}') or 0) > 0,
                             timeout=20, what="the replication lag in bytes and seconds")
            launcher.kill(base, "broker-a-s", "KILL")
            await wait_until(lambda: p.query('ALERTS{alertname="TidemqSlaveOutOfInSyncSet",alertstate="firing"}'),
                             timeout=30, what="TidemqSlaveOutOfInSyncSet firing")
            assert p.value('rocketmq_replication_slaves_connected{node_id="broker-a"}') == 0
        finally:
            await w.aclose()
    finally:
        prometheus.stop()
        tidemq("cluster", "down", "--base-dir", str(base), "--grace", "5", cwd=tmp_path)
