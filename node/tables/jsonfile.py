"""Atomic JSON config files (topics, consumer offsets), RocketMQ ConfigManager style.

A write goes to `<file>.tmp`, is fsynced, the current file becomes `<file>.bak`, and the tmp
file is renamed over the file (then the directory is fsynced). A crash at any point leaves
either the old or the new content readable: `read_json` falls back to `.bak` when the file
is missing or unreadable, so a torn write never loses what was persisted before.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from store.durable import write_durably

log = logging.getLogger("tidemq.node")

__all__ = ["ConfigFileError", "read_json", "write_json_atomic"]


class ConfigFileError(ValueError):
    """A persisted config file (and its backup) cannot be read; names the file."""


def write_json_atomic(path: str, obj: Any) -> None:
    """Replace `path` with `obj` as JSON, keeping the previous content in `path.bak`.

    Blocking (fsync): call it through `trio.to_thread.run_sync` from the event loop.
    """
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_durably(path, json.dumps(obj, indent=2, sort_keys=True).encode("utf-8") + b"\n", backup=True)


def _load(path: str) -> Any:
    with open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def read_json(path: str) -> Any | None:
    """The content of `path`, else of `path.bak`; None when neither exists.

    Raises ConfigFileError when what exists cannot be parsed: starting with an empty table
    instead would silently drop topics or committed offsets.
    """
    problems = []
    for candidate in (path, path + ".bak"):
        try:
            value = _load(candidate)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError included
            problems.append(f"{candidate}: {e}")
            continue
        if candidate != path:
            log.warning("%s is missing or damaged; using its backup %s", path, candidate)
        return value
    if problems:
        raise ConfigFileError("cannot read " + "; ".join(problems))
    return None
