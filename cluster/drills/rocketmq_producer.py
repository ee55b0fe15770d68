"""A drill's load from Apache's RocketMQ C++ producer (PyPI `rocketmq`: client-cpp 1.2.3 over
remoting), run as its own process so the library's threads and any crash stay out of the
drill: `python -m cluster.drills.rocketmq_producer NAMESRV TOPIC PREFIX RATE`.

It sends `PREFIX-0`, `PREFIX-1`, ... with send_sync (each message's KEYS and body are its
key: the C++ client draws a new UNIQ_KEY for every attempt, so the key is what a consumer
matches) until its stdin closes, printing one JSON line per event:
`{"invoke": key}` before a send, then `{"key", "outcome", ...}` when it returns:
- `ok`: send_sync returned SEND_OK (the only status it returns: client-cpp 1.2.3 retries
  every other answer), with `msg_id` (UNIQ_KEY) and `offset` (queue offset);
- `unknown`: send_sync raised after its retries. Some attempt may have timed out after
  the broker stored it, so the message may or may not be stored (never `fail`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
from typing import Any

__all__ = ["MISSING", "available"]

MISSING = ("the RocketMQ client load needs PyPI `rocketmq` (the C++ client; in tidemq's test extras): "
           "pip install 'tidemq[test]' or pip install rocketmq")
SEND_TIMEOUT_MS = 3000  # the C++ client's default


def available() -> bool:
    """Whether PyPI `rocketmq` is installed (without loading its library)."""
    return importlib.util.find_spec("rocketmq") is not None


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run(namesrv: str, topic: str, prefix: str, rate: float) -> None:
    from rocketmq.client import Message, Producer

    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()  # EOF: the drill asks us to stop
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    producer = Producer(f"drill-cpp-{prefix}", timeout=SEND_TIMEOUT_MS)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    _emit({"started": True})
    seq = 0
    try:
        while not stop.is_set():
            key = f"{prefix}-{seq}"
            seq += 1
            msg = Message(topic)
            msg.set_keys(key)
            msg.set_body(key)
            _emit({"invoke": key})
            try:
                result = producer.send_sync(msg)
            except Exception as e:  # the client's retries are spent: outcome unknown
                _emit({"key": key, "outcome": "unknown", "error": f"{type(e).__name__}: {e}"[:300]})
            else:
                _emit({"key": key, "outcome": "ok", "status": int(result.status), "msg_id": result.msg_id,
                       "offset": result.offset})
            stop.wait(1 / rate)  # the producer's pace
    finally:
        producer.shutdown()


if __name__ == "__main__":
    if not available():
        print(MISSING, file=sys.stderr)
        sys.exit(2)
    ns, tp, pre, r = sys.argv[1:5]
    run(ns, tp, pre, float(r))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown under the library's threads
