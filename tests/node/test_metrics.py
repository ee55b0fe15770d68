"""/metrics on real node processes (issue 46): every series the issue names, with its
labels, in output `promtool check metrics` accepts; the bearer token; the config keys."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.launch.layout import free_ports
from node.config import BrokerConfig, ConfigError
from tests.node.nodeproc import master_conf, slave_conf
from tests.node.wire import Wire
from tests.waiting import wait_until

ROCKETMQ_SERIES = {
    # RocketMQ 5's names (issue 46, item 2): the labels each sample carries
    "rocketmq_messages_in_total": {"topic", "message_type", "is_system"},
    "rocketmq_throughput_in_total": {"topic", "message_type", "is_system"},
    "rocketmq_message_size": {"topic", "message_type", "is_system"},
    "rocketmq_messages_out_total": {"topic", "consumer_group", "is_retry", "is_system"},
    "rocketmq_throughput_out_total": {"topic", "consumer_group", "is_retry", "is_system"},
    "rocketmq_consumer_lag_messages": {"topic", "consumer_group", "is_retry", "is_system"},
    "rocketmq_consumer_lag_latency": {"topic", "consumer_group", "is_retry", "is_system"},
    "rocketmq_send_to_dlq_messages_total": {"consumer_group", "is_system"},
    "rocketmq_rpc_latency": {"protocol_type", "request_code", "response_code"},
    "rocketmq_storage_size": {"storage_type", "storage_medium"},
    "rocketmq_storage_flush_behind_bytes": {"storage_type", "storage_medium"},
    "rocketmq_storage_dispatch_behind_bytes": {"storage_type", "storage_medium"},
    "rocketmq_storage_message_reserve_time": {"storage_type", "storage_medium"},
    "rocketmq_producer_connections": set(),
    "rocketmq_consumer_connections": {"consumer_group", "is_system"},
    "rocketmq_topic_number": set(),
    "rocketmq_consumer_group_number": set(),
    "rocketmq_commit_messages_total": set(),
    "rocketmq_rollback_messages_total": set(),
    "rocketmq_half_messages": {"topic"},
}
MASTER_SERIES = {
    # what RocketMQ lacks (item 3), a master's view
    "rocketmq_replication_lag_bytes": {"slave"},
    "rocketmq_replication_lag_seconds": {"slave"},
    "rocketmq_replication_slave_ack_offset": {"slave"},
    "rocketmq_replication_confirm_offset": set(),
    "rocketmq_replication_in_sync_replicas": set(),
    "rocketmq_replication_slaves_connected": set(),
    "rocketmq_replication_slaves_expected": set(),
    "rocketmq_broker_is_master": set(),
    "rocketmq_broker_epoch": set(),
    "rocketmq_broker_fenced": set(),
    "rocketmq_broker_writes_held": set(),
    "rocketmq_broker_stalls_total": set(),
    "rocketmq_tls_handshake_failures_total": set(),
    "rocketmq_storage_disk_used_ratio": set(),
    "rocketmq_storage_disk_ratio_threshold": {"level"},
    "rocketmq_metrics_series_refused": set(),
    "rocketmq_metrics_series_refused_total": set(),
}
SLAVE_SERIES = {
    "rocketmq_replication_master_connected": set(),
    "rocketmq_replication_behind_bytes": set(),
    "rocketmq_replication_confirm_offset": set(),
    "rocketmq_broker_is_master": set(),
}
BASE = {"cluster", "node_type", "node_id", "broker_id"}


def samples(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name (a histogram's family name for its parts) → each sample's labels."""
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        for sample in family.samples:
            if family.type == "histogram":
                labels = {k: v for k, v in sample.labels.items() if k != "le"}
            else:
                labels = dict(sample.labels)
            out.setdefault(name, []).append(labels)
    return out


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/test installs Debian's prometheus package"
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def scrape(port: int, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=5)


@pytest.mark.slow
async def test_every_named_series_with_its_labels(tmp_path, nodes):
    mport, sport = free_ports(2)
    mconf = master_conf(tmp_path, metricsExporterType="PROM", metricsPromExporterPort=mport,
                        brokerClusterName="C1")
    master = nodes.start(mconf)
    nodes.start(slave_conf(tmp_path, mconf, metricsExporterType="PROM", metricsPromExporterPort=sport,
                           brokerClusterName="C1"))
    w = await Wire.connect(master.address)
    try:
        for i in range(3):
            sent = await w.call("send", topic="Orders", body=b"order %d" % i, queue_id=0)
            assert sent["status"] == "PUT_OK", sent
        pulled = await w.call("pull", topic="Orders", queue_id=0, offset=0, group="G1", max_msgs=1)
        assert len(pulled["messages"]) == 1
        assert (await w.call("commit_offset", group="G1", topic="Orders", queue_id=0, offset=1))["status"] == "OK"
        back = await w.call("consumer_send_back", group="G1", commitlog_offset=pulled["messages"][0]["commitlog_offset"],
                            delay_level=-1)
        assert back["status"] == "PUT_OK", back
        await w.call("consumer_heartbeat", group="G1", client_id="c1", topics=["Orders"])
        await w.call("producer_heartbeat", group="P1", client_id="p1")
        half = await w.call("send", topic="Orders", body=b"tx", properties={"TRAN_MSG": "true", "PGROUP": "P1"})
        assert half["status"] == "PUT_OK", half
        await w.call("status")  # loads the transaction state the scrape reads
        text = scrape(mport).text
        found = samples(text)
        promtool_check(text)
        for name, labels in {**ROCKETMQ_SERIES, **MASTER_SERIES}.items():
            assert name in found, f"{name} missing from the master's /metrics"
            assert any(set(s) == BASE | labels for s in found[name]), (name, found[name])
        row = {"cluster": "C1", "node_type": "broker", "node_id": "broker-t", "broker_id": "0"}
        assert {**row, "topic": "Orders", "message_type": "Normal", "is_system": "false"} in \
            found["rocketmq_messages_in_total"]
        families = {f.name: f for f in text_string_to_metric_families(text)}
        value = {s.labels.get("topic"): s.value for s in families["rocketmq_messages_in"].samples}
        assert value["Orders"] == 3, value
        lag = {(s.labels["consumer_group"], s.labels["topic"]): s.value
               for s in families["rocketmq_consumer_lag_messages"].samples}
        assert lag[("G1", "Orders")] == 2

        def slave_caught_up() -> bool:
            got = {s.name: s.value for s in _family(scrape(mport).text, "rocketmq_replication_lag_bytes").samples}
            return got == {"rocketmq_replication_lag_bytes": 0}

        await wait_until(slave_caught_up, timeout=15, what="the slave's lag at 0 on the master's /metrics")
        slave_text = scrape(sport).text
        promtool_check(slave_text)
        slave_found = samples(slave_text)
        for name, labels in SLAVE_SERIES.items():
            assert any(set(s) == BASE | labels for s in slave_found.get(name, [])), (name, slave_found.get(name))
    finally:
        await w.aclose()


def _family(text: str, name: str):  # noqa: ANN202 - a prometheus_client Metric
    return next(f for f in text_string_to_metric_families(text) if f.name == name)


@pytest.mark.slow
async def test_bearer_token_and_cardinality_limit(tmp_path, nodes):
    (port,) = free_ports(1)
    token_file = tmp_path / "scrape.token"
    token_file.write_text("s3cret\n")
    conf = master_conf(tmp_path, role="ASYNC_MASTER", metricsExporterType="PROM", metricsPromExporterPort=port,
                       metricsPromBearerTokenFile=str(token_file), metricsOtelCardinalityLimit=6)
    master = nodes.start(conf)
    w = await Wire.connect(master.address)
    try:
        for topic in ("T1", "T2", "T3", "T4"):
            assert (await w.call("send", topic=topic, body=b"x", queue_id=0))["status"] == "PUT_OK"
    finally:
        await w.aclose()
    refused = scrape(port)
    assert refused.status_code == 401 and "Bearer" in refused.headers["www-authenticate"]
    assert scrape(port, "wrong").status_code == 401
    text = scrape(port, "s3cret").text
    promtool_check(text)
    found = samples(text)
    topics = {s["topic"] for s in found["rocketmq_messages_in_total"]}
    assert len(topics) == 2 and topics < {"T1", "T2", "T3", "T4"}  # 3 bounded series a topic: 2 topics fit
    assert _family(text, "rocketmq_metrics_series_refused").samples[0].value == 6  # T3's and T4's
    assert httpx.get(f"http://127.0.0.1:{port}/other", timeout=5).status_code == 404


def test_config_keys_are_checked(tmp_path):
    cfg = BrokerConfig.from_mapping({"metricsExporterType": "PROM", "metricsPromExporterPort": 5557})
    assert cfg.metrics_enabled and cfg.metrics_bind_host == "127.0.0.1"
    assert not BrokerConfig.from_mapping({}).metrics_enabled
    with pytest.raises(ConfigError, match="metricsExporterType must be one of DISABLE, PROM"):
        BrokerConfig.from_mapping({"metricsExporterType": "OTLP_GRPC"})
    with pytest.raises(ConfigError, match="metricsPromBearerTokenFile"):
        BrokerConfig.from_mapping({"metricsExporterType": "PROM", "aclEnable": True})
    with pytest.raises(ConfigError, match="metricsPromExporterPort 10911 is also listenPort"):
        BrokerConfig.from_mapping({"metricsExporterType": "PROM", "metricsPromExporterPort": 10911})
    with pytest.raises(ConfigError, match="metricsOtelCardinalityLimit must be > 0"):
        BrokerConfig.from_mapping({"metricsOtelCardinalityLimit": 0})


@pytest.mark.slow
async def test_an_etcd_elected_master_counts_its_election(tmp_path, nodes, etcd):
    (port,) = free_ports(1)
    conf = master_conf(tmp_path, role="ASYNC_MASTER", metricsExporterType="PROM", metricsPromExporterPort=port,
                       controllerMode="etcd", etcdEndpoints=etcd.endpoint)
    nodes.start(conf)

    def elected() -> bool:
        won = [s.value for f in text_string_to_metric_families(scrape(port).text)
               if f.name == "rocketmq_failover_elections" for s in f.samples
               if s.name == "rocketmq_failover_elections_total" and s.labels.get("result") == "won"]
        return won == [1]

    await wait_until(elected, timeout=20, what="rocketmq_failover_elections_total{result=won} 1")
    text = scrape(port).text
    promtool_check(text)
    assert _family(text, "rocketmq_broker_is_master").samples[0].value == 1
