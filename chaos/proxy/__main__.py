"""`python -m chaos.proxy [--host H] [--port P]`: the Toxiproxy-compatible server on its
own (what `tidemq chaos proxy` runs). Prints `READY host:port` once it listens."""

from __future__ import annotations

import argparse
import sys

import trio

from .api import run_server


def serve(host: str, port: int) -> int:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(run_server, port, host)
            print(f"READY {host}:{bound}", flush=True)

    try:
        trio.run(main)
    except KeyboardInterrupt:
        return 0
    except OSError as e:
        print(f"tidemq chaos proxy: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.proxy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8474)
    args = parser.parse_args(argv)
    return serve(args.host, args.port)


if __name__ == "__main__":
    sys.exit(main())
