"""The node's config: a RocketMQ-style broker file (TOML or .properties) → `BrokerConfig`.

Files use RocketMQ's camelCase key names (`brokerName`, `brokerRole`, `listenPort`,
`storePathRootDir`, ...); the snake_case spelling is accepted too. Broker-only keys live in
`BrokerConfig`; every storage option goes to `store.config.StoreConfig`, whose option list
is the single source of truth for store keys. Anything else is an error naming the file and
the key, with the nearest valid name suggested, so a typo never falls back to a default.

Derived values, fixed at load:

- `storeHost` = `brokerIP1:listenPort` (setting it in the file is an error), whatever the
  node advertises: it is written into every record and msgId, so it names the node that
  stored a message, not a proxy that may be gone tomorrow;
- the addresses the node advertises (registers with the name server, so clients and
  slaves connect there): `advertisedAddress` / `haAdvertisedAddress` when set (a proxy or
  NAT in front of the node), else what it binds, `brokerIP1:listenPort` /
  `brokerIP1:haListenPort`;
- `haListenPort` absent or <= 0 → `listenPort + 1` (RocketMQ 5's rule);
- a relative `storePathRootDir` is resolved against the current working directory, or
  against `base_dir` when the caller passes one (the launcher's `--base-dir`), never against
  the config file's directory: the same layout can then run in several scratch dirs.

Whether the ports are actually free is checked by `check_ports_free()` when the node starts,
not at load, so tools can load a config while its node is running.
"""

from __future__ import annotations

import os
import socket
import ssl
import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from store.address import AddressError, format_host_port, parse_address_list
from store.config import (
    BrokerRole,
    ConfigError,
    StoreConfig,
    _unknown_key_message,
    convert_value,
    snake_name,
    validate_host_port,
)
from wire.credentials import Credentials, CredentialsError
from wire.tls import TlsError, TlsSettings

MiB = 1024 * 1024

__all__ = [
    "BrokerConfig",
    "ConfigError",
    "check_ports_free",
    "load_config",
    "parse_properties",
]


def _port(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if not 1 <= value <= 65535:
        raise ConfigError(f"{_CAMEL.get(attribute.name, attribute.name)} must be in 1..65535, got {value!r}")


def _positive(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{_CAMEL.get(attribute.name, attribute.name)} must be > 0, got {value!r}")


def _register_period(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if not 1000 <= value <= 60_000:
        raise ConfigError(
            f"{_CAMEL.get(attribute.name, attribute.name)} must be in 1000..60000 ms, got {value!r}"
        )


def _channel_expired(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if not 1000 <= value <= 3_600_000:
        raise ConfigError(f"channelExpiredTimeout must be in 1000..3600000 ms, got {value!r}")


def _non_empty(_inst: Any, attribute: attrs.Attribute, value: str) -> None:
    if not value.strip():
        raise ConfigError(f"{_CAMEL.get(attribute.name, attribute.name)} must not be empty")


def _addr_list(_inst: Any, attribute: attrs.Attribute, value: str | None) -> None:
    """RocketMQ's namesrvAddr: one or more host:port separated by ';'."""
    if value is None:
        return
    name = _CAMEL.get(attribute.name, attribute.name)
    try:
        addresses = parse_address_list(value)
    except AddressError as e:
        raise ConfigError(f"{name} {e}") from None
    if not addresses:
        raise ConfigError(f"{name} must be host:port[;host:port...], got {value!r}")


CONTROLLER_MODES = ("etcd",)


def _controller_mode(_inst: Any, attribute: attrs.Attribute, value: str | None) -> None:
    if value is not None and value not in CONTROLLER_MODES:
        raise ConfigError(f"controllerMode must be one of {', '.join(CONTROLLER_MODES)} "
                          f"(or unset for manual promotion), got {value!r}")


METRICS_EXPORTER_TYPES = ("DISABLE", "PROM")


def _exporter_type(_inst: Any, attribute: attrs.Attribute, value: str) -> None:
    if value not in METRICS_EXPORTER_TYPES:
        raise ConfigError(f"metricsExporterType must be one of {', '.join(METRICS_EXPORTER_TYPES)} "
                          f"(RocketMQ's OTLP_GRPC and LOG exporters are not served), got {value!r}")


def _lease_ms(_inst: Any, attribute: attrs.Attribute, value: int) -> None:
    if not 1000 <= value <= 60_000 or value % 1000:
        raise ConfigError(f"controllerLeaseMs must be a whole number of seconds in 1000..60000 ms "
                          f"(etcd leases count seconds), got {value!r}")


@attrs.define(kw_only=True)
class BrokerConfig:
    """One node's settings: broker-level keys plus the embedded store's `StoreConfig`.

    Cross-field rules (brokerId vs brokerRole, a slave's haMasterAddress, distinct ports,
    frame size vs message size) are checked on construction, so every instance is usable.
    """

    broker_cluster_name: str = attrs.field(default="DefaultCluster", validator=_non_empty)
    broker_name: str = attrs.field(default="broker-a", validator=_non_empty)
    broker_id: int = 0
    broker_ip1: str = attrs.field(default="127.0.0.1", validator=_non_empty)
    listen_port: int = attrs.field(default=10911, validator=_port)
    namesrv_addr: str | None = attrs.field(default=None, validator=_addr_list)
    # How often (ms) the node registers with every name server in namesrvAddr (RocketMQ's
    # registerNameServerPeriod, 30 s there; 10 s here so a restarted name server is whole
    # again quickly). It also registers at start and whenever its topics change.
    register_name_server_period: int = attrs.field(default=10_000, validator=_register_period)
    # A consumer-group member silent this long (ms) is dropped (RocketMQ's
    # channelExpiredTimeout, 120 s), though never before 2 of its own heartbeats + 10 s;
    # a member whose connection closes is dropped at once.
    channel_expired_timeout: int = attrs.field(default=120_000, validator=_channel_expired)
    auto_create_topic_enable: bool = True
    # Refuse transactional half messages (TRAN_MSG=true) with NO_PERMISSION (RocketMQ's
    # rejectTransactionMessage; docs/transactions.md).
    reject_transaction_message: bool = False
    # Serve SQL92 subscriptions (RocketMQ's enablePropertyFilter, off there too): a pull
    # evaluates the expression on each message's properties (docs/consumer-groups.md).
    enable_property_filter: bool = False
    # Create the message trace topic (msgTraceTopicName, 1 queue) when the node starts as a
    # master (RocketMQ's traceTopicEnable, off there too): clients with enableMsgTrace send
    # their traces there even where autoCreateTopicEnable is off (docs/trace.md).
    trace_topic_enable: bool = False
    msg_trace_topic_name: str = attrs.field(default="RMQ_SYS_TRACE_TOPIC", validator=_non_empty)
    # The transaction check service (a master's; docs/transactions.md): every
    # transactionCheckInterval ms it asks a live producer of the group about each half message
    # open for transactionTimeOut ms (or its CHECK_IMMUNITY_TIME_IN_SECONDS); after
    # transactionCheckMax checks the half message goes to TRANS_CHECK_MAX_TIME_TOPIC.
    transaction_check_interval: int = attrs.field(default=60_000, validator=_positive)
    transaction_time_out: int = attrs.field(default=6_000, validator=_positive)
    transaction_check_max: int = attrs.field(default=15, validator=_positive)
    default_topic_queue_nums: int = attrs.field(default=4, validator=_positive)
    # Largest client-protocol frame accepted or sent (wire/protocol.py).
    max_frame_size: int = attrs.field(default=8 * MiB, validator=_positive)
    # A slave's view of its master's client address (listenPort, not the HA port): the slave
    # copies topics and consumer offsets from there every 10 s. Unused on a master.
    master_addr: str | None = attrs.field(default=None, validator=validate_host_port)
    # host:port the node registers with the name server instead of the ones it binds, when
    # something (a proxy, NAT) stands in front of it: clients routed by the name server
    # connect to `advertisedAddress`, slaves that learn their master there replicate from
    # `haAdvertisedAddress`. The launcher's --proxy-url sets both. Unset: what it binds.
    advertised_address: str | None = attrs.field(default=None, validator=validate_host_port)
    ha_advertised_address: str | None = attrs.field(default=None, validator=validate_host_port)
    # ---- automatic failover (docs/auto-failover.md); unset: manual promotion only
    # "etcd": each group's master is elected under an etcd lease (node/failover/controller.py).
    controller_mode: str | None = attrs.field(default=None, validator=_controller_mode)
    # etcd client endpoints, host:port[;host:port...] (required with controllerMode).
    etcd_endpoints: str | None = attrs.field(default=None, validator=_addr_list)
    # The leadership lease's TTL (ms, whole seconds in etcd; kept alive at a third of it).
    controller_lease_ms: int = attrs.field(default=3000, validator=_lease_ms)
    # RocketMQ 5's in-sync rule: a slave within this many bytes of the master ...
    ha_max_gap_not_in_sync: int = attrs.field(default=256 * 1024, validator=_positive)
    # ... that acknowledged within this many ms belongs to the in-sync set.
    ha_max_time_slave_not_catchup: int = attrs.field(default=15_000, validator=_positive)
    # security (docs/security.md): check logins and permissions on the client port against
    # aclFile (relative to this config file's directory); the node logs in to the name
    # server and its master as accessKey, with the secret in secretKeyFile
    acl_enable: bool = attrs.field(default=False)
    acl_file: str = attrs.field(default="acl.toml", validator=_non_empty)
    access_key: str | None = attrs.field(default=None)
    secret_key_file: str | None = attrs.field(default=None)
    # TLS on the client and HA ports (wire/tls.py): disabled | permissive | enforcing;
    # the files are relative to this config file's directory; tlsCaFile checks the other
    # processes' certificates (this node's own connections, and slaves on the HA port)
    tls_mode: str = attrs.field(default="disabled")
    tls_cert_file: str | None = attrs.field(default=None)
    tls_key_file: str | None = attrs.field(default=None)
    tls_ca_file: str | None = attrs.field(default=None)
    # Prometheus metrics (docs/metrics.md): RocketMQ 5's keys. "PROM" serves /metrics on
    # metricsPromExporterHost (default brokerIP1):metricsPromExporterPort; over TLS when
    # tlsMode is on; with a bearer token (metricsPromBearerTokenFile, required with aclEnable).
    metrics_exporter_type: str = attrs.field(default="DISABLE", validator=_exporter_type)
    metrics_prom_exporter_host: str | None = attrs.field(default=None)
    metrics_prom_exporter_port: int = attrs.field(default=5557, validator=_port)
    metrics_prom_bearer_token_file: str | None = attrs.field(default=None)
    # Per-topic and per-group series at most (RocketMQ's metricsOtelCardinalityLimit): past
    # it a scrape refuses the rest and counts them (rocketmq_metrics_series_refused).
    metrics_otel_cardinality_limit: int = attrs.field(default=50_000, validator=_positive)
    store: StoreConfig = attrs.field(factory=StoreConfig)
    # The file this came from, for error messages; not part of the config's value.
    source: str = attrs.field(default="", eq=False)

    def __attrs_post_init__(self) -> None:
        problem = _cross_field_problem(self)
        if problem:
            raise ConfigError(f"{self.source}: {problem}" if self.source else problem)
        self.namesrv_addresses = tuple(parse_address_list(self.namesrv_addr)) if self.namesrv_addr else ()

    namesrv_addresses: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    """namesrvAddr split once, at load: each name server's host:port (empty without one)."""
    _security_files: dict[str, Any] = attrs.field(init=False, eq=False, repr=False, factory=dict)
    """What the security files hold, read at first use (`credentials`, `client_tls`): a
    file names them, and a tool that only reads the config need not have them."""

    @property
    def credentials(self) -> Credentials | None:
        """The account the node logs in to name servers and peers as (accessKey, the secret
        in secretKeyFile), or None; ConfigError when the file cannot be read."""
        if "credentials" not in self._security_files:
            credentials = None
            if self.access_key is not None and self.secret_key_file is not None:
                try:
                    credentials = Credentials.from_file(self.access_key, self.secret_key_file)
                except CredentialsError as e:
                    raise ConfigError(f"{self.source}: secretKeyFile: {e}" if self.source else str(e)) from None
            self._security_files["credentials"] = credentials
        return self._security_files["credentials"]

    def check_security_files(self) -> None:
        """Read the files the node's own connections need (its secret, its TLS files) now:
        ConfigError when one cannot be used, at start rather than at the first connection."""
        self.credentials  # noqa: B018 - read for the error
        self.client_tls  # noqa: B018

    @property
    def client_tls(self) -> ssl.SSLContext | None:
        """With tlsMode on: the TLS context of this node's own connections (name servers, its
        master, peers), from tlsCaFile, tlsCertFile and tlsKeyFile; ConfigError when a file
        is wrong."""
        if "client_tls" not in self._security_files:
            context = None
            if self.tls.enabled:
                try:
                    context = self.tls.client_context()
                except TlsError as e:
                    raise ConfigError(f"{self.source}: {e}" if self.source else str(e)) from None
            self._security_files["client_tls"] = context
        return self._security_files["client_tls"]

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(self.tls_mode, self.tls_cert_file, self.tls_key_file, self.tls_ca_file)

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_exporter_type == "PROM"

    @property
    def metrics_bind_host(self) -> str:
        """Where /metrics listens: metricsPromExporterHost, else brokerIP1."""
        return self.metrics_prom_exporter_host or self.broker_ip1

    @property
    def role(self) -> BrokerRole:
        return self.store.broker_role

    @property
    def ha_listen_port(self) -> int:
        return self.store.ha_listen_port

    @property
    def bind_address(self) -> str:
        """Where the client-protocol server listens, also the store host in offset msgIds."""
        return format_host_port(self.broker_ip1, self.listen_port)

    @property
    def ha_bind_address(self) -> str:
        """Where the HA service listens (when this node is a master)."""
        return format_host_port(self.broker_ip1, self.store.ha_listen_port)

    @property
    def address(self) -> str:
        """The client address this node advertises: registered with the name server."""
        return self.advertised_address or self.bind_address

    @property
    def ha_address(self) -> str:
        """The HA address it advertises: slaves that learn their master from the name
        server replicate from here."""
        return self.ha_advertised_address or self.ha_bind_address

    def own_addresses(self) -> set[str]:
        """Every address that reaches this node, bound or advertised."""
        return {self.bind_address, self.ha_bind_address, self.address, self.ha_address}

    @classmethod
    def option_names(cls) -> list[str]:
        """Broker-level keys accepted in a file (snake_case)."""
        return [f.name for f in attrs.fields(cls) if f.name not in _NOT_KEYS]

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], *, source: str = "", base_dir: str | None = None
    ) -> BrokerConfig:
        """Build from a flat mapping of RocketMQ keys (camelCase or snake_case).

        String values (from .properties) are converted to each option's type; `source`
        prefixes every error message; `base_dir` anchors a relative storePathRootDir
        (default: the current working directory).
        """
        where = f"{source}: " if source else ""
        broker_kwargs: dict[str, Any] = {}
        store_values: dict[str, Any] = {}
        spelled: dict[str, str] = {}  # snake name → key as written: duplicates, messages
        for key, value in values.items():
            name = snake_name(key)
            if name in spelled:
                raise ConfigError(f"{where}{key!r} and {spelled[name]!r} set the same option")
            spelled[name] = key
            if name == "store_host":
                raise ConfigError(
                    f"{where}{key!r} cannot be set: it is derived as brokerIP1:listenPort"
                )
            if name in _BROKER_FIELDS:
                if value == "" and name in _OPTIONAL_STR:
                    value = None
                broker_kwargs[name] = convert_value(_BROKER_FIELDS[name], value, key, source)
            elif name in _STORE_FIELDS:
                if value == "" and name in _OPTIONAL_STR:
                    value = None
                store_values[name] = value
            else:
                raise ConfigError(_unknown_key_message(key, source, _BROKER_KEYS))

        # Broker values first: storeHost is derived from them, and a bad listenPort should
        # be reported as listenPort, not as the storeHost built from it.
        for name, value in broker_kwargs.items():
            validator = _BROKER_FIELDS[name].validator
            if validator is not None:
                try:
                    validator(None, _BROKER_FIELDS[name], value)
                except ConfigError as e:
                    raise ConfigError(f"{where}{e}") from None

        listen_port: int = broker_kwargs.get("listen_port", _plain_default("listen_port"))
        broker_ip1: str = broker_kwargs.get("broker_ip1", _plain_default("broker_ip1"))
        ha_port = 0
        if "ha_listen_port" in store_values:
            key = spelled["ha_listen_port"]
            ha_port = convert_value(
                _STORE_FIELDS["ha_listen_port"], store_values["ha_listen_port"], key, source
            )
        if ha_port <= 0:
            ha_port = listen_port + 1
        store_values["ha_listen_port"] = ha_port
        store_values["store_host"] = format_host_port(broker_ip1, listen_port)
        if "store_path_root_dir" in store_values:
            key = spelled["store_path_root_dir"]
            raw = convert_value(
                _STORE_FIELDS["store_path_root_dir"], store_values["store_path_root_dir"], key, source
            )
            if not raw:
                raise ConfigError(f"{where}{key!r} must not be empty")
            path = os.path.expanduser(raw)
            store_values["store_path_root_dir"] = os.path.abspath(
                os.path.join(base_dir if base_dir is not None else os.getcwd(), path)
            )

        # security files sit beside the config file: anchor them there
        here = os.path.dirname(os.path.abspath(source)) if source else os.getcwd()
        for name in ("acl_file", "secret_key_file", "tls_cert_file", "tls_key_file", "tls_ca_file",
                     "metrics_prom_bearer_token_file"):
            if broker_kwargs.get(name):
                broker_kwargs[name] = os.path.join(here, os.path.expanduser(broker_kwargs[name]))
        broker_kwargs.setdefault("acl_file", os.path.join(here, "acl.toml"))

        # hand the store its keys as the file spelled them, so its messages quote the file
        store_mapping = {spelled.get(name, name): value for name, value in store_values.items()}
        store = StoreConfig.from_mapping(store_mapping, source=source)
        try:
            return cls(**broker_kwargs, store=store, source=source)
        except ConfigError as e:
            msg = str(e)
            if source and not msg.startswith(f"{source}: "):
                msg = f"{source}: {msg}"
            raise ConfigError(msg) from None


# Keys spelled the RocketMQ way where the generic camelCase differs (brokerIP1, not brokerIp1).
_CAMEL = {
    "broker_cluster_name": "brokerClusterName",
    "broker_name": "brokerName",
    "broker_id": "brokerId",
    "broker_ip1": "brokerIP1",
    "listen_port": "listenPort",
    "namesrv_addr": "namesrvAddr",
    "register_name_server_period": "registerNameServerPeriod",
    "channel_expired_timeout": "channelExpiredTimeout",
    "auto_create_topic_enable": "autoCreateTopicEnable",
    "reject_transaction_message": "rejectTransactionMessage",
    "enable_property_filter": "enablePropertyFilter",
    "trace_topic_enable": "traceTopicEnable",
    "msg_trace_topic_name": "msgTraceTopicName",
    "transaction_check_interval": "transactionCheckInterval",
    "transaction_time_out": "transactionTimeOut",
    "transaction_check_max": "transactionCheckMax",
    "default_topic_queue_nums": "defaultTopicQueueNums",
    "max_frame_size": "maxFrameSize",
    "master_addr": "masterAddr",
    "advertised_address": "advertisedAddress",
    "ha_advertised_address": "haAdvertisedAddress",
    "ha_listen_port": "haListenPort",
    "ha_master_address": "haMasterAddress",
    "broker_role": "brokerRole",
    "controller_mode": "controllerMode",
    "etcd_endpoints": "etcdEndpoints",
    "controller_lease_ms": "controllerLeaseMs",
    "ha_max_gap_not_in_sync": "haMaxGapNotInSync",
    "ha_max_time_slave_not_catchup": "haMaxTimeSlaveNotCatchup",
    "acl_enable": "aclEnable",
    "acl_file": "aclFile",
    "access_key": "accessKey",
    "secret_key_file": "secretKeyFile",
    "tls_mode": "tlsMode",
    "tls_cert_file": "tlsCertFile",
    "tls_key_file": "tlsKeyFile",
    "tls_ca_file": "tlsCaFile",
    "metrics_exporter_type": "metricsExporterType",
    "metrics_prom_exporter_host": "metricsPromExporterHost",
    "metrics_prom_exporter_port": "metricsPromExporterPort",
    "metrics_prom_bearer_token_file": "metricsPromBearerTokenFile",
    "metrics_otel_cardinality_limit": "metricsOtelCardinalityLimit",
}
_NOT_KEYS = {"store", "source", "namesrv_addresses", "_security_files"}
_BROKER_FIELDS = {f.name: f for f in attrs.fields(BrokerConfig) if f.name not in _NOT_KEYS}
_STORE_FIELDS = {f.name: f for f in attrs.fields(StoreConfig)}


def _plain_default(name: str) -> Any:
    """A BrokerConfig key's default, for the keys read before the config is built (each has
    a plain value, not a factory)."""
    default = _BROKER_FIELDS[name].default
    if default is None:
        raise TypeError(f"BrokerConfig.{name} has no plain default")
    return default
_BROKER_KEYS = [_CAMEL[n] for n in _BROKER_FIELDS]
_OPTIONAL_STR = {"namesrv_addr", "ha_master_address", "master_addr", "advertised_address",
                 "ha_advertised_address", "controller_mode", "etcd_endpoints", "access_key", "secret_key_file",
                 "tls_cert_file", "tls_key_file", "tls_ca_file", "metrics_prom_exporter_host",
                 "metrics_prom_bearer_token_file"}
assert set(_CAMEL) >= set(_BROKER_FIELDS), "every broker key needs its RocketMQ spelling"
assert not set(_BROKER_FIELDS) & set(_STORE_FIELDS), "a key belongs to the broker or the store"


def _cross_field_problem(cfg: BrokerConfig) -> str | None:
    """The first rule that spans several keys and is broken, or None."""
    role = cfg.store.broker_role
    if cfg.broker_id < 0:
        return f"brokerId must be >= 0 (0 = master, > 0 = slave), got {cfg.broker_id}"
    if cfg.broker_id == 0 and role is BrokerRole.SLAVE:
        return "brokerId 0 is the master's id but brokerRole is SLAVE; a slave needs brokerId > 0"
    if cfg.broker_id > 0 and role is not BrokerRole.SLAVE:
        return (
            f"brokerId {cfg.broker_id} is a slave's id but brokerRole is {role.value}; "
            "a master has brokerId 0"
        )
    if role is BrokerRole.SLAVE and not cfg.store.ha_master_address and not cfg.namesrv_addr:
        return (
            "haMasterAddress (host:port of the master's HA port) is required when brokerRole is SLAVE "
            "and namesrvAddr is not set (with namesrvAddr the name server tells the slave its master)"
        )
    ha = cfg.store.ha_listen_port
    if not 1 <= ha <= 65535:
        return f"haListenPort must be in 1..65535, got {ha} (it defaults to listenPort + 1)"
    if ha == cfg.listen_port:
        return f"haListenPort and listenPort must differ, both are {ha}"
    if cfg.advertised_address is not None and cfg.advertised_address == cfg.ha_advertised_address:
        return (
            f"advertisedAddress and haAdvertisedAddress must differ, both are {cfg.advertised_address} "
            "(the client and HA protocols need their own ports)"
        )
    if cfg.store.ha_master_address in cfg.own_addresses():
        return f"haMasterAddress {cfg.store.ha_master_address} is this node's own address"
    if cfg.master_addr is not None and cfg.master_addr in cfg.own_addresses():
        return f"masterAddr {cfg.master_addr} is this node's own address"
    if cfg.master_addr is not None and cfg.master_addr == cfg.store.ha_master_address:
        return (
            f"masterAddr {cfg.master_addr} equals haMasterAddress; masterAddr is the master's "
            "client address (its listenPort), haMasterAddress its HA port"
        )
    if cfg.controller_mode is not None and not cfg.etcd_endpoints:
        return f"controllerMode {cfg.controller_mode} needs etcdEndpoints (host:port[;host:port...])"
    if cfg.etcd_endpoints and cfg.controller_mode is None:
        return 'etcdEndpoints is set but controllerMode is not; set controllerMode = "etcd" to use it'
    tls_problem = cfg.tls.problem()
    if tls_problem is not None:
        return tls_problem
    if cfg.tls.enabled and not cfg.tls_ca_file:
        return (f"tlsMode {cfg.tls_mode} needs tlsCaFile: the CA that signed the cluster's certificates "
                "(this node checks its name servers, master and slaves with it)")
    if cfg.metrics_enabled and cfg.acl_enable and not cfg.metrics_prom_bearer_token_file:
        return ("metricsExporterType PROM with aclEnable needs metricsPromBearerTokenFile: the scrape's "
                "bearer token (/metrics shows every topic and group)")
    if cfg.metrics_enabled and cfg.metrics_prom_exporter_port in (cfg.listen_port, ha):
        return f"metricsPromExporterPort {cfg.metrics_prom_exporter_port} is also listenPort or haListenPort"
    if (cfg.access_key is None) != (cfg.secret_key_file is None):
        return "accessKey and secretKeyFile go together: the node logs in as accessKey with the secret in the file"
    if cfg.max_frame_size <= cfg.store.max_message_size:
        return (
            f"maxFrameSize ({cfg.max_frame_size}) must exceed maxMessageSize "
            f"({cfg.store.max_message_size}) so the largest message fits in one frame"
        )
    return None


def parse_properties(text: str, *, source: str = "") -> dict[str, str]:
    """Java-style `key=value` lines: `#`/`!` comments, blank lines, whitespace trimmed.

    A subset of java.util.Properties (no `:` separator, escapes or line continuations),
    enough for RocketMQ's broker files; anything else is an error naming the line rather
    than a silently different reading. A key given twice is an error too.
    """
    where = f"{source}:" if source else "line "
    values: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{where}{lineno}: expected key=value, got {raw.strip()!r}")
        if key in values:
            raise ConfigError(f"{where}{lineno}: {key!r} is already set on line {first_line[key]}")
        values[key] = value.strip()
        first_line[key] = lineno
    return values


def load_config(path: str, *, base_dir: str | None = None) -> BrokerConfig:
    """Load a `.toml` or `.properties` broker file; errors name the file and the key.

    A relative storePathRootDir is resolved against `base_dir`, or the current working
    directory when `base_dir` is None (not against the file's own directory).
    """
    ext = os.path.splitext(path)[1].lower()
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from None
    if ext == ".toml":
        try:
            values: Mapping[str, Any] = tomllib.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
        except tomllib.TOMLDecodeError as e:
            # the message carries "(at line N, column M)"
            raise ConfigError(f"{path}: TOML syntax error: {e}") from None
        for key, value in values.items():
            if isinstance(value, dict):
                raise ConfigError(
                    f"{path}: [{key}] tables are not supported; keys are flat RocketMQ names"
                )
    elif ext == ".properties":
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
        values = parse_properties(text, source=path)
    else:
        raise ConfigError(f"{path}: unknown config format {ext!r}; use .toml or .properties")
    return BrokerConfig.from_mapping(values, source=path, base_dir=base_dir)


def check_ports_free(cfg: BrokerConfig) -> None:
    """Bind listenPort and haListenPort on brokerIP1 briefly; ConfigError if either is taken.

    Called by the node at start, so a second node on the same ports fails with a message
    naming the key instead of half-starting. SO_REUSEADDR matches the real listeners, so a
    port held only by TIME_WAIT connections of a previous run counts as free.
    """
    where = f"{cfg.source}: " if cfg.source else ""
    ports = [("listenPort", cfg.listen_port), ("haListenPort", cfg.store.ha_listen_port)]
    if cfg.metrics_enabled:
        ports.append(("metricsPromExporterPort", cfg.metrics_prom_exporter_port))
    for key, port in ports:
        try:
            host = cfg.metrics_bind_host if key == "metricsPromExporterPort" else cfg.broker_ip1
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            what = "metricsPromExporterHost" if key == "metricsPromExporterPort" else "brokerIP1"
            raise ConfigError(f"{where}{what} {host!r} does not resolve: {e}") from None
        family, type_, proto, _canon, sockaddr = infos[0]
        with socket.socket(family, type_, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(sockaddr)
                s.listen(1)
            except OSError as e:
                raise ConfigError(
                    f"{where}{key} {port} on {host} is not available: {e.strerror or e}"
                ) from None

