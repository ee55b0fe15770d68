"""Clients and groups over remoting: heartbeats, unregistration, the member list and its
change notices, queue locks for orderly consumers, and consume retries (send-back)."""

from __future__ import annotations

from .channel import Processor

__all__ = ["CLIENT_PROCESSORS"]

CLIENT_PROCESSORS: dict[int, Processor] = {}
