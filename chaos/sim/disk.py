"""A simulated node's disk: what each file it writes has made durable, and what a power loss
leaves of the rest.

The store's seams (store/runtime.py `fdatasync` and `synced`) tell the model when a file's
content became durable: an fdatasync of a CommitLog or ConsumeQueue segment, an index file or
the checkpoint, and `write_durably`'s fsync + rename + directory fsync (the epoch file and the
JSON tables). The model then keeps that content as the file's durable image. Everything else a
node writes (through its maps or `write`) is only in the page cache: a kill (SIGKILL) keeps it,
a power loss does not.

`fail_next_sync` makes the next fdatasync of a file under a folder raise EIO (the fault
`fsync_error`): nothing of it becomes durable, and the pages it could not write are lost to
the disk for good, as Linux marks them clean after a write-back error: a later fdatasync of
the file succeeds without them (PostgreSQL's "fsyncgate"), so they stay only in the page
cache until they are written again.

`used` is what the store's disk-space probe reads (`runtime.disk_used_ratio`): USED, or FULL
while the fault `disk_full` fills the disk.

`power_loss` rewrites the node's files as a cut leaves them, each choice drawn from the
caller's seeded generator: every 4 KiB page that differs from the durable image survives or
not on its own; the last such page of a file may be torn (its first sectors new, the rest
old); a file never synced loses its directory entry or keeps it with its pages drawn over
zeros. Simplifications, named so the promises are read against them: a file's size and a
deletion are durable at once (segments are created at their full size), and a file's name
is durable from its first sync.
"""

from __future__ import annotations

import errno
import os
import random

import attrs

from store import runtime

__all__ = ["FULL", "PAGE", "SECTOR", "USED", "FileLoss", "SimDisk"]

PAGE = 4096
SECTOR = 512
USED = 0.5  # the used fraction of a node's partition the store's disk probe reads (cleanup.py)
FULL = 0.99  # ... while the fault `disk_full` fills it: over diskSpaceWarningLevelRatio


@attrs.define
class FileLoss:
    """What a power loss did to one file (page indexes of 4 KiB pages)."""

    path: str  # relative to the node's root
    kept: list[int] = attrs.field(factory=list)
    dropped: list[int] = attrs.field(factory=list)
    torn: tuple[int, int] | None = None  # (page, sectors of it that are new)
    removed: bool = False  # never synced, and its directory entry was lost

    def describe(self) -> str:
        if self.removed:
            return f"{self.path}: never synced, gone"
        parts = [f"kept {_ranges(self.kept) or '-'}", f"dropped {_ranges(self.dropped) or '-'}"]
        if self.torn is not None:
            parts.append(f"torn {self.torn[0]} ({self.torn[1]}/{PAGE // SECTOR} sectors new)")
        return f"{self.path}: pages " + ", ".join(parts)


def _ranges(pages: list[int]) -> str:
    """[1, 2, 3, 7] → "1-3,7"."""
    out: list[str] = []
    for page in pages:
        if out and int(out[-1].rsplit("-", 1)[-1]) == page - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{page}"
        else:
            out.append(str(page))
    return ",".join(out)


class SimDisk:
    """The durable images of the files under one node's store root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.images: dict[str, bytes] = {}
        """Path relative to root → the content last made durable, up to where only zeros
        (a hole) follow."""
        self.syncs = 0
        self.used = USED
        """The partition's used fraction, as the store's probe reads it: fixed, so a replay does
        not depend on the machine's disk; `disk_full` raises it to FULL."""
        self.failing: str | None = None
        """A folder (relative to root): the next fdatasync of a file in it fails (EIO)."""
        self.failed: list[tuple[str, float, int]] = []
        """(file, wall-clock time, where its durable content ended then) of each fdatasync that failed."""
        self.poisoned: dict[str, dict[int, tuple[bytes, bytes]]] = {}
        """File → page index → the durable content of each page a failed fdatasync lost:
        later syncs keep that content until the page is written again."""
        self.restored: list[tuple[str, float]] = []
        """(file, wall-clock time) each time the last page a failed fdatasync lost was
        written again (a restarted store's write-back: store/lost_writes.py)."""

    def _relative(self, path: str) -> str | None:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(self.root))
        return None if rel.startswith("..") else rel

    def synced(self, path: str) -> None:
        rel = self._relative(path)
        if rel is None:
            return
        try:
            data = _data(path)
        except FileNotFoundError:
            self.images.pop(rel, None)
            self.poisoned.pop(rel, None)
        else:
            self.images[rel] = self._unpoisoned(rel, data)
        self.syncs += 1

    def _unpoisoned(self, rel: str, data: bytes) -> bytes:
        """`data` as a sync makes it durable: without the pages a failed sync lost (their old
        content), unless they were written since (then they differ from what was lost)."""
        lost = self.poisoned.get(rel)
        if not lost:
            return data
        out = bytearray(data)
        for page, (old, failed) in list(lost.items()):
            at = slice(page * PAGE, (page + 1) * PAGE)
            if bytes(out[at]) != failed:  # written again since the failure: this sync writes it
                del lost[page]
                continue
            out[at] = old[:len(out[at])]
        return bytes(out)

    def fail_next_sync(self, folder: str) -> None:
        """The next fdatasync of a file under `folder` (relative to root) raises EIO."""
        self.failing = folder

    def before_sync(self, path: str) -> None:
        rel = self._relative(path)
        if self.failing is None or rel is None or os.path.dirname(rel) != self.failing:
            return
        self.failing = None
        image = self.images.get(rel, b"")
        self.failed.append((rel, runtime.wall_clock(), len(image.rstrip(b"\0"))))
        current = _data(path)
        lost = self.poisoned.setdefault(rel, {})
        for page in range(-(-len(current) // PAGE)):
            at = slice(page * PAGE, (page + 1) * PAGE)
            if current[at] != image[at]:
                lost.setdefault(page, (image[at].ljust(len(current[at]), b"\0"), current[at]))
        raise OSError(errno.EIO, os.strerror(errno.EIO), path)

    def used_ratio(self, path: str) -> float:
        """What the store's disk-space probe reads (the same for every folder of the node)."""
        return self.used

    def rewrote(self, path: str, start: int, end: int) -> None:
        """[start, end) of `path` was written again: its pages are dirty, no longer lost."""
        rel = self._relative(path)
        lost = self.poisoned.get(rel) if rel is not None else None
        if lost:
            for page in range(start // PAGE, -(-end // PAGE)):
                lost.pop(page, None)
            if not lost and rel is not None:
                self.restored.append((rel, runtime.wall_clock()))

    def durable(self, rel: str) -> bytes | None:
        """The content of `rel` a power loss now would at least keep (None: never synced)."""
        return self.images.get(rel)

    def files(self) -> list[str]:
        out = []
        for folder, _dirs, names in os.walk(self.root):
            out += [os.path.relpath(os.path.join(folder, n), self.root) for n in names]
        return sorted(out)

    def power_loss(self, rng: random.Random) -> list[FileLoss]:
        """Rewrite every file as a power cut leaves it (the node must be down); afterwards
        what is on disk is all durable. Returns what happened to each file that lost something."""
        losses = []
        present = self.files()
        for rel in present:
            path = os.path.join(self.root, rel)
            with open(path, "rb") as f:
                current = f.read()
            image = self.images.get(rel)
            if image is not None and image == current[:len(image)] and not any(current[len(image):]):
                continue
            loss = FileLoss(rel)
            if image is None and rng.random() < 0.5:
                os.unlink(path)
                loss.removed = True
                losses.append(loss)
                continue
            out = bytearray((image or b"")[:len(current)].ljust(len(current), b"\0"))
            dirty = [p for p in range(-(-len(current) // PAGE))
                     if out[p * PAGE:(p + 1) * PAGE] != current[p * PAGE:(p + 1) * PAGE]]
            lost = self.poisoned.get(rel, {})
            for i, page in enumerate(dirty):
                at = slice(page * PAGE, min((page + 1) * PAGE, len(current)))
                if page in lost and lost[page][1] == current[at]:  # a failed sync lost it for good
                    loss.dropped.append(page)
                elif i == len(dirty) - 1 and rng.random() < 1 / 3:  # the last page written may be torn
                    sectors = rng.randrange(1, PAGE // SECTOR)
                    cut = min(at.start + sectors * SECTOR, at.stop)
                    out[at.start:cut] = current[at.start:cut]
                    loss.torn = (page, sectors)
                elif rng.random() < 0.5:
                    out[at] = current[at]
                    loss.kept.append(page)
                else:
                    loss.dropped.append(page)
            with open(path, "r+b") as f:
                f.write(out)
            losses.append(loss)
        self.images = {rel: _data(os.path.join(self.root, rel)) for rel in self.files()}
        self.poisoned.clear()
        return losses


def _data(path: str) -> bytes:
    """The file's content up to where only a hole follows (a segment's unwritten tail reads
    as zeros, so the image leaves it out: a sync then costs what was written, not the
    segment's size)."""
    with open(path, "rb") as f:
        fd = f.fileno()
        size = end = os.fstat(fd).st_size
        try:
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
        except OSError:  # no SEEK_HOLE here: the whole file
            hole = size
        if hole < size:
            try:
                os.lseek(fd, hole, os.SEEK_DATA)  # data after the hole: read it all
            except OSError:  # ENXIO: nothing but the hole follows
                end = hole
        return os.pread(fd, end, 0) if end else b""
