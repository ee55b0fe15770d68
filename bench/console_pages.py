"""How fast the web console answers its heaviest pages (issue 47: "a page of 10,000
messages or 1,000 topics stays responsive"): the server's answer time, measured from a
client beside it, for the Topic list with 1,000 topics and for Message pages of a topic
holding 10,000 messages (the first and last page of 50, and one page of all 10,000).

    python -m bench.console_pages --namesrv 127.0.0.1:9876 --url http://127.0.0.1:8080

fills the cluster first (1,000 topics ConsoleBench0000.., 10,000 messages on
ConsoleBenchMessages) unless they are there, then prints the median and the worst of
--repeat answers per page, as docs/console.md shows them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx
import trio

from cluster.client import Admin, Producer

TOPICS = 1000
MESSAGES = 10_000
TOPIC = "ConsoleBenchMessages"


async def fill(namesrv: str) -> tuple[int, int]:
    """Create what is missing; the time range around the messages (epoch ms)."""
    async with Admin(namesrv) as admin:
        have = {t.topic for t in await admin.topics()}
        for i in range(TOPICS):
            name = f"ConsoleBench{i:04d}"
            if name not in have:
                await admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
        count = sum(q["max_offset"] - q["min_offset"] for q in await admin.topic_status(TOPIC)) \
            if TOPIC in have else 0
    begin = int(time.time() * 1000) - 3_600_000
    if count < MESSAGES:
        async with Producer(namesrv) as producer:
            await producer.send_many(TOPIC, (f"bench message {i}" for i in range(MESSAGES - count)))
    return begin, int(time.time() * 1000) + 60_000


def timed(client: httpx.Client, path: str, params: dict[str, str], repeat: int) -> tuple[float, float, int]:
    """Median and worst answer time (ms) of `repeat` GETs, and the answer's size in bytes."""
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        answer = client.get(path, params=params)
        times.append((time.perf_counter() - t0) * 1000)
        answer.raise_for_status()
        size = len(answer.content)
    return statistics.median(times), max(times), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--url", required=True, help="the console, e.g. http://127.0.0.1:8080")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    begin, end = trio.run(fill, args.namesrv)
    fmt = "%Y-%m-%dT%H:%M:%S"
    span = {"mode": "time", "topic": TOPIC, "begin": time.strftime(fmt, time.localtime(begin / 1000)),
            "end": time.strftime(fmt, time.localtime(end / 1000)), "fragment": "1"}
    cases = [
        ("Topic list, 1,000+ topics", "/topic", {"fragment": "1"}),
        ("Message page 1 of 50 (10,000 in range)", "/message", {**span, "size": "50", "page": "1"}),
        ("Message page 200 of 50 (10,000 in range)", "/message", {**span, "size": "50", "page": "200"}),
        ("Message page of all 10,000", "/message", {**span, "size": "10000", "page": "1"}),
    ]
    with httpx.Client(base_url=args.url, timeout=120) as client:
        for name, path, params in cases:
            median, worst, size = timed(client, path, params, args.repeat)
            print(f"{name:<44} median {median:8.1f} ms  worst {worst:8.1f} ms  {size / 1024:8.0f} KiB")


if __name__ == "__main__":
    main()
