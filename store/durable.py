"""Small files written so a crash leaves the old content or the new, never a torn one.

The bytes go to `<file>.tmp` and are fsynced; with `backup`, the current file becomes
`<file>.bak`; the tmp file is renamed over the file and the directory is fsynced. The epoch
file, the node's JSON tables and a broadcasting client's offsets file are written this way
(RocketMQ's ConfigManager and MixAll.string2File do the same dance).
"""

from __future__ import annotations

import os

from . import runtime

__all__ = ["write_durably"]


def write_durably(path: str | os.PathLike[str], data: bytes, *, backup: bool = False) -> None:
    """Replace `path` with `data` (blocking: fsync); with `backup` keep the old content in
    `path.bak`. Raises OSError."""
    path = os.fspath(path)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if backup and os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    runtime.synced(path)
    if backup and os.path.exists(path + ".bak"):
        runtime.synced(path + ".bak")
