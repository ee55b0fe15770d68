"""Corrupt sectors in a simulated run (the fault `corrupt`, issue 45): bits flip in a 512-byte
sector of a node's CommitLog that was durable long ago (a sealed part of the log: stored at
least SEALED_S before, in the disk model's durable image), as a disk returns a sector with
flipped bits. The flip is made in the file (the node's maps see it at once) and in the durable
image (a power loss keeps it): the medium itself is bad.

A strike early in a run waits for such a record (SEALED_S and 2 s more at most, past its
duration if need be). Which record and which bits come from `random.Random(f"corrupt {seed} {at} {node}")`. The
bits flip in the record's body bytes within the sector (the body CRC covers the body only, the
RocketMQ 4 format: a flip in another field is out of what a CRC can find; docs/simulation.md).

Then what an operator or a consumer re-reading old data would do:

- a read of that record (a pull at its queue offset, straight from the struck node) must
  not return it as good: the store answers an error naming the range (store/reads.py);
  a record returned with other bytes than were sent is a broken promise;
- the node must report the damaged range (`status`: `damaged`, store/damage.py): its
  absence after the read is a broken promise;
- a slave is then restarted by the operator after `duration`: its recovery cuts its log at
  the damaged record and it refetches the rest from its master; a master keeps serving and
  reports the range (its slaves hold the record: the operator learns which offsets its own
  copy lost).

The checker (verdict.py) allows exactly those damaged records in its end-of-run CRC, damage
and divergence checks (`Observed.corrupted`).
"""

from __future__ import annotations

import os
import random
from collections.abc import Awaitable, Callable

import attrs
import trio

from store import runtime
from store.layout import COMMITLOG_DIR
from store.record_codec import RecordKind, decode_record
from wire.client import TidemqError, connect
from wire.protocol import Pull

from .cluster import CLIENT_HOST, SimNode
from .disk import SECTOR
from .events import EventLog
from .load import TOPIC
from .network import SimNetwork
from .schedule import Fault
from .verdict import Observed

__all__ = ["SEALED_S", "Corruptions", "expected_body"]

SEALED_S = 8.0
"""A record is struck only when stored at least this long before (simulated seconds): far
behind the flushes and past the checkpoint's safe time (its 3 s margin), as a sealed segment is."""
POLL_S = 0.5  # how often a strike early in a run looks for sealed records again, within its duration
BODY_AT_V4 = 88  # where a record's body starts with IPv4 born and store hosts


def expected_body(key: str) -> bytes:
    """What the workload sent under `key` (load.py)."""
    return key.encode().ljust(200, b".")


@attrs.frozen
class _Victim:
    rel: str  # the segment, relative to the node's root
    offset: int  # the record's CommitLog offset
    size: int
    body_at: int  # the body's position in the segment file
    body_len: int
    queue_id: int
    queue_offset: int
    key: str


class Corruptions:
    """Strikes `corrupt` faults; `violations` are the broken promises seen at once."""

    def __init__(self, seed: int, log: EventLog, observed: dict[str, Observed], network: SimNetwork,
                 restart: Callable[[SimNode], Awaitable[None]]) -> None:
        self.seed = seed
        self.log = log
        self.observed = observed
        self.network = network
        self.restart = restart
        self.violations: list[str] = []

    async def strike(self, fault: Fault, node: SimNode) -> None:
        disk = node.disk
        assert disk is not None, "a corrupt sector needs the node's disk model"
        rng = random.Random(f"corrupt {self.seed} {fault.at} {node.name}")
        deadline = trio.current_time() + fault.duration
        give_up = max(deadline, trio.current_time() + SEALED_S + POLL_S * 4)
        victims = self._sealed_records(node)
        while not victims and trio.current_time() + POLL_S < give_up:  # early in a run: wait for sealed data
            await trio.sleep(POLL_S)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            victims = self._sealed_records(node) if node.up else []
        if not victims or not node.up:
            self.log.add(f"nothing sealed to corrupt on {node.name}")
            await trio.sleep_until(deadline)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            return
        deadline = max(deadline, trio.current_time())
        victim = rng.choice(victims)
        sector = (victim.body_at + rng.randrange(victim.body_len)) // SECTOR
        low = max(victim.body_at, sector * SECTOR)
        high = min(victim.body_at + victim.body_len, (sector + 1) * SECTOR)
        bits = sorted(rng.sample(range((high - low) * 8), rng.randint(1, 3)))
        self._flip(node, victim.rel, low, bits)
        self.log.add(f"corrupt: flipped {len(bits)} bit(s) of sector {sector} of {node.name}'s {victim.rel}: "
                     f"the record at [{victim.offset}, {victim.offset + victim.size}) ({victim.key})")
        if await self._read_back(node, victim):
            self._reported(node, victim)
        await trio.sleep_until(deadline)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
        serving = node.serving()  # (an election may have made a slave master meanwhile)
        if serving is not None and serving[0] == "SLAVE" and node.up:
            self.log.add(f"operator restarts slave {node.name}: it cuts its log at the damaged record "
                         "and refetches from its master")
            await node.kill()
            await self.restart(node)
            broker = node.broker
            store = broker.services.store if broker is not None and broker.services is not None else None
            left = store.damaged() if store is not None else []
            self.log.add(f"{node.name} back at offset {node.store_max_offset()}, damaged {left}")
            if left:
                self.violations.append(f"slave {node.name} kept damaged records after its restart: {left}")
        else:
            # kept: its bad CRC, and its difference from the replicas' copies, are the fault's
            self.observed[node.group].corrupted.append((node.name, victim.offset, victim.offset + victim.size))
            self.log.add(f"{node.name} ({serving[0] if serving else 'down'}) keeps [{victim.offset}, "
                         f"{victim.offset + victim.size}) as damaged: its own copy is gone (a replica may hold it)")

    def _sealed_records(self, node: SimNode) -> list[_Victim]:
        """The workload's records in the node's durable CommitLog images stored SEALED_S or more
        ago, as the file holds them now too."""
        assert node.disk is not None
        before_ms = int((runtime.wall_clock() - SEALED_S) * 1000)
        out = []
        for rel, image in sorted(node.disk.images.items()):
            if os.path.dirname(rel) != COMMITLOG_DIR:
                continue
            with open(os.path.join(node.root, rel), "rb") as f:
                current = os.pread(f.fileno(), len(image), 0)  # a cut since the last sync may have changed it
            start, pos = int(os.path.basename(rel)), 0
            while pos < len(image):
                d = decode_record(image, pos, check_crc=True)
                if d.kind is not RecordKind.MESSAGE or d.message is None:
                    break
                m = d.message
                body_at = pos + BODY_AT_V4
                if (current[pos:pos + d.size] == image[pos:pos + d.size] and m.topic == TOPIC and m.store_timestamp <= before_ms and m.keys and m.commitlog_offset == start + pos
                        and m.body and image[body_at:body_at + len(m.body)] == m.body):
                    out.append(_Victim(rel, start + pos, d.size, body_at, len(m.body), m.queue_id,
                                       m.queue_offset, m.keys[0]))
                pos += d.size
        return out

    def _flip(self, node: SimNode, rel: str, at: int, bits: list[int]) -> None:
        """Flip `bits` (bit indexes from `at`) in the file and in its durable image."""
        assert node.disk is not None
        path = os.path.join(node.root, rel)
        span = bits[-1] // 8 + 1
        with open(path, "r+b") as f:
            data = bytearray(os.pread(f.fileno(), span, at))
            for bit in bits:
                data[bit // 8] ^= 1 << (bit % 8)
            os.pwrite(f.fileno(), bytes(data), at)
        image = bytearray(node.disk.images[rel])
        image[at:at + span] = data
        node.disk.images[rel] = bytes(image)

    async def _read_back(self, node: SimNode, victim: _Victim) -> bool:
        """Pull the record from the struck node, as a consumer re-reading old data would.
        True when the read met it: the node served it, or refused the pull for it (a node
        whose queues do not reach it yet, an etcd candidate held at its confirm offset,
        answers no message and never reads it: storage seed 7784)."""
        pull = Pull(topic=TOPIC, queue_id=victim.queue_id, offset=victim.queue_offset, max_msgs=1)
        try:
            async with connect(node.address, net=self.network.host(CLIENT_HOST)) as conn:
                reply = await conn.call(pull)
        except TidemqError as e:
            self.log.add(f"a pull of {node.name} at {TOPIC}-{victim.queue_id}@{victim.queue_offset}: "
                         f"{e.status}: {e}")
            return "damaged" in str(e)
        served = [m for m in reply.messages if m.commitlog_offset == victim.offset]
        if served and served[0].body != expected_body(victim.key):
            self.violations.append(f"{node.name} served the corrupt record at {victim.offset} ({victim.key}) "
                                   "as good")
        self.log.add(f"a pull of {node.name} at {TOPIC}-{victim.queue_id}@{victim.queue_offset}: "
                     f"{reply.status.value}, {len(reply.messages)} message(s)")
        return bool(served)

    def _reported(self, node: SimNode, victim: _Victim) -> None:
        """The node's `status` names the damaged range once a read met it."""
        broker = node.broker
        store = broker.services.store if broker is not None and broker.services is not None else None
        if store is None:
            return
        damaged = store.damaged()
        self.log.add(f"{node.name} status: damaged {[(d['start'], d['end']) for d in damaged]}")
        if not any(d["start"] == victim.offset and d["end"] == victim.offset + victim.size for d in damaged):
            self.violations.append(f"{node.name} did not report the damaged record at [{victim.offset}, "
                                   f"{victim.offset + victim.size}) after a read met it")
