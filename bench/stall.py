"""Do a SYNC_FLUSH master's syncs stall its other work? (issue 48 item 1)

With `syncFlushInline` (the default) the master's event loop waits for each fdatasync, so
whatever else the loop serves (a consumer's pull, the HA push to a slave) waits too; the
promise is one sync at most. `measure` loads a master that has a slave with the lean
client and meanwhile times a small pull (one message from queue 0, answered at once) every
5 ms and samples the slave's lag (`status`) every 20 ms. `scripts/bench stall` runs it for
an ASYNC_FLUSH master (the reference: no sync in the loop), SYNC_FLUSH in the loop and
SYNC_FLUSH in a worker thread, beside fio's fdatasync latency (one sync on this disk).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import trio

from wire.client import TidemqError, connect
from wire.protocol.requests import GetStatus, Pull

from . import compare, lean, peers

PULL_EVERY_S = 0.005
LAG_EVERY_S = 0.02


def _summary(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, float]:
    if not values:
        return {}
    return {"p50": round(statistics.median(values) * scale, digits), "p99": round(lean.percentile(values, 0.99) * scale, digits),
            "max": round(max(values) * scale, digits), "samples": len(values)}


async def measure(target: peers.Target, case: compare.Case, seconds: float, warmup: float) -> dict[str, Any]:
    """The lean client's run against `target`, with pull latencies (ms) and the slave's lag
    (bytes) sampled meanwhile."""
    pulls: list[float] = []
    lags: list[float] = []
    result: dict[str, Any] = {}

    async def load(done: trio.CancelScope) -> None:
        result.update(await compare.run_case(target, case, seconds, warmup))
        done.cancel()

    async with connect(target.address) as conn:
        async def pull() -> None:
            while True:
                t0 = time.perf_counter()
                try:
                    await conn.call(Pull(topic=lean.TOPIC, queue_id=0, offset=0, max_msgs=1))
                except TidemqError:  # the topic is not there yet: the load's first sends make it
                    pass
                else:
                    pulls.append(time.perf_counter() - t0)
                await trio.sleep(PULL_EVERY_S)  # poll: the sampling interval

        async def lag() -> None:
            while True:
                status = await conn.call(GetStatus())
                behind = status.ha.lag_bytes()
                if behind is not None:
                    lags.append(behind)
                await trio.sleep(LAG_EVERY_S)  # poll: the sampling interval

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load, nursery.cancel_scope)
            nursery.start_soon(pull)
            nursery.start_soon(lag)
    return {"msgs_per_s": result.get("msgs_per_s"), "send_p99_ms": result.get("p99_ms"),
            "pull_ms": _summary(pulls, 1000), "slave_lag_bytes": _summary(lags, digits=0)}
