"""StoreConfig: every storage-engine option, RocketMQ's name in snake_case, RocketMQ's default.

`StoreConfig.from_mapping()` takes RocketMQ's camelCase keys (as found in broker.conf) or the
snake_case names, converts strings from `.properties` files, and rejects unknown keys by name
so a typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .address import AddressError, split_host_port

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
KiB = 1024
CQ_STORE_UNIT_SIZE = 20


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the key (and the file when known)."""


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


def _positive(_inst: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value <= 0:
        raise ConfigError(f"{_camel(attribute.name)} must be > 0, got {value!r}")


def _non_negative(_inst: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 0:
        raise ConfigError(f"{_camel(attribute.name)} must be >= 0, got {value!r}")


def _ratio(_inst: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ConfigError(f"{_camel(attribute.name)} must be in (0, 1], got {value!r}")


def _delete_when(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    for part in value.split(";"):
        if not part.strip().isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(
                f"deleteWhen must be hours of day 0-23 separated by ';' (e.g. \"04;05\"), got {value!r}"
            )


def _delay_levels(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    from .schedule import DelayError, parse_delay_levels  # schedule imports message, not config

    try:
        parse_delay_levels(value)
    except DelayError as e:
        raise ConfigError(str(e)) from None


def _crc_on_read(_inst: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("sealed", "all"):
        raise ConfigError(f"{_camel(attribute.name)} must be sealed or all, got {value!r}")


def validate_host_port(_inst: Any, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """attrs validator of an optional host:port option; the error names the camelCase key."""
    if value is None:
        return
    try:
        split_host_port(value)
    except AddressError as e:
        raise ConfigError(f"{_camel(attribute.name)} {e}") from None


def _to_role(value: BrokerRole | str) -> BrokerRole:
    return BrokerRole(value) if isinstance(value, str) else value


def _to_flush_type(value: FlushDiskType | str) -> FlushDiskType:
    return FlushDiskType(value) if isinstance(value, str) else value


def _clamp_used_ratio(value: int | str) -> int:
    """diskMaxUsedSpaceRatio, held to 10..95 as RocketMQ does."""
    return min(95, max(10, int(value)))


@attrs.define(kw_only=True)
class StoreConfig:
    """Options of one store. Defaults are RocketMQ 4.9's MessageStoreConfig values."""

    store_path_root_dir: str = attrs.field(default=os.path.join(os.path.expanduser("~"), "store"))
    # host:port written as STOREHOSTADDRESS and used in offset msgIds (brokerIP1:listenPort).
    store_host: str = attrs.field(default="127.0.0.1:10911", validator=validate_host_port)
    broker_role: BrokerRole = attrs.field(default=BrokerRole.ASYNC_MASTER, converter=_to_role)
    flush_disk_type: FlushDiskType = attrs.field(default=FlushDiskType.ASYNC_FLUSH, converter=_to_flush_type)

    # files
    mapped_file_size_commit_log: int = attrs.field(default=GiB, validator=_positive)
    mapped_file_size_consume_queue: int = attrs.field(default=300_000 * CQ_STORE_UNIT_SIZE, validator=_positive)
    max_hash_slot_num: int = attrs.field(default=5_000_000, validator=_positive)
    max_index_num: int = attrs.field(default=20_000_000, validator=_positive)
    max_message_size: int = attrs.field(default=4 * MiB, validator=_positive)
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    # which reads check a record's body CRC (docs/store.md, "Corrupt records"): "sealed", those
    # of records in sealed CommitLog segments (old data, read back from the disk; the active
    # segment a consumer that keeps up reads is trusted), or "all" (about 0.3 us/KiB more a read)
    check_crc_on_read: str = attrs.field(default="sealed", validator=_crc_on_read)

    # CommitLog flush / commit
    flush_interval_commit_log: int = attrs.field(default=500, validator=_positive)
    flush_commit_log_least_pages: int = attrs.field(default=4, validator=_non_negative)
    flush_commit_log_thorough_interval: int = attrs.field(default=10_000, validator=_non_negative)
    flush_commit_log_timed: bool = False
    sync_flush_timeout: int = attrs.field(default=5000, validator=_positive)
    sync_flush_inline: bool = True
    """SYNC_FLUSH's fdatasync in the event loop (Redis's `appendfsync always` way), false: in a
    worker thread. Inline has no thread hop per flush, but nothing else runs while the disk
    syncs; measured faster (16 x 1: 1.57 x the messages, 0.59 x the CPU each), so the default
    (docs/request-path.md). Not a RocketMQ key."""
    commit_interval_commit_log: int = attrs.field(default=200, validator=_positive)
    commit_commit_log_least_pages: int = attrs.field(default=4, validator=_non_negative)
    commit_commit_log_thorough_interval: int = attrs.field(default=200, validator=_non_negative)
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = attrs.field(default=5, validator=_positive)
    fast_fail_if_no_buffer_in_store_pool: bool = False
    os_page_cache_busy_timeout_mills: int = attrs.field(default=1000, validator=_positive)

    # ConsumeQueue flush
    flush_interval_consume_queue: int = attrs.field(default=1000, validator=_positive)
    flush_consume_queue_least_pages: int = attrs.field(default=2, validator=_non_negative)
    flush_consume_queue_thorough_interval: int = attrs.field(default=60_000, validator=_non_negative)

    # reads
    max_transfer_bytes_on_message_in_memory: int = attrs.field(default=256 * KiB, validator=_positive)
    max_transfer_count_on_message_in_memory: int = attrs.field(default=32, validator=_positive)
    max_msgs_num_batch: int = attrs.field(default=64, validator=_positive)

    # cleanup
    file_reserved_time: int = attrs.field(default=72, validator=_positive)
    delete_when: str = attrs.field(default="04", validator=_delete_when)
    disk_max_used_space_ratio: int = attrs.field(default=75, converter=_clamp_used_ratio)
    disk_space_warning_level_ratio: float = attrs.field(default=0.90, validator=_ratio)
    disk_space_clean_forcibly_ratio: float = attrs.field(default=0.85, validator=_ratio)
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = attrs.field(default=10_000, validator=_positive)
    delete_commit_log_files_interval: int = attrs.field(default=100, validator=_non_negative)
    delete_consume_queue_files_interval: int = attrs.field(default=100, validator=_non_negative)
    destroy_mapped_file_interval_forcibly: int = attrs.field(default=120_000, validator=_non_negative)
    redelete_hanged_file_interval: int = attrs.field(default=120_000, validator=_non_negative)

    # replication
    ha_listen_port: int = attrs.field(default=10912, validator=_non_negative)
    ha_send_heartbeat_interval: int = attrs.field(default=5000, validator=_positive)
    ha_housekeeping_interval: int = attrs.field(default=20_000, validator=_positive)
    ha_transfer_batch_size: int = attrs.field(default=32 * KiB, validator=_positive)
    ha_master_address: str | None = attrs.field(default=None, validator=validate_host_port)
    ha_slave_fallbehind_max: int = attrs.field(default=256 * MiB, validator=_positive)
    slave_timeout: int = attrs.field(default=3000, validator=_positive)
    # RocketMQ 5's readUnCommitted: true lets consumers read past the confirm offset (what
    # every in-sync member holds), on a master and on a slave; records a promotion cuts may
    # then be read, and their queue offsets' next messages skipped (docs/failover.md)
    read_un_committed: bool = False  # snake_case of RocketMQ's camelCase key

    # scheduled messages: delay of each DELAY level (store/schedule.py)
    message_delay_level: str = attrs.field(
        default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", validator=_delay_levels
    )

    @property
    def cq_file_size(self) -> int:
        """ConsumeQueue segment size, rounded up to a whole number of 20-byte units."""
        size = self.mapped_file_size_consume_queue
        return -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def transient_pool_active(self) -> bool:
        """RocketMQ 4.9: the pool is used only with ASYNC_FLUSH on a master."""
        return (
            self.transient_store_pool_enable
            and self.flush_disk_type is FlushDiskType.ASYNC_FLUSH
            and self.broker_role.is_master
        )

    def path(self, *parts: str) -> str:
        return os.path.join(self.store_path_root_dir, *parts)

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in attrs.fields(cls)]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, source: str = "") -> StoreConfig:
        """Build from camelCase (RocketMQ) or snake_case keys; string values are converted."""
        kwargs = {}
        for key, value in values.items():
            name = snake_name(key)
            if name not in _FIELDS:
                raise ConfigError(_unknown_key_message(key, source))
            kwargs[name] = convert_value(_FIELDS[name], value, key, source)
        try:
            return cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}" if source else str(e)) from None


# RocketMQ spells "Mapped" as "Maped" in a few option names; accept both.
_ALIASES = {
    "destroy_maped_file_interval_forcibly": "destroy_mapped_file_interval_forcibly",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def snake_name(key: str) -> str:
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key.strip()).lower()
    return _ALIASES.get(name, name)


def _unknown_key_message(key: str, source: str, extra: Iterable[str] = ()) -> str:
    """`extra`: more valid key names (e.g. the node's broker keys) to suggest from."""
    known = [_camel(n) for n in StoreConfig.option_names()] + list(extra)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    where = f"{source}: " if source else ""
    return f"{where}unknown option {key!r}{hint}"


_FIELDS = {f.name: f for f in attrs.fields(StoreConfig)}


def convert_value(field: attrs.Attribute[Any], value: Any, key: str, source: str = "") -> Any:
    """Convert a raw config value (often a string from .properties) to the field's type."""
    where = f"{source}: " if source else ""
    typ = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    try:
        if typ == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                return value.strip().lower() == "true"
            raise ValueError
        if typ == "int":
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, str):
                return int(value.strip())
            if isinstance(value, int):
                return value
            raise ValueError
        if typ == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ in ("BrokerRole", "FlushDiskType"):
            enum_cls = BrokerRole if typ == "BrokerRole" else FlushDiskType
            if isinstance(value, enum_cls):
                return value
            return enum_cls(str(value).strip().upper())
        if typ in ("str", "str | None"):
            if value is None and typ == "str | None":
                return None
            if isinstance(value, int | str) and not isinstance(value, bool):
                return str(value).strip()
            raise ValueError
    except ValueError:
        raise ConfigError(f"{where}bad value for {key!r}: {value!r} (expected {_expected(typ)})") from None
    return value


def _expected(typ: str) -> str:
    return {
        "bool": "true or false",
        "int": "an integer",
        "float": "a number",
        "BrokerRole": "one of " + ", ".join(r.value for r in BrokerRole),
        "FlushDiskType": "one of " + ", ".join(r.value for r in FlushDiskType),
    }.get(typ, "a string")
