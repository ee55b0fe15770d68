"""The cut of a divergent tail when a node rejoins, and its report, `lastTruncation.json`.

A fenced old master (or a slave whose log went past the consistent point with its new
master) restarts with its store closed and its CommitLog, ConsumeQueues and index cut back
(store/message_store.py `truncate_store`). What was dropped is logged and kept in the store
root, so `status` shows it after the restart (`last_truncation`): the operator learns which
messages a failover took back.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from store import runtime
from store.epoch_file import EpochFileCache
from store.message_store import truncate_store

from ..config import BrokerConfig
from ..tables.jsonfile import write_json_atomic

log = logging.getLogger("tidemq.node")

__all__ = ["TRUNCATION_FILE", "CutFailed", "cut_log", "keep_report", "load_truncation"]

TRUNCATION_FILE = "lastTruncation.json"


class CutFailed(RuntimeError):
    """The disk failed a cut of the log (an I/O error, a failed fsync): the node stops."""


def load_truncation(root: str) -> dict[str, Any] | None:
    """The last cut's report, None when there was none (or the file cannot be read: it is a
    report, not state)."""
    try:
        with open(os.path.join(root, TRUNCATION_FILE), encoding="utf-8") as f:
            report: dict[str, Any] | None = json.load(f)
            return report
    except (OSError, ValueError):
        return None


def cut_log(cfg: BrokerConfig, cache: EpochFileCache, offset: int, reason: str) -> dict[str, Any] | None:
    """With the store closed: cut the log back to `offset` and the epochs that start past
    what is left. Returns the report written to `lastTruncation.json`, None when nothing
    was dropped (the last report stands). Raises ValueError when the store cannot be cut there,
    CutFailed when the disk failed the cut."""
    try:
        report = truncate_store(cfg.store, offset, clamp=True)
    except ValueError as e:
        log.error("cannot cut the CommitLog back to %d to rejoin: %s; stopping", offset, e)
        raise
    except OSError as e:
        # fsyncgate: a failed sync is not retried and then believed; the process ends and its
        # restart's recovery reads what the disk holds (the divergence is found, and cut, again)
        log.error("cannot cut the CommitLog back to %d to rejoin: %s; stopping", offset, e)
        raise CutFailed(f"cannot cut the CommitLog back to offset {offset} to rejoin ({e}): the node stops; "
                        "restart it once the disk is sound (recovery reads the log again and the cut is "
                        "made again)") from e
    cache.truncate_suffix_by_offset(report.from_offset)
    if not (report.message_count or report.dropped_bytes):
        return None
    return keep_report(cfg, report.from_offset, report.to_offset, report.msg_ids, reason)


def keep_report(cfg: BrokerConfig, from_offset: int, to_offset: int, msg_ids: Sequence[str],
                reason: str) -> dict[str, Any]:
    """Write and log what a cut dropped: `lastTruncation.json`, shown by `status`."""
    kept = {
        "from_offset": from_offset, "to_offset": to_offset,
        "dropped_bytes": to_offset - from_offset, "message_count": len(msg_ids),
        "msg_ids": list(msg_ids), "at_ms": int(runtime.wall_clock() * 1000),
        "reason": reason,
    }
    write_json_atomic(os.path.join(cfg.store.store_path_root_dir, TRUNCATION_FILE), kept)
    log.warning("dropped CommitLog [%d, %d): %d message(s), msgIds %s", from_offset,
                to_offset, len(msg_ids), ",".join(msg_ids) or "-")
    return kept
