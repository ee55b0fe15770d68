"""An in-memory etcd: the operations node/failover/etcd.py's EtcdClient offers the
controller (leases, range, put, transactions, prefix watches), with the same signatures and
answers, for a cluster simulated in one trio run.

It is linearizable by construction: each call applies at once, in call order, under one
revision counter. What it keeps from etcd, and tests/chaos/test_etcd_model.py checks against
a real etcd with the same operation sequences:
- every write (a put, a transaction's puts, a lease's end) is one new revision; the puts of
  one transaction share it; a key keeps its create revision until it is deleted;
- a comparison on a missing key compares a zero key (create, mod revision and lease 0);
- a put under a lease that is not granted (or ended) is refused, and a transaction with one
  changes nothing;
- a lease's end (revoke, or its TTL run out without keep-alive) deletes its keys in one
  revision; keep-alive of an ended lease answers TTL 0; revoking one is refused;
- a watch gets each revision's events in order, a batch per revision, with the previous
  value; a delete's key-value has only the key and the mod revision.
Time is the given clock (trio's, so a MockClock under simulation): a lease ends at its
deadline, seen by the next call or by `run`, which ends leases on time with nothing calling.
Lease ids come from a counter (etcd picks them at random).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from node.failover.etcd import EtcdError, KeyValue, TxnResult, WatchEvent, unb64

__all__ = ["EtcdModel", "MIN_TTL_S"]

MIN_TTL_S = 2
"""etcd grants at least 1.5 election timeouts (1 s by default), rounded up: a grant of 1 s
gets 2 s."""


@attrs.define
class _Lease:
    ttl: int
    deadline: float
    keys: set[str] = attrs.field(factory=set)


@attrs.define
class _Watcher:
    prefix: str
    on_events: Callable[[list[WatchEvent]], None]
    pending: list[list[WatchEvent]] = attrs.field(factory=list)
    ready: trio.Event = attrs.field(factory=trio.Event)


class EtcdModel:
    """Use where an EtcdClient goes; `async with` works and closes nothing."""

    def __init__(self, *, clock: Callable[[], float] = trio.current_time, revision: int = 1,
                 first_lease: int = 1) -> None:
        self.clock = clock
        self.revision = revision
        self._keys: dict[str, KeyValue] = {}
        self._leases: dict[int, _Lease] = {}
        self._next_lease = first_lease
        self._watchers: list[_Watcher] = []
        self._changed = trio.Event()  # a lease granted or renewed: `run` looks at deadlines again

    async def __aenter__(self) -> EtcdModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        pass

    # ---- leases ------------------------------------------------------------------------------
    async def grant(self, ttl_s: int) -> int:
        self._expire()
        if ttl_s <= 0:
            raise EtcdError(f"lease grant refused: TTL {ttl_s}")
        ttl = max(ttl_s, MIN_TTL_S)
        lease, self._next_lease = self._next_lease, self._next_lease + 1
        self._leases[lease] = _Lease(ttl, self.clock() + ttl)
        self._changed.set()
        return lease

    async def keepalive(self, lease: int) -> int:
        self._expire()
        held = self._leases.get(lease)
        if held is None:
            return 0
        held.deadline = self.clock() + held.ttl
        self._changed.set()
        return held.ttl

    async def revoke(self, lease: int) -> None:
        self._expire()
        if lease not in self._leases:
            raise EtcdError("lease revoke refused: etcdserver: requested lease not found")
        self._end(lease)

    # ---- keys --------------------------------------------------------------------------------
    async def get(self, key: str) -> KeyValue | None:
        self._expire()
        return self._keys.get(key)

    async def put(self, key: str, value: str | bytes, *, lease: int = 0) -> int:
        self._expire()
        self._check_lease(lease)
        self.revision += 1
        self._notify([self._set(key, value.encode() if isinstance(value, str) else value, lease)])
        return self.revision

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
                  failure: list[dict[str, Any]]) -> TxnResult:
        self._expire()
        for branch in (success, failure):  # etcd checks both branches, whichever runs
            keys = [op["request_put"]["key"] for op in branch if "request_put" in op]
            if len(set(keys)) < len(keys):
                raise EtcdError("etcdserver: duplicate key given in txn request")
        succeeded = all(self._holds(c) for c in compare)
        ops = success if succeeded else failure
        puts = [op["request_put"] for op in ops if "request_put" in op]
        for put in puts:  # refused before anything changes
            self._check_lease(int(put.get("lease", 0)))
        if puts:
            self.revision += 1
        ranges, events = [], []
        for op in ops:
            if "request_put" in op:
                put = op["request_put"]
                events.append(self._set(unb64(put["key"]).decode(), unb64(put.get("value")),
                                        int(put.get("lease", 0))))
            elif "request_range" in op:
                ranges.append(self._range(op["request_range"]))
            else:
                raise EtcdError(f"the model does not know the transaction operation {sorted(op)}")
        self._notify(events)
        return TxnResult(succeeded, self.revision, ranges)

    # ---- watches -----------------------------------------------------------------------------
    async def watch(self, prefix: str, on_events: Callable[[list[WatchEvent]], None],
                    *, on_created: Callable[[], None] | None = None) -> None:
        """Deliver every later change under `prefix` to `on_events`, a batch per revision,
        from this task (as the client's streaming task does), until cancelled."""
        watcher = _Watcher(prefix, on_events)
        self._watchers.append(watcher)
        try:
            if on_created is not None:
                on_created()
            while True:
                await watcher.ready.wait()
                watcher.ready = trio.Event()
                batches, watcher.pending = watcher.pending, []
                for batch in batches:
                    on_events(batch)
        finally:
            self._watchers.remove(watcher)

    async def run(self) -> None:
        """End each lease at its deadline although nothing calls (start it in a nursery)."""
        while True:
            self._expire()
            deadline = min((held.deadline for held in self._leases.values()), default=math.inf)
            with trio.move_on_at(deadline):
                await self._changed.wait()
            self._changed = trio.Event()

    # ---- the state machine -------------------------------------------------------------------
    def _expire(self) -> None:
        now = self.clock()
        for lease in sorted(lease for lease, held in self._leases.items() if held.deadline <= now):
            self._end(lease)

    def _end(self, lease: int) -> None:
        held = self._leases.pop(lease)
        if not held.keys:
            return
        self.revision += 1
        events = []
        for key in sorted(held.keys):
            prev = self._keys.pop(key)
            events.append(WatchEvent("DELETE", KeyValue(key, b"", 0, self.revision, 0), prev))
        self._notify(events)

    def _check_lease(self, lease: int) -> None:
        if lease and lease not in self._leases:
            raise EtcdError("etcdserver: requested lease not found")

    def _set(self, key: str, value: bytes, lease: int) -> WatchEvent:
        prev = self._keys.get(key)
        if prev is not None and prev.lease and prev.lease in self._leases:
            self._leases[prev.lease].keys.discard(key)
        if lease:
            self._leases[lease].keys.add(key)
        created = prev.create_revision if prev is not None else self.revision
        kv = self._keys[key] = KeyValue(key, value, created, self.revision, lease)
        return WatchEvent("PUT", kv, prev)

    def _holds(self, c: dict[str, Any]) -> bool:
        kv = self._keys.get(unb64(c["key"]).decode())
        target = c["target"]
        if target == "VALUE" and kv is None:
            return False  # etcd: a value comparison on a missing key always fails
        if target == "CREATE":
            have, want = (kv.create_revision if kv else 0), int(c.get("create_revision", 0))
        elif target == "MOD":
            have, want = (kv.mod_revision if kv else 0), int(c.get("mod_revision", 0))
        elif target == "LEASE":
            have, want = (kv.lease if kv else 0), int(c.get("lease", 0))
        else:
            raise EtcdError(f"the model does not know the comparison target {target!r}")
        result = c.get("result", "EQUAL")
        if result == "EQUAL":
            return have == want
        if result == "NOT_EQUAL":
            return have != want
        if result == "GREATER":
            return have > want
        if result == "LESS":
            return have < want
        raise EtcdError(f"the model does not know the comparison {result!r}")

    def _range(self, r: dict[str, Any]) -> list[KeyValue]:
        key = unb64(r["key"])
        if "range_end" not in r:
            kv = self._keys.get(key.decode())
            return [kv] if kv is not None else []
        end = unb64(r["range_end"])
        return [self._keys[k] for k in sorted(self._keys) if key <= k.encode() < end]

    def _notify(self, events: list[WatchEvent]) -> None:
        if not events:
            return
        for watcher in self._watchers:
            mine = [e for e in events if e.kv.key.startswith(watcher.prefix)]
            if mine:
                watcher.pending.append(mine)
                watcher.ready.set()
