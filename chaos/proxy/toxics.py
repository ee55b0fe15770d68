"""Toxics as Toxiproxy 2.x defines them: names, attributes, defaults and validation.

A toxic is data only; chaos.proxy.link applies it to a connection. Attribute names and
units are Toxiproxy's (latency/jitter ms, rate KB/s, slow_close delay ms, timeout ms with
0 = hold forever, reset_peer timeout ms, slicer sizes in bytes and delay in µs, limit_data
bytes), so a scenario written against this server runs unchanged against a real one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

STREAMS = ("upstream", "downstream")
"""upstream: client → server bytes; downstream: server → client bytes (Toxiproxy's terms)."""

DEFAULTS: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
    "noop": {},
}
"""Each toxic type and its attributes with Toxiproxy's defaults."""


class ToxicError(ValueError):
    """A toxic definition Toxiproxy would refuse (HTTP 400); the message says why."""


@attrs.define
class Toxic:
    """One toxic of a proxy: `toxicity` is the chance it applies to a given connection."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "stream": self.stream,
                "toxicity": self.toxicity, "attributes": dict(self.attributes)}

    def attr(self, key: str) -> int:
        return self.attributes[key]

    def updated(self, body: Mapping[str, Any]) -> Toxic:
        """A copy with the attributes / toxicity of an update request (POST .../toxics/{t})."""
        merged = {**self.to_json(), **{k: v for k, v in body.items() if k in ("toxicity", "stream")}}
        merged["attributes"] = {**self.attributes, **dict(body.get("attributes") or {})}
        merged["name"], merged["type"] = self.name, self.type
        return parse_toxic(merged)


def parse_toxic(body: Any) -> Toxic:
    """A Toxic from a create request's JSON; ToxicError when Toxiproxy would answer 400."""
    if not isinstance(body, Mapping):
        raise ToxicError("bad request body: a JSON object is expected")
    kind = body.get("type")
    if kind not in DEFAULTS:
        raise ToxicError(f"invalid toxic type: {kind!r} (known: {', '.join(DEFAULTS)})")
    stream = body.get("stream") or "downstream"
    if stream not in STREAMS:
        raise ToxicError(f"stream was invalid, can be either upstream or downstream: {stream!r}")
    toxicity = body.get("toxicity", 1.0)
    if isinstance(toxicity, bool) or not isinstance(toxicity, int | float) or not 0.0 <= toxicity <= 1.0:
        raise ToxicError(f"toxicity must be a number between 0 and 1, got {toxicity!r}")
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str):
        raise ToxicError(f"toxic name must be a string, got {name!r}")
    given = body.get("attributes") or {}
    if not isinstance(given, Mapping):
        raise ToxicError("attributes must be a JSON object")
    attributes = dict(DEFAULTS[kind])
    for key, value in given.items():
        if key not in attributes:
            continue  # Toxiproxy's JSON decoding ignores unknown attributes too
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ToxicError(f"attribute {key!r} of a {kind} toxic must be a non-negative integer, got {value!r}")
        attributes[key] = value
    return Toxic(name=name, type=kind, stream=stream, toxicity=float(toxicity), attributes=attributes)
