"""The end of a run: each group judged on its own stores (read back by the chaos checker),
its share of the history and what the run observed of it (verdict.py's rules); with two
groups, then what no group can see alone: copies of a send across the groups."""

from __future__ import annotations

import os

import attrs

from cluster.judge.checker import check
from cluster.judge.history import FAIL, INFO, OK, History
from store.epoch_file import EPOCH_FILE_NAME, EpochFileCache

from .cluster import SimGroup
from .load import QUEUES, RETRYING, TOPIC, SimLoad
from .verdict import Observed, verdict

__all__ = ["across", "history_of", "judge"]


def judge(load: SimLoad, observed: dict[str, Observed], *, replication: str, flush: str = "ASYNC_FLUSH") -> list[str]:
    """The run's broken promises, each prefixed with its group when there are two."""
    groups = load.cluster.groups
    violations: list[str] = []
    stored: dict[str, dict[str, int]] = {}
    for group in groups:
        history, consumed = load.history, load.consumed
        if len(groups) > 1:
            history = history_of(load, group)
            consumed = load.consumed_by.get(group.name, {})
        report = check(history, {n.name: n.root for n in group.nodes}, master=group.master.name, topic=TOPIC,
                       queues=QUEUES, consumed=consumed)
        seen = observed[group.name]
        seen.epochs = {n.name: _epochs(n.root) for n in group.nodes}
        found = verdict(report, history, seen, replication=replication, master=group.master.name,
                               consumed=consumed, read_ids=load.read_ids.get(group.name, {}), flush=flush)
        prefix = f"{group.name}: " if len(groups) > 1 else ""
        violations.extend(prefix + f for f in found)
        stored[group.name] = report.stored
    if len(groups) > 1:
        violations.extend(across(load, stored))
    return violations


def history_of(load: SimLoad, group: SimGroup) -> History:
    """The ops the group's stores answer for: its own producers' and the retrying
    producer's. A retried send another group acknowledged is, for this one, a send that
    may have landed once per attempt of unknown outcome, or else a failed one."""
    lanes = load.lanes(group)
    out = History()
    for op in load.history.ops:
        if op.process == RETRYING and op.outcome == OK and load.retried_to.get(op.key) != group.name:
            op = attrs.evolve(op, outcome=INFO if op.copies > 1 else FAIL, copies=max(1, op.copies - 1))
        elif op.process != RETRYING and op.process not in lanes:
            continue
        out.ops.append(op)
    return out


def across(load: SimLoad, stored: dict[str, dict[str, int]]) -> list[str]:
    """A send stored in a group its producer did not write to, or more often in all
    groups than its attempts allow (a retried send's copies can land in either group).
    `stored`: group → key → copies on its master."""
    out = []
    for op in load.history.ops:
        places = {g: n for g, copies in stored.items() if (n := copies.get(op.key, 0))}
        if op.process != RETRYING:
            own = next(g.name for g in load.cluster.groups if op.process in load.lanes(g))
            if set(places) - {own}:
                out.append(f"{op.key} (sent to {own}) stored in {sorted(places)}")
        elif sum(places.values()) > op.copies:
            out.append(f"{op.key} stored {sum(places.values())} times across groups ({places}), "
                       f"may be stored {op.copies}x")
    return [f"{len(out)} send(s) stored across groups beyond their attempts: {out[:3]}"] if out else []


def _epochs(root: str) -> list[tuple[int, int]]:
    path = os.path.join(root, EPOCH_FILE_NAME)
    if not os.path.exists(path):
        return []
    return [(e.epoch, e.start_offset) for e in EpochFileCache.load(path).entries]
