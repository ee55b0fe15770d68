"""Queue selectors for ordered sends (RocketMQ's MessageQueueSelector): a producer that
sends every message of one key (an order id, an account) to one queue gets them consumed in
the order sent by an OrderlyConsumer (cluster/client/orderly.py).

A selector sees every writable queue of the topic, sorted by (broker name, queue id), the
ones of a group whose master is down included: a key keeps its queue while that master
fails over (the send fails until the group has a master again, rather than reorder the key
on another queue). The mapping changes when the topic's queues do (a queue count changed,
a group left the route), as RocketMQ's does.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from .routing import MessageQueue, TopicRoute

__all__ = ["QueueSelector", "select_by_hash", "selectable_queues"]

QueueSelector = Callable[[Sequence[MessageQueue], str], MessageQueue]
"""(the topic's queues, the sharding key) → the queue to send to."""


def select_by_hash(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """SelectMessageQueueByHash, with CRC32 of the key's UTF-8 bytes as the hash (Python's
    `hash` of a str differs between processes; Java's hashCode is not worth copying)."""
    if not queues:
        raise ValueError("no queue to select from")
    return queues[zlib.crc32(key.encode()) % len(queues)]


def selectable_queues(route: TopicRoute, topic: str) -> list[MessageQueue]:
    """The topic's writable queues in the route, sorted (see the module docstring)."""
    return sorted(MessageQueue(topic, g.broker_name, q) for g in route.groups
                  if g.queue_data is not None and g.queue_data.writable
                  for q in range(g.queue_data.write_queue_nums))
