"""`tidemq cluster up --metrics`: every process of the layout serves /metrics on a port of
its own, and `cluster status` says where to scrape (docs/metrics.md).

The launcher writes each process's config under `<base>/metrics-conf/` with
metricsExporterType PROM and a free metricsPromExporterPort (a port already given keeps
it, so a restarted process is scraped where it was), and points its record there, as
`--proxy-url` does with its proxied copies. Files the original names relative to itself
are named whole in the copy. A layout whose files set the metrics keys needs no flag:
`scrape_targets` reads whatever config a process runs with.
"""

from __future__ import annotations

import json
import os
import secrets
import tomllib
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from node.config import ConfigError, load_config

from ..namesrv.config import load_namesrv_config
from .layout import free_ports, set_key
from .state import LayoutError, NodeRecord, Stage

__all__ = ["METRICS_CONF", "TARGETS_FILE", "scrape_target", "write_configs", "write_targets"]

METRICS_CONF = "metrics-conf"
TOKEN_FILE = "scrape.token"
TARGETS_FILE = "prometheus-targets.json"
"""`<base>/prometheus-targets.json`: the processes to scrape in Prometheus's file_sd format
(README: a scrape config with `file_sd_configs` reads it; Prometheus rereads it when it changes)."""


def write_configs(specs: list[NodeRecord], base: Path) -> None:
    """Write each process's config with the metrics keys under `<base>/metrics-conf/` and
    point its record there."""
    out = base / METRICS_CONF
    out.mkdir(parents=True, exist_ok=True)
    token = out / TOKEN_FILE
    if not token.exists():
        token.write_text(secrets.token_urlsafe(24) + "\n", encoding="utf-8")
        token.chmod(0o600)
    targets = {spec.name: out / Path(spec.config).name for spec in specs}
    kept = {name: _port_in(path) for name, path in targets.items()}
    fresh = iter(free_ports(sum(1 for p in kept.values() if p is None)))
    for spec in specs:
        source = Path(spec.config)
        port = kept[spec.name] or next(fresh)
        values: dict[str, object] = {"metricsExporterType": "PROM", "metricsPromExporterPort": port}
        try:
            if spec.stage is Stage.NAMESRV:
                ns = load_namesrv_config(str(source))
                files = {"aclFile": ns.acl_file if ns.acl_enable else None, "tlsCertFile": ns.tls_cert_file,
                         "tlsKeyFile": ns.tls_key_file}
                secured = ns.acl_enable
            else:
                cfg = load_config(str(source))
                files = {"aclFile": cfg.acl_file if cfg.acl_enable else None, "secretKeyFile": cfg.secret_key_file,
                         "tlsCertFile": cfg.tls_cert_file, "tlsKeyFile": cfg.tls_key_file,
                         "tlsCaFile": cfg.tls_ca_file}
                secured = cfg.acl_enable
        except ConfigError as e:
            raise LayoutError(str(e)) from None
        values.update({k: v for k, v in files.items() if v})  # whole: the copy lives elsewhere
        if secured:  # aclEnable: a scrape shows a bearer token (Prometheus's bearer_token_file)
            values["metricsPromBearerTokenFile"] = str(token)
        text = source.read_text(encoding="utf-8")
        for key, value in values.items():
            text = set_key(text, key, value, properties=source.suffix == ".properties")
        targets[spec.name].write_text(f"# {source} with /metrics on (tidemq cluster up --metrics)\n" + text,
                                      encoding="utf-8")
        spec.config = str(targets[spec.name])


def _port_in(path: Path) -> int | None:
    """The metrics port an earlier --metrics copy gave, None when there is none."""
    if not path.is_file() or path.suffix != ".toml":
        return None
    try:
        port = tomllib.loads(path.read_text(encoding="utf-8")).get("metricsPromExporterPort")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return port if isinstance(port, int) else None


def scrape_target(record: NodeRecord) -> str | None:
    """The URL of the process's /metrics by the config it runs with, or None when it has none."""
    try:
        if record.stage is Stage.NAMESRV:
            ns = load_namesrv_config(record.config)
            if not ns.metrics_enabled:
                return None
            host, port, tls = ns.metrics_prom_exporter_host or ns.listen_address, ns.metrics_prom_exporter_port, \
                ns.tls_mode
        else:
            cfg = load_config(record.config)
            if not cfg.metrics_enabled:
                return None
            host, port, tls = cfg.metrics_bind_host, cfg.metrics_prom_exporter_port, cfg.tls_mode
    except ConfigError:
        return None
    scheme = "https" if tls == "enforcing" else "http"
    return f"{scheme}://{host}:{port}/metrics"


def write_targets(records: Iterable[NodeRecord], base: Path) -> Path | None:
    """Write `<base>/prometheus-targets.json` (one target group per process, labelled with its
    name, its group and its scheme) when any process serves /metrics; its path, else None."""
    groups = []
    for record in records:
        url = scrape_target(record)
        if url is None:
            continue
        parts = urlsplit(url)
        labels = {"process": record.name, "__scheme__": parts.scheme, "__metrics_path__": parts.path}
        if record.broker_name:
            labels["group"] = record.broker_name
        groups.append({"targets": [parts.netloc], "labels": labels})
    if not groups:
        return None
    path = base / TARGETS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # Prometheus never reads half a file
    return path
