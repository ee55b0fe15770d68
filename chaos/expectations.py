"""What each replication × flush mode promises under each fault, written down and checked.

A SIGKILLed process loses no page cache, so under process faults every mode keeps every
acknowledged message (the store crash matrix proves the same in-process). What the async
modes do NOT promise is the window they were exposed to at the fault: bytes acknowledged
but not yet flushed (ASYNC_FLUSH: lost by a machine crash, not by a process kill) and
bytes not yet on the slave (ASYNC_MASTER: lost if the master's disk were lost, or by a
failover). The report names that window; the check allows losses up to it for async modes
and none for SYNC_MASTER+SYNC_FLUSH.

Every mode, every fault: no duplicates, no order or contiguity breaks, no CRC failures,
no damage left after recovery, no failed send stored, no divergence where master and
slave both hold data, the slave caught up after healing, the consumer never saw a message
that is gone.
"""

from __future__ import annotations

from typing import Any

import attrs

from .checker import CheckReport


@attrs.frozen
class Expectation:
    mode: str
    lossless: bool  # no acknowledged message may be missing
    window_start: int | None  # async modes: losses allowed only at CommitLog offsets from here on
    window: str  # what the window is, in words
    slave_statuses: bool = False  # producers must have seen FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
    disk_refusal: bool = False  # producers must have been refused with the disk-full message
    slave_ahead_ok: bool = False  # the slave may hold bytes past the master's end


def window_at_fault(mode: str, sample: Any | None) -> tuple[int | None, str]:
    """Where the window an async mode was exposed to begins (the lowest CommitLog offset
    acknowledged without the promise it skips), from the master's last status before the
    fault, and the window in words. None: no window (SYNC_MASTER+SYNC_FLUSH)."""
    if mode == "SYNC_MASTER+SYNC_FLUSH":
        return None, "none (SYNC_MASTER+SYNC_FLUSH)"
    if sample is None:
        return 0, "unknown (no status sample before the fault): everything"
    starts, parts = [], []
    if mode.endswith("ASYNC_FLUSH"):
        starts.append(sample.flushed_offset)
        parts.append(f"{max(0, sample.max_phy_offset - sample.flushed_offset)} B unflushed "
                     f"from offset {sample.flushed_offset}")
    if mode.startswith("ASYNC_MASTER"):
        ack = max(sample.slave_ack or 0, 0)
        starts.append(ack)
        parts.append(f"{max(0, sample.max_phy_offset - ack)} B unreplicated from offset {ack}")
    return min(starts), "; ".join(parts) + f" (master at {sample.max_phy_offset})"


def expectation(scenario: Any, mode: str, sample: Any | None) -> Expectation:
    start, words = window_at_fault(mode, sample)
    lossless = start is None or scenario.lossless_in_every_mode
    return Expectation(
        mode=mode, lossless=lossless, window_start=None if lossless else start, window=words,
        slave_statuses=scenario.slave_statuses and mode.startswith("SYNC_MASTER"),
        disk_refusal=scenario.disk_refusal,
        slave_ahead_ok=scenario.slave_ahead_ok,
    )


def violations(report: CheckReport, exp: Expectation, *, caught_up: bool, recovered: bool,
               disk_refusals: int = 0, resumed_after_disk: bool = True) -> list[str]:
    """Each broken promise as a sentence; empty when the run met its mode's expectations."""
    out = []
    start = exp.window_start
    outside = [o for o in report.acked_missing_offsets if exp.lossless or start is None or o < start]
    if outside:
        out.append(f"{len(outside)} acknowledged message(s) missing on the master "
                   f"(allowed: {'none' if exp.lossless else 'within the window: ' + exp.window}); "
                   f"e.g. {report.acked_missing[:3]}")
    for label, items in (("duplicate(s)", report.duplicates), ("order break(s)", report.order_breaks),
                         ("contiguity break(s)", report.contiguity_breaks), ("damaged record(s)", report.damage),
                         ("failed send(s) stored anyway", report.failed_but_stored),
                         ("acknowledged message(s) at another queue offset", report.acked_moved),
                         ("consumed message(s) no longer stored", report.consumed_missing),
                         ("divergent record(s) between master and slave", report.divergence)):
        if items:
            out.append(f"{len(items)} {label}: {items[:3]}")
    if report.crc_failures:
        out.append(f"{report.crc_failures} CRC failure(s)")
    if report.slave_ahead_bytes and not exp.slave_ahead_ok:
        out.append(f"the slave holds {report.slave_ahead_bytes} B past the master's end")
    for name, node in report.nodes.items():
        if node.acked_missing and name != "broker-a" and caught_up:
            out.append(f"{name}: {len(node.acked_missing)} acknowledged message(s) missing after catch-up")
    if not recovered:
        out.append("the master did not accept writes again after the fault healed")
    if not caught_up:
        out.append("the slave did not catch up with the master after the fault healed")
    if exp.slave_statuses and not (report.statuses.get("FLUSH_SLAVE_TIMEOUT") or report.statuses.get("SLAVE_NOT_AVAILABLE")):
        out.append("producers never saw FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE while the slave lagged")
    if exp.disk_refusal and not disk_refusals:
        out.append("no send was refused with the disk-full message")
    if exp.disk_refusal and not resumed_after_disk:
        out.append("writes did not resume after the space was freed")
    return out
