"""Logging of a node process: stderr and `<storePathRootDir>/logs/node.log`, each line
carrying the node's name and the role it serves now (`[broker-a/0 SYNC_MASTER]`), so the
logs of a multi-process cluster can be merged and read across a failover."""

from __future__ import annotations

import logging
import os
import sys

from .config import BrokerConfig

__all__ = ["DEPENDENCIES", "log_path", "name_role", "setup_logging"]

_HANDLER_MARK = "_tidemq_node_handler"
DEPENDENCIES = ("httpx", "httpcore")
"""Libraries whose INFO lines (one per etcd keep-alive) stay out of a node's log unless
DEBUG is asked for."""


class _NodeLabel(logging.Filter):
    """Puts the node's current name and role on every record (`%(node)s`)."""

    label = "-"

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.label
        return True


_LABEL = _NodeLabel()


def log_path(cfg: BrokerConfig) -> str:
    return os.path.join(cfg.store.store_path_root_dir, "logs", "node.log")


def name_role(cfg: BrokerConfig) -> None:
    """Label the log lines from now on with the role `cfg` serves (each term: a promotion
    or a rejoin changes brokerId and role)."""
    _LABEL.label = f"{cfg.broker_name}/{cfg.broker_id} {cfg.role.value}"


def setup_logging(cfg: BrokerConfig, level: int = logging.INFO) -> None:
    """Configure the root logger for this process (called by `tidemq node start`)."""
    name_role(cfg)
    fmt = logging.Formatter("%(asctime)s %(levelname)s [%(node)s] %(name)s: %(message)s")
    path = log_path(cfg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(path, encoding="utf-8")):
        handler.setFormatter(fmt)
        handler.addFilter(_LABEL)
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    root.setLevel(level)
    for dependency in DEPENDENCIES:
        logging.getLogger(dependency).setLevel(level if level <= logging.DEBUG else logging.WARNING)
