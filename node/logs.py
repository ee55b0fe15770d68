"""Logging of a node process: stderr and `<storePathRootDir>/logs/node.log`, each line
carrying the node's name, so the logs of a multi-process cluster can be merged."""

from __future__ import annotations

import logging
import os
import sys

from .config import BrokerConfig

__all__ = ["log_path", "setup_logging"]

_HANDLER_MARK = "_tidemq_node_handler"


def log_path(cfg: BrokerConfig) -> str:
    return os.path.join(cfg.store.store_path_root_dir, "logs", "node.log")


def setup_logging(cfg: BrokerConfig, level: int = logging.INFO) -> None:
    """Configure the root logger for this process (called by `tidemq node start`)."""
    name = f"{cfg.broker_name}/{cfg.broker_id}".replace("%", "%%")
    fmt = logging.Formatter(f"%(asctime)s %(levelname)s [{name}] %(name)s: %(message)s")
    path = log_path(cfg)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(path, encoding="utf-8")):
        handler.setFormatter(fmt)
        setattr(handler, _HANDLER_MARK, True)
        root.addHandler(handler)
    root.setLevel(level)
