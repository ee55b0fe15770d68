"""Reads over remoting: PULL_MESSAGE (long polling), consumer offsets, queue offsets and
message lookups."""

from __future__ import annotations

from .channel import Processor

__all__ = ["PULL_PROCESSORS"]

PULL_PROCESSORS: dict[int, Processor] = {}
