"""controllerMode / etcdEndpoints / controllerLeaseMs / the in-sync keys: typed, validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config import load_config
from store.config import ConfigError
from tests.node.nodeproc import toml_value


def write(tmp_path: Path, values: dict) -> str:
    path = tmp_path / "broker.toml"
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
    return str(path)


def test_without_controller_mode_nothing_changes(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, {}))
    assert cfg.controller_mode is None and cfg.etcd_endpoints is None
    assert cfg.controller_lease_ms == 3000
    assert (cfg.ha_max_gap_not_in_sync, cfg.ha_max_time_slave_not_catchup) == (256 * 1024, 15_000)


def test_etcd_mode_is_read(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, {"controllerMode": "etcd", "etcdEndpoints": "127.0.0.1:2379;127.0.0.1:22379",
                                       "controllerLeaseMs": 5000, "haMaxGapNotInSync": 1024}))
    assert cfg.controller_mode == "etcd" and cfg.etcd_endpoints == "127.0.0.1:2379;127.0.0.1:22379"
    assert cfg.controller_lease_ms == 5000 and cfg.ha_max_gap_not_in_sync == 1024


def test_properties_file_too(tmp_path: Path) -> None:
    path = tmp_path / "broker.properties"
    path.write_text("controllerMode=etcd\netcdEndpoints=127.0.0.1:2379\ncontrollerLeaseMs=2000\n")
    cfg = load_config(str(path))
    assert (cfg.controller_mode, cfg.controller_lease_ms) == ("etcd", 2000)


@pytest.mark.parametrize(("values", "message"), [
    ({"controllerMode": "zookeeper", "etcdEndpoints": "127.0.0.1:2379"}, "controllerMode must be one of etcd"),
    ({"controllerMode": "etcd"}, "needs etcdEndpoints"),
    ({"etcdEndpoints": "127.0.0.1:2379"}, "controllerMode is not"),
    ({"controllerMode": "etcd", "etcdEndpoints": "nohost"}, "etcdEndpoints"),
    ({"controllerMode": "etcd", "etcdEndpoints": "127.0.0.1:2379", "controllerLeaseMs": 2500}, "whole number of seconds"),
    ({"controllerMode": "etcd", "etcdEndpoints": "127.0.0.1:2379", "controllerLeaseMs": 500}, "controllerLeaseMs"),
    ({"haMaxGapNotInSync": 0}, "haMaxGapNotInSync must be > 0"),
    ({"controllerLeas": 3000}, "controllerLeaseMs"),
])
def test_bad_values_are_clear_errors(tmp_path: Path, values: dict, message: str) -> None:
    path = write(tmp_path, values)
    with pytest.raises(ConfigError, match=message) as e:
        load_config(path)
    assert path in str(e.value)
