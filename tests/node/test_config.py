"""node.config: loading TOML and .properties broker files, derived values, validation."""

from __future__ import annotations

import glob
import os
import socket
import tomllib
from pathlib import Path

import pytest

from cluster.launch.layout import free_port as _free_port
from node.config import BrokerConfig, check_ports_free, load_config, parse_properties
from store.config import BrokerRole, ConfigError, FlushDiskType, StoreConfig
from tests.node.nodeproc import toml_value

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"

MASTER = {
    "brokerName": "broker-x",
    "brokerId": 0,
    "brokerRole": "SYNC_MASTER",
    "listenPort": 40911,
}
SLAVE = {
    "brokerName": "broker-x",
    "brokerId": 1,
    "brokerRole": "SLAVE",
    "listenPort": 40913,
    "haMasterAddress": "127.0.0.1:40912",
}


def write(tmp_path: Path, fmt: str, values: dict, name: str = "broker") -> str:
    """Write `values` as a .toml or .properties file; returns its path."""
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "toml":
        text = "".join(f"{k} = {toml_value(v)}\n" for k, v in values.items())
    else:
        text = "# a comment\n! another\n\n" + "".join(
            f"  {k} = {str(v).lower() if isinstance(v, bool) else v}  \n" for k, v in values.items()
        )
    path.write_text(text)
    return str(path)


FORMATS = ["toml", "properties"]


# ---------------------------------------------------------------- loading


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_file_gives_rocketmq_defaults(tmp_path, fmt):
    cfg = load_config(write(tmp_path, fmt, {}))
    assert cfg.broker_cluster_name == "DefaultCluster"
    assert cfg.broker_name == "broker-a"
    assert cfg.broker_id == 0
    assert cfg.listen_port == 10911
    assert cfg.store.ha_listen_port == 10912
    assert cfg.store.store_host == "127.0.0.1:10911"
    assert cfg.namesrv_addr is None
    assert cfg.auto_create_topic_enable is True
    assert cfg.default_topic_queue_nums == 4
    assert cfg.max_frame_size == 8 * 1024 * 1024
    assert cfg.store.store_path_root_dir == StoreConfig().store_path_root_dir
    assert cfg.role is BrokerRole.ASYNC_MASTER


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_are_typed(tmp_path, fmt):
    values = {
        **SLAVE,
        "brokerClusterName": "C1",
        "brokerIP1": "127.0.0.1",
        "namesrvAddr": "127.0.0.1:9876;127.0.0.2:9876",
        "autoCreateTopicEnable": False,
        "defaultTopicQueueNums": 8,
        "maxFrameSize": 16 * 1024 * 1024,
        "flushDiskType": "SYNC_FLUSH",
        "deleteWhen": "04;05",
        "fileReservedTime": 48,
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "diskSpaceWarningLevelRatio": 0.95,
        "messageIndexEnable": False,
    }
    cfg = load_config(write(tmp_path, fmt, values))
    assert cfg.broker_cluster_name == "C1"
    assert cfg.broker_id == 1
    assert cfg.role is BrokerRole.SLAVE
    assert cfg.namesrv_addr == "127.0.0.1:9876;127.0.0.2:9876"
    assert cfg.auto_create_topic_enable is False
    assert cfg.default_topic_queue_nums == 8
    assert cfg.max_frame_size == 16 * 1024 * 1024
    assert cfg.store.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.store.delete_when == "04;05"
    assert cfg.store.file_reserved_time == 48
    assert cfg.store.mapped_file_size_commit_log == 64 * 1024 * 1024
    assert cfg.store.disk_space_warning_level_ratio == 0.95
    assert cfg.store.message_index_enable is False
    assert cfg.store.ha_master_address == "127.0.0.1:40912"
    assert cfg.source.endswith(f"broker.{fmt}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_snake_case_keys_are_accepted(tmp_path, fmt):
    values = {
        "broker_name": "b",
        "broker_id": 1,
        "broker_role": "SLAVE",
        "listen_port": 40001,
        "ha_listen_port": 40005,
        "ha_master_address": "127.0.0.1:40002",
        "file_reserved_time": 12,
    }
    cfg = load_config(write(tmp_path, fmt, values))
    assert (cfg.broker_name, cfg.broker_id, cfg.listen_port) == ("b", 1, 40001)
    assert cfg.store.ha_listen_port == 40005
    assert cfg.store.file_reserved_time == 12


@pytest.mark.parametrize("fmt", FORMATS)
def test_store_host_is_derived_from_ip_and_listen_port(tmp_path, fmt):
    cfg = load_config(write(tmp_path, fmt, {"brokerIP1": "10.1.2.3", "listenPort": 20000}))
    assert cfg.store.store_host == "10.1.2.3:20000"
    assert cfg.address == "10.1.2.3:20000"
    assert cfg.ha_address == "10.1.2.3:20001"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("ha", [None, 0, -1])
def test_ha_port_defaults_to_listen_port_plus_one(tmp_path, fmt, ha):
    values = {"listenPort": 20000}
    if ha is not None:
        values["haListenPort"] = ha
    cfg = load_config(write(tmp_path, fmt, values))
    assert cfg.store.ha_listen_port == 20001
    assert cfg.ha_listen_port == 20001


@pytest.mark.parametrize("fmt", FORMATS)
def test_explicit_ha_port_is_kept(tmp_path, fmt):
    cfg = load_config(write(tmp_path, fmt, {"listenPort": 20000, "haListenPort": 25000}))
    assert cfg.store.ha_listen_port == 25000


@pytest.mark.parametrize("fmt", FORMATS)
def test_relative_store_path_resolves_against_cwd(tmp_path, monkeypatch, fmt):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = write(conf_dir, fmt, {"storePathRootDir": "store/broker-a"})
    monkeypatch.chdir(run_dir)
    cfg = load_config(path)
    assert cfg.store.store_path_root_dir == str(run_dir / "store" / "broker-a")


@pytest.mark.parametrize("fmt", FORMATS)
def test_relative_store_path_resolves_against_base_dir(tmp_path, fmt):
    path = write(tmp_path, fmt, {"storePathRootDir": "store/broker-a"})
    base = tmp_path / "base"
    cfg = load_config(path, base_dir=str(base))
    assert cfg.store.store_path_root_dir == str(base / "store" / "broker-a")


@pytest.mark.parametrize("fmt", FORMATS)
def test_absolute_store_path_is_kept(tmp_path, fmt):
    target = tmp_path / "abs" / "store"
    cfg = load_config(write(tmp_path, fmt, {"storePathRootDir": str(target)}), base_dir="/elsewhere")
    assert cfg.store.store_path_root_dir == str(target)


def test_empty_optional_strings_in_properties_mean_unset(tmp_path):
    cfg = load_config(write(tmp_path, "properties", {"namesrvAddr": "", "haMasterAddress": ""}))
    assert cfg.namesrv_addr is None
    assert cfg.store.ha_master_address is None


def test_parse_properties_subset():
    text = "# c\n! c\n\n  a = 1 \nb=x=y\nc=\n"
    assert parse_properties(text) == {"a": "1", "b": "x=y", "c": ""}


# ---------------------------------------------------------------- validation

# (values, words that must appear in the message besides the file name)
INVALID = {
    "negative broker id": ({"brokerId": -1}, ["brokerId", ">= 0"]),
    "slave with broker id 0": (
        {"brokerId": 0, "brokerRole": "SLAVE", "haMasterAddress": "127.0.0.1:1"},
        ["brokerId", "SLAVE"],
    ),
    "sync master with broker id 1": ({"brokerId": 1, "brokerRole": "SYNC_MASTER"}, ["brokerId", "SYNC_MASTER"]),
    "async master with broker id 2": ({"brokerId": 2}, ["brokerId", "ASYNC_MASTER"]),
    "slave without master address": ({"brokerId": 1, "brokerRole": "SLAVE"}, ["haMasterAddress"]),
    "bad master address": (
        {"brokerId": 1, "brokerRole": "SLAVE", "haMasterAddress": "nohost"},
        ["haMasterAddress", "host:port"],
    ),
    "master address is self": (
        {"brokerId": 1, "brokerRole": "SLAVE", "listenPort": 20000, "haMasterAddress": "127.0.0.1:20001"},
        ["haMasterAddress", "own"],
    ),
    "listen port 0": ({"listenPort": 0}, ["listenPort", "1..65535"]),
    "listen port too big": ({"listenPort": 70000}, ["listenPort", "1..65535"]),
    "ha port too big": ({"haListenPort": 70000}, ["haListenPort", "1..65535"]),
    "derived ha port too big": ({"listenPort": 65535}, ["haListenPort", "65536"]),
    "ports equal": ({"listenPort": 20000, "haListenPort": 20000}, ["haListenPort", "listenPort"]),
    "listen port not a number": ({"listenPort": "abc"}, ["listenPort", "integer"]),
    "broker id float": ({"brokerId": 1.5}, ["brokerId", "integer"]),
    "bool not a bool": ({"autoCreateTopicEnable": "yes"}, ["autoCreateTopicEnable", "true or false"]),
    "bad role": ({"brokerRole": "MASTER"}, ["brokerRole", "SYNC_MASTER"]),
    "bad flush type": ({"flushDiskType": "SOMETIMES"}, ["flushDiskType", "ASYNC_FLUSH"]),
    "reserved time 0": ({"fileReservedTime": 0}, ["fileReservedTime", "> 0"]),
    "delete when 25": ({"deleteWhen": "25"}, ["deleteWhen", "0-23"]),
    "queue nums 0": ({"defaultTopicQueueNums": 0}, ["defaultTopicQueueNums", "> 0"]),
    "bad namesrv": ({"namesrvAddr": "127.0.0.1"}, ["namesrvAddr", "host:port"]),
    "register period too short": ({"registerNameServerPeriod": 999}, ["registerNameServerPeriod", "1000..60000"]),
    "register period too long": ({"registerNameServerPeriod": 60001}, ["registerNameServerPeriod", "1000..60000"]),
    "empty broker name": ({"brokerName": " "}, ["brokerName", "empty"]),
    "frame smaller than message": (
        {"maxFrameSize": 1024, "maxMessageSize": 4096},
        ["maxFrameSize", "maxMessageSize"],
    ),
    "store host is derived": ({"storeHost": "1.2.3.4:5"}, ["storeHost", "derived"]),
    "camel and snake twice": ({"brokerName": "a", "broker_name": "b"}, ["brokerName", "broker_name"]),
    "unknown broker key": ({"brokerNmae": "x"}, ["unknown", "brokerNmae", "did you mean 'brokerName'"]),
    "unknown port key": ({"listenPrt": 1}, ["listenPrt", "did you mean 'listenPort'"]),
    "unknown store key": ({"fileReservedTme": 1}, ["fileReservedTme", "did you mean 'fileReservedTime'"]),
    "ip key spelled like rocketmq": ({"brokerIP": "x"}, ["did you mean 'brokerIP1'"]),
    "read uncommitted misspelt": ({"readUncommited": True}, ["readUncommited", "did you mean 'readUnCommitted'"]),
    "read uncommitted not a bool": ({"readUnCommitted": "maybe"}, ["readUnCommitted"]),
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_invalid_config_names_file_and_key(tmp_path, fmt, case):
    values, words = INVALID[case]
    path = write(tmp_path, fmt, values)
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: "), msg
    for word in words:
        assert word in msg, (word, msg)


def test_unknown_key_without_close_match_has_no_hint(tmp_path):
    path = write(tmp_path, "toml", {"zzzzzz": 1})
    with pytest.raises(ConfigError, match=r"unknown option 'zzzzzz'$"):
        load_config(path)


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('brokerName = "a"\nbrokerId = 0\nlistenPort = = 3\n')
    with pytest.raises(ConfigError) as exc:
        load_config(str(path))
    msg = str(exc.value)
    assert msg.startswith(f"{path}: TOML syntax error")
    assert "line 3" in msg


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        ("t.toml", "[store]\nfileReservedTime = 1\n", r"t\.toml: \[store\] tables are not supported"),
        ("b.properties", "brokerName=a\n\nlistenPort 10911\n", r"b\.properties:3: expected key=value"),
        ("b.properties", "brokerName=a\nbrokerName=b\n",
         r"b\.properties:2: 'brokerName' is already set on line 1"),
    ],
    ids=["toml-table", "properties-line-without-equals", "properties-duplicate-key"],
)
def test_file_syntax_errors_name_the_file_and_line(tmp_path, name, text, error):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=error):
        load_config(str(path))


def test_unknown_extension_and_missing_file(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("x: 1\n")
    with pytest.raises(ConfigError, match=r"b\.yaml: unknown config format '\.yaml'"):
        load_config(str(path))
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read config file"):
        load_config(str(tmp_path / "nope.toml"))


@pytest.mark.parametrize("fmt", FORMATS)
def test_master_addr(tmp_path, fmt):
    cfg = load_config(write(tmp_path, fmt, {**SLAVE, "masterAddr": "127.0.0.1:40911"}))
    assert cfg.master_addr == "127.0.0.1:40911"
    assert load_config(write(tmp_path, fmt, SLAVE)).master_addr is None
    for bad, words in (
        ("40911", "masterAddr must be host:port"),
        ("127.0.0.1:40912", "masterAddr 127.0.0.1:40912 equals haMasterAddress"),
        ("127.0.0.1:40913", "is this node's own address"),
    ):
        with pytest.raises(ConfigError, match=words):
            load_config(write(tmp_path, fmt, {**SLAVE, "masterAddr": bad}))


@pytest.mark.parametrize("fmt", FORMATS)
def test_advertised_addresses(tmp_path, fmt):
    """A node behind a proxy registers the proxy's addresses; it still binds brokerIP1 and
    its msgIds still name brokerIP1:listenPort."""
    plain = load_config(write(tmp_path, fmt, MASTER))
    assert (plain.address, plain.ha_address) == (plain.bind_address, plain.ha_bind_address) \
        == ("127.0.0.1:40911", "127.0.0.1:40912")
    cfg = load_config(write(tmp_path, fmt, {**MASTER, "advertisedAddress": "10.0.0.9:5001",
                                            "haAdvertisedAddress": "10.0.0.9:5002"}))
    assert (cfg.address, cfg.ha_address) == ("10.0.0.9:5001", "10.0.0.9:5002")
    assert (cfg.bind_address, cfg.ha_bind_address) == ("127.0.0.1:40911", "127.0.0.1:40912")
    assert cfg.store.store_host == "127.0.0.1:40911"
    only_client = load_config(write(tmp_path, fmt, {**MASTER, "advertisedAddress": "10.0.0.9:5001"}))
    assert only_client.ha_address == "127.0.0.1:40912"
    # a slave must not name any of its own addresses, advertised ones included, as its master
    with pytest.raises(ConfigError, match="haMasterAddress 10.0.0.9:5002 is this node's own address"):
        load_config(write(tmp_path, fmt, {**SLAVE, "haAdvertisedAddress": "10.0.0.9:5002",
                                          "haMasterAddress": "10.0.0.9:5002"}))
    for values, words in (
        ({"advertisedAddress": "10.0.0.9"}, r"advertisedAddress must be host:port, got '10.0.0.9'"),
        ({"haAdvertisedAddress": "h:0"}, r"haAdvertisedAddress must be host:port, got 'h:0'"),
        ({"advertisedAddress": "h:1", "haAdvertisedAddress": "h:1"},
         "advertisedAddress and haAdvertisedAddress must differ"),
    ):
        path = write(tmp_path, fmt, {**MASTER, **values})
        with pytest.raises(ConfigError, match=words) as e:
            load_config(path)
        assert str(e.value).startswith(path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_name_server_keys(tmp_path, fmt):
    cfg = load_config(write(tmp_path, fmt, {**MASTER, "namesrvAddr": "127.0.0.1:9876"}))
    assert cfg.register_name_server_period == 10_000
    cfg = load_config(write(tmp_path, fmt, {**MASTER, "registerNameServerPeriod": 1000}))
    assert cfg.register_name_server_period == 1000
    # with a name server, a slave may leave its master to the registration answer
    slave = {k: v for k, v in SLAVE.items() if k != "haMasterAddress"}
    cfg = load_config(write(tmp_path, fmt, {**slave, "namesrvAddr": "127.0.0.1:9876"}))
    assert cfg.store.ha_master_address is None and cfg.role is BrokerRole.SLAVE


def test_direct_construction_is_validated():
    assert BrokerConfig().address == "127.0.0.1:10911"
    with pytest.raises(ConfigError, match="brokerId 1 is a slave's id"):
        BrokerConfig(broker_id=1)
    with pytest.raises(ConfigError, match="x.toml: brokerId must be >= 0"):
        BrokerConfig(broker_id=-2, source="x.toml")


# ---------------------------------------------------------------- conf/


BROKER_FILES = sorted(glob.glob(str(CONF / "*" / "broker-*.toml")))
LAYOUTS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "prometheus")  # (alert rules, no layout)


def test_layouts_present():
    assert LAYOUTS == ["1m-1s-dev", "2m-2s-async", "2m-2s-secure", "2m-2s-sync", "2m-2s-sync-auto", "2m-noslave"]
    names = {lay: sorted(Path(p).name for p in BROKER_FILES if Path(p).parent.name == lay) for lay in LAYOUTS}
    assert names["2m-2s-sync"] == ["broker-a-s.toml", "broker-a.toml", "broker-b-s.toml", "broker-b.toml"]
    assert names["2m-2s-async"] == names["2m-2s-sync"] == names["2m-2s-sync-auto"] == names["2m-2s-secure"]
    assert names["2m-noslave"] == ["broker-a.toml", "broker-b.toml"]
    assert names["1m-1s-dev"] == ["broker-a-s.toml", "broker-a.toml"]


@pytest.mark.parametrize("path", BROKER_FILES, ids=[os.path.relpath(p, CONF) for p in BROKER_FILES])
def test_every_conf_file_loads(path):
    cfg = load_config(path, base_dir="/base")
    layout = Path(path).parent.name
    name = Path(path).stem
    assert Path(path).read_text().startswith("# "), "each file starts with a header comment"
    assert cfg.broker_cluster_name == "DefaultCluster"
    assert cfg.broker_name == name.removesuffix("-s")
    assert cfg.store.delete_when == "04"
    assert cfg.store.file_reserved_time == 48
    assert cfg.store.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert cfg.store.store_path_root_dir == f"/base/store/{name}"
    assert cfg.broker_ip1 == "127.0.0.1"
    if name.endswith("-s"):
        assert cfg.role is BrokerRole.SLAVE and cfg.broker_id == 1
    else:
        expected = {"2m-2s-sync": "SYNC_MASTER", "2m-2s-sync-auto": "SYNC_MASTER", "1m-1s-dev": "SYNC_MASTER",
                    "2m-2s-secure": "SYNC_MASTER"}.get(layout, "ASYNC_MASTER")
        assert cfg.role.value == expected and cfg.broker_id == 0
    namesrv = tomllib.loads((Path(path).parent / "namesrv.toml").read_text())
    assert cfg.namesrv_addr == f"127.0.0.1:{namesrv['listenPort']}"
    if layout == "1m-1s-dev":
        assert cfg.store.mapped_file_size_commit_log == 64 * 1024 * 1024
    secure = layout == "2m-2s-secure"
    assert (cfg.acl_enable, cfg.tls_mode) == ((True, "enforcing") if secure else (False, "disabled"))
    if secure:
        assert cfg.secret_key_file == str(Path(path).parent / "secrets" / "broker.secret")


def _layout_ports(layout: str) -> list[int]:
    ports = []
    for path in BROKER_FILES:
        if Path(path).parent.name == layout:
            cfg = load_config(path)
            ports += [cfg.listen_port, cfg.store.ha_listen_port]
    text = (CONF / layout / "namesrv.toml").read_text()
    assert text.startswith("# ")
    ports.append(tomllib.loads(text)["listenPort"])
    return ports


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_ports_distinct_and_slaves_point_at_their_master(layout):
    ports = _layout_ports(layout)
    assert len(ports) == len(set(ports))
    configs = {
        Path(p).stem: load_config(p) for p in BROKER_FILES if Path(p).parent.name == layout
    }
    for cfg in configs.values():
        if cfg.role is BrokerRole.SLAVE:
            master = configs[cfg.broker_name]
            assert master.role.is_master
            assert cfg.store.ha_master_address == master.ha_address
            assert cfg.master_addr == master.address


def test_ports_distinct_across_layouts():
    ports = [p for layout in LAYOUTS for p in _layout_ports(layout)]
    assert len(ports) == len(set(ports))


def test_dev_properties_equals_toml():
    toml_cfg = load_config(str(CONF / "1m-1s-dev" / "broker-a.toml"))
    props_cfg = load_config(str(CONF / "1m-1s-dev" / "broker-a.properties"))
    assert props_cfg == toml_cfg
    # and the equality is not vacuous: a different file compares unequal
    assert load_config(str(CONF / "1m-1s-dev" / "broker-a-s.toml")) != toml_cfg


# ---------------------------------------------------------------- ports free


def _cfg(listen: int, ha: int, ip: str = "127.0.0.1") -> BrokerConfig:
    return BrokerConfig.from_mapping(
        {"brokerIP1": ip, "listenPort": listen, "haListenPort": ha}, source="n.toml"
    )


def test_check_ports_free_passes_on_free_ports():
    check_ports_free(_cfg(_free_port(), _free_port()))


@pytest.mark.parametrize("busy_key", ["listenPort", "haListenPort"])
def test_check_ports_free_names_the_busy_port(busy_key):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        other = _free_port()
        cfg = _cfg(port, other) if busy_key == "listenPort" else _cfg(other, port)
        with pytest.raises(ConfigError, match=rf"^n\.toml: {busy_key} {port} on 127\.0\.0\.1 is not available"):
            check_ports_free(cfg)


def test_check_ports_free_rejects_a_foreign_address():
    # 192.0.2.0/24 is TEST-NET-1: never an address of this host
    with pytest.raises(ConfigError, match=r"listenPort \d+ on 192\.0\.2\.1 is not available"):
        check_ports_free(_cfg(_free_port(), _free_port(), ip="192.0.2.1"))


def test_addresses_are_parsed_once_and_errors_name_key_and_value():
    """store.address is the one parser: each key's error names the key and the bad value."""
    with pytest.raises(ConfigError) as exc:
        BrokerConfig(namesrv_addr="127.0.0.1:9876;ns2")
    assert str(exc.value) == (
        "namesrvAddr must be host:port[;host:port...], got '127.0.0.1:9876;ns2' (bad entry 'ns2')"
    )
    with pytest.raises(ConfigError, match=r"^namesrvAddr must be host:port\[;host:port\.\.\.\], got ' ; '$"):
        BrokerConfig(namesrv_addr=" ; ")
    with pytest.raises(ConfigError, match=r"^masterAddr must be host:port with an IPv6 host in brackets"):
        BrokerConfig(master_addr="::1:10911")
    with pytest.raises(ConfigError, match=r"^haMasterAddress must be host:port, got '10\.0\.0\.1:0'$"):
        StoreConfig(ha_master_address="10.0.0.1:0")
    assert BrokerConfig(namesrv_addr="a:1; [::1]:2;").namesrv_addr == "a:1; [::1]:2;"


def test_an_ipv6_broker_ip_gives_bracketed_addresses(tmp_path):
    path = write(tmp_path, "toml", {"brokerIP1": "::1", "listenPort": 40911})
    cfg = load_config(path)
    assert (cfg.address, cfg.ha_address, cfg.store.store_host) == ("[::1]:40911", "[::1]:40912", "[::1]:40911")


def test_free_ports_come_from_below_the_ephemeral_range_and_fall_back_to_the_os(monkeypatch):
    """cluster.launch.layout.free_ports: distinct, bindable, drawn from FREE_PORTS (an
    outgoing connection cannot take them); when every draw is taken, the OS's port 0."""
    from cluster.launch import layout

    ports = layout.free_ports(8)
    assert len(set(ports)) == 8 and all(p in layout._free_port_range() for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports[0]))
        monkeypatch.setenv(layout.FREE_PORTS_ENV, f"{ports[0]}-{ports[0]}")  # the only one, taken
        fallback = layout.free_port()
    assert fallback != ports[0] and fallback not in range(20000, 30000)


def test_free_ports_keep_to_the_slice_the_environment_names(monkeypatch):
    """TIDEMQ_FREE_PORTS narrows the draw (test workers each get a slice); a malformed
    value is a clear error, not a silent fallback to the whole range."""
    from cluster.launch import layout

    lo = layout.free_ports(1)[0]
    monkeypatch.setenv(layout.FREE_PORTS_ENV, f"{lo}-{lo + 199}")
    assert all(lo <= p < lo + 200 for p in layout.free_ports(5))
    for bad in ("20000", "x-y", "30000-20000", "80-90"):
        monkeypatch.setenv(layout.FREE_PORTS_ENV, bad)
        with pytest.raises(layout.LayoutError, match="TIDEMQ_FREE_PORTS"):
            layout.free_port()


def test_free_port_never_hands_out_a_port_twice_in_a_row_of_calls():
    """Ports chosen one call at a time (a layout's configs are written before its nodes
    bind them) are distinct: 300 calls from 10,000 ports would repeat one about four
    times on average if each draw forgot the last (a slave once got its master's port)."""
    from cluster.launch import layout

    ports = [layout.free_port() for _ in range(300)]
    assert len(set(ports)) == 300


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_uncommitted_is_rocketmq_5s_key_off_by_default(tmp_path, fmt):
    """readUnCommitted (RocketMQ 5's spelling) turns the confirm-offset limit off per node."""
    assert not load_config(write(tmp_path, fmt, {})).store.read_un_committed
    assert load_config(write(tmp_path, fmt, {"readUnCommitted": True}, name="on")).store.read_un_committed
