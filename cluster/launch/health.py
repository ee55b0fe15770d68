"""`tidemq cluster status`: each recorded node's process state and its `status` answer.

The async half of the launcher: the processes are looked at with psutil (cluster/launch/processes.py),
the nodes are asked over the client protocol concurrently. Callers run `cluster_status` in
their own trio loop (the CLI with `trio.run`).
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio

from wire.client import TidemqError, connect, read_reply
from wire.protocol import GetStatus, StatusReply
from wire.protocol.namesrv import NamesrvStatus, NamesrvStatusReply

from . import processes
from .secrets import use_layout_secrets
from .state import require_state

__all__ = ["NodeStatus", "cluster_status", "query_status", "served"]


@attrs.define
class NodeStatus:
    name: str
    role: str
    """The role the node serves (its `status` answer), else its config file's (`config_role`):
    they differ after a failover."""
    pid: int | None
    state: str  # "running", "stopped" (SIGSTOP), "dead" (crashed/killed), "down", "never started"
    address: str
    answer: StatusReply | NamesrvStatusReply | None = None  # its `status` answer
    error: str | None = None
    config_role: str = ""

    @property
    def alive(self) -> bool:
        return self.state in ("running", "stopped")

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "answer": self.answer.to_json() if self.answer is not None else None,
                "alive": self.alive}


async def query_status(
    addresses: list[str], *, timeout_s: float = 3.0
) -> list[tuple[StatusReply | NamesrvStatusReply | None, str | None]]:
    """Ask every address (a node or a name server) for `status` concurrently: (answer,
    None) or (None, error)."""
    out: list[tuple[StatusReply | NamesrvStatusReply | None, str | None]] = [(None, None)] * len(addresses)

    async def one(i: int, address: str) -> None:
        try:
            async with connect(address, connect_timeout=timeout_s, request_timeout=timeout_s) as conn:
                answer = await conn.request(GetStatus())
            reply = NamesrvStatus if answer.get("role") == "NAMESRV" else GetStatus
            out[i] = (read_reply(reply(), answer, address), None)
        except TidemqError as e:
            out[i] = (None, str(e))

    async with trio.open_nursery() as nursery:
        for i, address in enumerate(addresses):
            nursery.start_soon(one, i, address)
    return out


async def cluster_status(
    base_dir: str | os.PathLike[str], *, query: bool = True, timeout_s: float = 3.0
) -> list[NodeStatus]:
    """Each recorded node's process state and, when `query`, its answer to the `status` op."""
    state = require_state(Path(base_dir).resolve())
    use_layout_secrets(state.layout)
    rows = [NodeStatus(r.name, r.role, r.pid, processes.state_of(r), r.address, config_role=r.role)
            for r in state.ordered()]
    if query:
        targets = [row for row in rows if row.state == "running" and row.address]
        answers = await query_status([row.address for row in targets], timeout_s=timeout_s)
        for row, (answer, error) in zip(targets, answers, strict=True):
            row.answer, row.error = answer, error
            if answer is not None and answer.role:
                row.role = answer.role  # as served: a promotion or a rejoin changed it
    for row in rows:
        if row.state == "stopped":
            row.error = "process is stopped (SIGSTOP); `tidemq cluster kill NODE --signal CONT` resumes it"
    return rows


SETTLE_S = 15.0
"""How long `served` waits for an etcd-mode node to settle (the controller's lease is 5 s)."""


def served(address: str, fallback: str, *, timeout_s: float = 2.0, settle_s: float = SETTLE_S) -> str:
    """`ROLE id N epoch E` as the node at `address` serves now, else `fallback` (the config
    file's role): what `cluster up` and `cluster start` print. In etcd mode, once the node
    settled (a master that holds the group's lease, a slave that knows who does), within
    `settle_s`: a restarted master may fence itself seconds after READY. Runs its own trio loop."""
    return trio.run(partial(_settled_role, address, fallback, timeout_s=timeout_s, settle_s=settle_s))


async def _settled_role(address: str, fallback: str, *, timeout_s: float, settle_s: float) -> str:
    deadline = trio.current_time() + settle_s
    while True:
        [(answer, _)] = await query_status([address], timeout_s=timeout_s)
        if isinstance(answer, StatusReply) and answer.role and settled(answer):
            return _describe(answer)
        if trio.current_time() >= deadline:
            if isinstance(answer, StatusReply) and answer.role:
                return _describe(answer) + " (not settled: no etcd lease holder yet)"
            return fallback
        await trio.sleep(0.2)  # poll: the controller's decision shows in the next status


def settled(answer: StatusReply) -> bool:
    """Whether the node's role is final: always, except in etcd mode before the election
    decided (a master that does not hold the lease yet, a slave that knows no master)."""
    controller = answer.controller
    if controller is None or controller.mode != "etcd":
        return True
    if answer.role != "SLAVE":
        return controller.leading
    return bool(controller.lease_holder)


def _describe(answer: StatusReply) -> str:
    epoch = answer.epoch
    return f"{answer.role} id {answer.broker_id}" + (f" epoch {epoch}" if epoch is not None and epoch >= 0 else "")
