"""The role a node serves instead of its config file's, and a change of it.

`failoverRole.json` in the store root holds the role after a promotion or a rejoin
(brokerId, brokerRole, the epoch a promoted node starts); it overrides the config file's
brokerId/brokerRole, which is never rewritten. A `Transition` is a role change under way:
the node closes its services, applies it (cutting the log first when asked) and serves again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import attrs

from store import runtime
from store.config import BrokerRole
from store.epoch_file import EpochFileError

from ..config import BrokerConfig
from ..tables.jsonfile import write_json_atomic

__all__ = ["ROLE_FILE", "RoleState", "Transition", "effective_config"]

ROLE_FILE = "failoverRole.json"


@attrs.frozen
class RoleState:
    """The role a node serves instead of its config file's (failoverRole.json)."""

    broker_id: int
    broker_role: str
    reason: str
    since_ms: int = attrs.field(factory=lambda: int(runtime.wall_clock() * 1000))
    pending_epoch: int | None = None
    """A promoted node starts this epoch at its max offset when it next serves as master."""

    @classmethod
    def load(cls, root: str) -> RoleState | None:
        path = os.path.join(root, ROLE_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            BrokerRole(raw["brokerRole"])
            return cls(int(raw["brokerId"]), raw["brokerRole"], str(raw.get("reason", "")),
                       int(raw.get("sinceMs", 0)), raw.get("pendingEpoch"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise EpochFileError(f"{path}: cannot read the failover role: {e}") from None

    def to_json(self) -> dict[str, Any]:
        return {"brokerId": self.broker_id, "brokerRole": self.broker_role, "reason": self.reason,
                "sinceMs": self.since_ms, "pendingEpoch": self.pending_epoch}

    def save(self, root: str) -> None:
        write_json_atomic(os.path.join(root, ROLE_FILE), self.to_json())


def effective_config(cfg: BrokerConfig, state: RoleState | None) -> BrokerConfig:
    """The config file's settings with the stored role (if any) in place of its own."""
    if state is None:
        return cfg
    store = attrs.evolve(cfg.store, broker_role=BrokerRole(state.broker_role))
    return attrs.evolve(cfg, broker_id=state.broker_id, store=store)


@attrs.frozen
class Transition:
    """A role change: the node closes its services, applies it, and serves again."""

    role: RoleState
    truncate_to: int | None = None
