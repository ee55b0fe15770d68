"""The name server's config file (TOML or .properties): `NamesrvConfig`."""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from node.config import ConfigError, parse_properties
from wire.tls import TlsSettings

MiB = 1024 * 1024
DEFAULT_PORT = 9876


@attrs.define(kw_only=True)
class NamesrvConfig:
    """Name server settings; the file uses the camelCase keys in `_KEYS`."""

    listen_port: int = DEFAULT_PORT
    listen_address: str = "127.0.0.1"
    broker_expire_ms: int = 30_000
    max_frame_size: int = 8 * MiB
    acl_enable: bool = False  # check logins and permissions (docs/security.md)
    acl_file: str = "acl.toml"  # relative to this config file's directory
    tls_mode: str = "disabled"  # TLS on the client port: disabled | permissive | enforcing
    tls_cert_file: str | None = None  # relative to this config file's directory
    tls_key_file: str | None = None
    # Prometheus metrics (docs/metrics.md), the node's keys: "PROM" serves /metrics
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str | None = None  # default: listenAddress
    metrics_prom_exporter_port: int = 5557
    metrics_prom_bearer_token_file: str | None = None  # relative to this config file's directory
    source: str = attrs.field(default="", eq=False)

    def __attrs_post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"{where}listenPort must be in 0..65535 (0 picks a free port), got {self.listen_port}")
        if not self.listen_address.strip():
            raise ConfigError(f"{where}listenAddress must not be empty")
        if not 100 <= self.broker_expire_ms <= 3_600_000:
            raise ConfigError(f"{where}brokerExpireMs must be in 100..3600000, got {self.broker_expire_ms}")
        if not 64 * 1024 <= self.max_frame_size <= 1024 * MiB:
            raise ConfigError(f"{where}maxFrameSize must be in 65536..{1024 * MiB}, got {self.max_frame_size}")
        problem = self.tls.problem()
        if problem is not None:
            raise ConfigError(f"{where}{problem}")
        if self.metrics_exporter_type not in ("DISABLE", "PROM"):
            raise ConfigError(f"{where}metricsExporterType must be one of DISABLE, PROM, "
                              f"got {self.metrics_exporter_type!r}")
        if not 1 <= self.metrics_prom_exporter_port <= 65535:
            raise ConfigError(f"{where}metricsPromExporterPort must be in 1..65535, got {self.metrics_prom_exporter_port}")
        if self.metrics_enabled and self.acl_enable and not self.metrics_prom_bearer_token_file:
            raise ConfigError(f"{where}metricsExporterType PROM with aclEnable needs metricsPromBearerTokenFile")

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(self.tls_mode, self.tls_cert_file, self.tls_key_file)


_KEYS = {
    "listenPort": ("listen_port", int),
    "listenAddress": ("listen_address", str),
    "brokerExpireMs": ("broker_expire_ms", int),
    "maxFrameSize": ("max_frame_size", int),
    "aclEnable": ("acl_enable", bool),
    "aclFile": ("acl_file", str),
    "tlsMode": ("tls_mode", str),
    "tlsCertFile": ("tls_cert_file", str),
    "tlsKeyFile": ("tls_key_file", str),
    "metricsExporterType": ("metrics_exporter_type", str),
    "metricsPromExporterHost": ("metrics_prom_exporter_host", str),
    "metricsPromExporterPort": ("metrics_prom_exporter_port", int),
    "metricsPromBearerTokenFile": ("metrics_prom_bearer_token_file", str),
}


def namesrv_config_from_mapping(values: Mapping[str, Any], *, source: str = "") -> NamesrvConfig:
    """Build from RocketMQ-style keys; an unknown key or a wrong type names the key."""
    where = f"{source}: " if source else ""
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in _KEYS:
            close = difflib.get_close_matches(key, list(_KEYS), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(_KEYS)}"
            raise ConfigError(f"{where}unknown key {key!r}{hint}")
        name, type_ = _KEYS[key]
        if type_ is int and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(f"{where}{key} must be an integer, got {value!r}") from None
        if type_ is bool and isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if type(value) is not type_:
            kind = {int: "an integer", bool: "true or false", str: "a string"}[type_]
            raise ConfigError(f"{where}{key} must be {kind}, got {value!r}")
        kwargs[name] = value
    here = os.path.dirname(os.path.abspath(source)) if source else os.getcwd()
    kwargs["acl_file"] = os.path.join(here, os.path.expanduser(kwargs.get("acl_file", "acl.toml")))
    for name in ("tls_cert_file", "tls_key_file", "metrics_prom_bearer_token_file"):
        if kwargs.get(name):
            kwargs[name] = os.path.join(here, os.path.expanduser(kwargs[name]))
    return NamesrvConfig(**kwargs, source=source)


def load_namesrv_config(path: str) -> NamesrvConfig:
    """Read a namesrv `.toml` (or `.properties`) file, e.g. conf/2m-2s-sync/namesrv.toml."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
    if os.path.splitext(path)[1].lower() == ".properties":
        values: Mapping[str, Any] = parse_properties(text, source=path)
    else:
        try:
            values = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: TOML syntax error: {e}") from None
    return namesrv_config_from_mapping(values, source=path)
