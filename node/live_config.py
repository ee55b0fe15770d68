"""The node's config as mqadmin getBrokerConfig shows it, and the few keys updateBrokerConfig
may change while the node runs.

`config_view(cfg)` is every key of node/config.py's BrokerConfig and of its StoreConfig, by
RocketMQ's camelCase name, with the value the node runs with now.

`LIVE_KEYS` are the keys the code reads where it uses them (not once at start), so setting
them on the running config takes effect at the next use: the put waits, the cleanup pass,
the pull transfer cap, the consumer and producer tables' expiry. Every other key (ports,
roles, paths, file sizes, the flush services' cadence, ...) is fixed when the node starts
and is refused by name. A change lives in memory: it lasts until the node restarts or
changes role (a promotion starts its services again from the config file), as the
reply says; put it in the node's config file to keep it.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from store.config import (
    ConfigError,
    StoreConfig,
    _camel,
    _unknown_key_message,
    convert_value,
    snake_name,
)

from .config import _CAMEL, _NOT_KEYS, BrokerConfig

__all__ = ["LIVE_KEYS", "apply_live_value", "canonical_key", "check_live_value", "config_view"]

LIVE_KEYS: dict[str, str] = {
    "syncFlushTimeout": "each SYNC_FLUSH put's wait for its flush (ms)",
    "slaveTimeout": "each SYNC_MASTER put's wait for its slaves (ms)",
    "fileReservedTime": "each cleanup pass: hours a CommitLog file is kept",
    "deleteWhen": "each cleanup pass: the hours of day expired files are deleted",
    "diskMaxUsedSpaceRatio": "each cleanup pass: the disk use (%) over which files go early",
    "maxTransferCountOnMessageInMemory": "each pull: the most messages one answer carries",
    "channelExpiredTimeout": "the consumer and producer tables: when a silent member is dropped (ms)",
}
"""camelCase key → where the running node reads it."""

_BROKER = {f.name: f for f in attrs.fields(BrokerConfig) if f.name not in _NOT_KEYS}
_STORE = {f.name: f for f in attrs.fields(StoreConfig)}


def _name(snake: str) -> str:
    return _CAMEL.get(snake) or _camel(snake)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def config_view(cfg: BrokerConfig) -> dict[str, Any]:
    """Every key → its value now, sorted by key."""
    out = {_name(n): _plain(getattr(cfg, n)) for n in _BROKER}
    out.update({_name(n): _plain(getattr(cfg.store, n)) for n in _STORE})
    return dict(sorted(out.items()))


def canonical_key(key: str) -> str:
    """The key as config_view names it (camelCase or snake_case given); ConfigError, with
    the nearest key, for one the node does not have."""
    snake = snake_name(key)
    if snake not in _BROKER and snake not in _STORE:
        raise ConfigError(_unknown_key_message(key, "", [_name(n) for n in _BROKER]).replace("option", "config key"))
    return _name(snake)


def _field(key: str) -> tuple[str, attrs.Attribute, bool]:
    """(canonical key, its field, whether it is a store key); ConfigError for an unknown key
    or one that cannot change live."""
    name = canonical_key(key)
    snake = snake_name(key)
    field = _BROKER.get(snake) or _STORE[snake]
    if name not in LIVE_KEYS:
        raise ConfigError(f"{name} cannot change while the node runs (it is read once, at start): set it in the "
                          f"node's config file and restart the node; updateBrokerConfig may change "
                          f"{', '.join(LIVE_KEYS)}")
    return name, field, snake in _STORE


def check_live_value(key: str, value: str) -> tuple[str, Any]:
    """(canonical key, the value as the node would set it); ConfigError names what is wrong."""
    name, field, _ = _field(key)
    converted = convert_value(field, value, name)
    converter = field.converter
    if converter is not None:
        assert not isinstance(converter, attrs.Converter), "the config's converters are plain functions"
        converted = converter(converted)
    if field.validator is not None:
        field.validator(None, field, converted)
    return name, converted


def apply_live_value(cfg: BrokerConfig, key: str, value: str) -> tuple[str, Any, Any]:
    """Set one live key on the running config: (key, old value, new value)."""
    name, converted = check_live_value(key, value)
    _, field, in_store = _field(name)
    target = cfg.store if in_store else cfg
    old = getattr(target, field.name)
    setattr(target, field.name, converted)
    return name, _plain(old), _plain(getattr(target, field.name))
