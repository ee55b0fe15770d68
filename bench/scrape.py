"""A scraper for `scripts/bench compare`'s tidemq-async-metrics row: reads a /metrics URL
every `--interval` seconds until stopped (SIGTERM), as Prometheus would, so the row pays
what scrapes cost the node (docs/metrics.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import time

import httpx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scrape")
    parser.add_argument("url")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    scrapes = failures = 0
    with httpx.Client(timeout=10) as client:
        while not stop:
            started = time.monotonic()
            try:
                client.get(args.url).raise_for_status()
                scrapes += 1
            except httpx.HTTPError:
                failures += 1
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))  # poll: the scrape interval
    print(f"{scrapes} scrapes, {failures} failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
