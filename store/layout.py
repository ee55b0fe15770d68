"""Where a store's files live and how they are named: the one place for the directory layout.

A store root (RocketMQ's storePathRootDir) holds `commitlog/`, `consumequeue/<topic>/<queueId>/`,
`index/` and the `checkpoint`, `abort` and `lock` files. A CommitLog or ConsumeQueue segment is
named by the offset of its first byte, 20 digits zero-padded, so name order is offset order
(index files are named by their creation time: index_file.py's rule).

Who relies on these rules: the engine (MappedFileQueue creates and loads segments by name,
MessageStore places its files), the offline tools (store/tools.py, queue_tools.py), the
pipeline's store scan and the chaos checker. Listing through here keeps them agreeing on which
files are segments: a stray file (a backup, `*.creating`) is never read as data.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable

log = logging.getLogger("tidemq.store")

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "COMMITLOG_DIR",
    "CONSUMEQUEUE_DIR",
    "INDEX_DIR",
    "LOCK_FILE",
    "SEGMENT_NAME_DIGITS",
    "WHERE_STORES_ARE",
    "StoreToolError",
    "commitlog_dir",
    "consumequeue_dir",
    "find_segment",
    "find_stores",
    "index_dir",
    "is_segment_name",
    "is_store",
    "iter_segments",
    "list_queue_dirs",
    "list_segments",
    "queue_dir",
    "segment_name",
    "segment_names",
]

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"

SEGMENT_NAME_DIGITS = 20
"""A segment's name: its start offset in this many digits (RocketMQ's UtilAll.offset2FileName)."""

_QUEUE_ID_RE = re.compile(r"-?[0-9]+")

WHERE_STORES_ARE = (
    "a store is a node's storePathRootDir; a local cluster keeps each node's under "
    "<base-dir>/store/<node>, e.g. data/store/broker-a (give that, or the base dir to walk "
    "every node's store)"
)


class StoreToolError(Exception):
    """The directory cannot be read as a store (missing, not a store, unreadable)."""


# ---------------------------------------------------------------------------------------
# segment names


def segment_name(offset: int) -> str:
    """The file name of the segment starting at `offset`."""
    return f"{offset:0{SEGMENT_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """Whether `name` is a segment's: exactly 20 ASCII digits."""
    return len(name) == SEGMENT_NAME_DIGITS and name.isascii() and name.isdigit()


def segment_names(names: Iterable[str]) -> list[str]:
    """The segment names among `names`, in offset order."""
    return sorted(n for n in names if is_segment_name(n))


def list_segments(directory: str) -> list[tuple[int, str]]:
    """The segment files of `directory` as (start offset, path), in offset order; other
    names and non-files are skipped. OSError when the directory cannot be listed."""
    segments = []
    for name in segment_names(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            log.debug("ignoring %s: not a segment file", path)
            continue
        segments.append((int(name), path))
    return segments


def find_segment(segments: list[tuple[int, str]], offset: int) -> int | None:
    """Index of the segment (of `list_segments`' list) holding byte `offset`, None when none does."""
    for i, (start, path) in enumerate(segments):
        if start <= offset < start + os.path.getsize(path):
            return i
    return None


# ---------------------------------------------------------------------------------------
# store paths


def commitlog_dir(root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(root), COMMITLOG_DIR)


def consumequeue_dir(root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(root), CONSUMEQUEUE_DIR)


def queue_dir(consumequeue_root: str | os.PathLike[str], topic: str, queue_id: int) -> str:
    """One queue's directory under a consumequeue root (`consumequeue_dir`)."""
    return os.path.join(os.fspath(consumequeue_root), topic, str(queue_id))


def index_dir(root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(root), INDEX_DIR)


def list_queue_dirs(consumequeue_root: str) -> list[tuple[str, int, str]]:
    """Every queue directory under a consumequeue root as (topic, queue id, path), in name
    order. A queue directory is `<topic>/<queueId>` with an int32 queue id written as
    `str(int)` would; other names are skipped with a warning. [] when the root is absent."""
    if not os.path.isdir(consumequeue_root):
        return []
    out = []
    for topic in sorted(os.listdir(consumequeue_root)):
        topic_dir = os.path.join(consumequeue_root, topic)
        if not os.path.isdir(topic_dir):
            continue
        for name in sorted(os.listdir(topic_dir)):
            if not _QUEUE_ID_RE.fullmatch(name) or str(int(name)) != name:
                log.warning("skip consume queue dir %s: not a queue id", os.path.join(topic_dir, name))
                continue
            queue_id = int(name)
            if not -(2**31) <= queue_id < 2**31:
                log.warning("skip consume queue dir %s: queue id out of range", name)
                continue
            out.append((topic, queue_id, os.path.join(topic_dir, name)))
    return out


# ---------------------------------------------------------------------------------------
# finding stores


def iter_segments(root: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """CommitLog segments of the store at `root` as (start offset, path), in name order.

    Files whose name is not a 20-digit offset are ignored. Raises StoreToolError when
    `root` or `root/commitlog` is not a directory.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise StoreToolError(f"store directory {root!r} does not exist")
    cl = commitlog_dir(root)
    if not os.path.isdir(cl):
        raise StoreToolError(f"{root!r} is not a store directory: it has no {COMMITLOG_DIR}/; {WHERE_STORES_ARE}")
    try:
        return list_segments(cl)
    except OSError as e:
        raise StoreToolError(f"cannot list {cl!r}: {e.strerror or e}") from None


def is_store(path: str | os.PathLike[str]) -> bool:
    return os.path.isdir(commitlog_dir(path))


def find_stores(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The stores at `path` as (name, root): the store itself, or every store under a
    local cluster's base dir (`<base>/store/<node>`) or under a directory of stores.

    StoreToolError says where stores live when there is none."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise StoreToolError(f"store directory {path!r} does not exist")
    if is_store(path):
        return [(os.path.basename(os.path.normpath(path)) or path, path)]
    for parent in (os.path.join(path, "store"), path):
        if os.path.isdir(parent):
            found = [(name, os.path.join(parent, name)) for name in sorted(os.listdir(parent))
                     if is_store(os.path.join(parent, name))]
            if found:
                return found
    raise StoreToolError(
        f"{path!r} is not a store directory (it has no {COMMITLOG_DIR}/) and holds no stores; "
        f"{WHERE_STORES_ARE}"
    )
