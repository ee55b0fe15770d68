"""What each replication × flush mode promises under each fault, written down and checked.

A SIGKILLed process loses no page cache, so under process faults every mode keeps every
acknowledged message (the store crash matrix proves the same in-process). What the async
modes do NOT promise is the window they were exposed to at the fault: bytes acknowledged
but not yet flushed (ASYNC_FLUSH: lost by a machine crash, not by a process kill) and
bytes not yet on the slave (ASYNC_MASTER: lost if the master's disk were lost, or by a
failover). The report names that window; the check allows losses up to it for async modes
and none for SYNC_MASTER+SYNC_FLUSH.

A promotion (promote-under-load, old-master-returns) is the failover that window warns
about: the old master rejoins as a slave and cuts what it had not replicated, reporting
the cut (its `last_truncation`: CommitLog range and msgIds). SYNC_MASTER modes must lose
nothing acknowledged PUT_OK (a PUT_OK means the slave had it; docs/failover.md: a send
answered SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT was on the old master only and may be
lost as in ASYNC_MASTER); ASYNC_MASTER modes may lose only the messages the old master
reported dropping, whose msgIds the window names. A consumed message the old master
dropped may be gone in every mode.

Every mode, every fault: no duplicates, no order or contiguity breaks, no CRC failures,
no damage left after recovery, no failed send stored, no divergence where master and
slave both hold data, the slave caught up after healing, the consumer never saw a message
that is gone.
"""

from __future__ import annotations

from typing import Any

import attrs

from cluster.judge.checker import CheckReport
from wire.protocol import WireTruncation

from .layout import MASTER


@attrs.frozen
class Expectation:
    mode: str
    lossless: bool  # no acknowledged message may be missing
    window_start: int | None  # async modes: losses allowed only at CommitLog offsets from here on
    window: str  # what the window is, in words
    slave_statuses: bool = False  # producers must have seen FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
    disk_refusal: bool = False  # producers must have been refused with the disk-full message
    slave_ahead_ok: bool = False  # the slave may hold bytes past the master's end
    truncated: tuple[str, ...] | None = None  # a promotion: msgIds the old master dropped on rejoin
    truncated_range: tuple[int, int] | None = None  # and their CommitLog range [from, to)


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


def truncation_window(truncation: WireTruncation | None) -> tuple[tuple[str, ...], tuple[int, int] | None, str]:
    """After a promotion: the msgIds and CommitLog range the old master reported dropping
    when it rejoined (its `last_truncation`), and the window in words."""
    if truncation is None:
        return (), None, "none: the old master dropped nothing when it rejoined"
    ids = tuple(truncation.msg_ids)
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return ids, (truncation.from_offset, truncation.to_offset), (
        f"the {truncation.message_count} message(s) the old master dropped on rejoin, CommitLog "
        f"[{truncation.from_offset}, {truncation.to_offset}): msgIds {shown or '-'}")


def expectation(scenario: Any, mode: str, sample: Any | None,
                truncation: WireTruncation | None = None) -> Expectation:
    """`truncation`: the old master's report after a promotion scenario."""
    truncated, truncated_range = None, None
    if scenario.promotion:
        start = None
        truncated, truncated_range, words = truncation_window(truncation)
        lossless = mode.startswith("SYNC_MASTER")
    else:
        start, words = window_at_fault(mode, sample)
        lossless = start is None or scenario.lossless_in_every_mode
    return Expectation(
        mode=mode, lossless=lossless, window_start=None if lossless else start, window=words,
        truncated=truncated, truncated_range=truncated_range,
        slave_statuses=scenario.slave_statuses and mode.startswith("SYNC_MASTER"),
        disk_refusal=scenario.disk_refusal,
        slave_ahead_ok=scenario.slave_ahead_ok,
    )


def loss_allowed(exp: Expectation, offset: int, msg_id: str, status: str) -> bool:
    """Whether a message acknowledged with `status` at `offset` / `msg_id` may be missing."""
    if exp.truncated is not None:  # after a promotion: only what the old master reported dropping
        return msg_id in exp.truncated and not (exp.lossless and status == "PUT_OK")
    if exp.lossless:
        return False
    return exp.window_start is not None and offset >= exp.window_start


def violations(report: CheckReport, exp: Expectation, *, master: str = MASTER, caught_up: bool, recovered: bool,
               disk_refusals: int = 0, resumed_after_disk: bool = True) -> list[str]:
    """Each broken promise as a sentence; empty when the run met its mode's expectations.
    `master` names the node serving as master at the end (the checker's reference)."""
    out = []
    outside = [k for k, o, m, s in zip(report.acked_missing, report.acked_missing_offsets, report.acked_missing_msg_ids,
                                       report.acked_missing_statuses, strict=True) if not loss_allowed(exp, o, m, s)]
    if outside:
        allowed = "none" if exp.lossless else "within the window: " + exp.window
        if exp.truncated is not None and exp.lossless:
            allowed = "no PUT_OK; others within the window: " + exp.window
        out.append(f"{len(outside)} acknowledged message(s) missing on the master (allowed: {allowed}); "
                   f"e.g. {outside[:3]}")
    for label, items in (("duplicate(s)", report.duplicates), ("order break(s)", report.order_breaks),
                         ("contiguity break(s)", report.contiguity_breaks), ("damaged record(s)", report.damage),
                         ("failed send(s) stored anyway", report.failed_but_stored),
                         ("acknowledged message(s) at another queue offset", report.acked_moved),
                         ("consumed message(s) no longer stored", _consumed_missing(report, exp)),
                         ("divergent record(s) between master and slave", report.divergence)):
        if items:
            out.append(f"{len(items)} {label}: {items[:3]}")
    if report.crc_failures:
        out.append(f"{report.crc_failures} CRC failure(s)")
    if report.slave_ahead_bytes and not exp.slave_ahead_ok:
        out.append(f"the slave holds {report.slave_ahead_bytes} B past the master's end")
    lost = set(report.acked_missing)
    for name, node in report.nodes.items():
        behind = [k for k in node.acked_missing if k not in lost]  # a slave cannot have what the master lost
        if behind and name != master and caught_up:
            out.append(f"{name}: {len(behind)} acknowledged message(s) missing after catch-up")
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


def _consumed_missing(report: CheckReport, exp: Expectation) -> list[str]:
    """Consumed messages gone from the master, but for those the old master dropped."""
    low, high = exp.truncated_range or (0, 0)
    return [k for k, o in zip(report.consumed_missing, report.consumed_missing_offsets, strict=True)
            if not low <= o < high]
