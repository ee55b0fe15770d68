"""`tidemq console`: serve the web console for a cluster (docs/console.md)."""

from __future__ import annotations

import argparse
import os
import sys

import trio

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError

from . import assets


def _cmd_console(args: argparse.Namespace) -> int:
    if args.install_assets:
        try:
            written = assets.install()
        except assets.AssetsError as e:
            print(f"tidemq: error: {e}", file=sys.stderr)
            return EXIT_PROBLEM
        print(f"installed {len(written)} front-end files into {assets.VENDOR_DIR}")
        if not args.namesrv:
            return EXIT_OK
    if not args.namesrv:
        raise UsageError("--namesrv HOST:PORT is required (the cluster's name server)")
    tls = _tls_files(args.certfile, args.keyfile)
    missing = assets.missing()
    if missing:
        raise UsageError(f"the console's front-end files are missing ({', '.join(missing)}): "
                         "run `tidemq console --install-assets` first")
    from .server import run_console

    def ready(url: str) -> None:
        print(f"console: {url}", flush=True)

    trio.run(lambda: run_console(args.namesrv, host=args.host, port=args.port, login=args.login, on_ready=ready,
                                 tls=tls, session_lifetime_s=args.session_lifetime))
    return EXIT_OK


def _tls_files(certfile: str | None, keyfile: str | None) -> tuple[str, str] | None:
    """(certificate, key) to serve HTTPS with, both readable, or None for plain HTTP."""
    if certfile is None and keyfile is None:
        return None
    if certfile is None or keyfile is None:
        raise UsageError("--certfile and --keyfile go together (HTTPS needs both)")
    for option, path in (("--certfile", certfile), ("--keyfile", keyfile)):
        if not os.access(path, os.R_OK):
            raise UsageError(f"{option} {path}: not a readable file")
    return certfile, keyfile


def _duration(text: str) -> float:
    """`--session-lifetime`: seconds, or a number with s, m or h (90s, 30m, 8h)."""
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:].lower(), 0)
    try:
        seconds = float(text[:-1] if scale else text) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (seconds, or 90s, 30m, 8h)") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a session lifetime must be more than 0")
    return seconds


def add_console_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `tidemq console`."""
    p = subparsers.add_parser(
        "console", help="serve the web console for a cluster",
        description="Serve the web console (Dashboard, Cluster, Topic, Consumer, Message, DLQ, Failover and ACL "
        "pages; docs/console.md) for the cluster of "
        "--namesrv on http://HOST:PORT/, until Ctrl-C. It talks to the cluster through the client library "
        "only. --install-assets first fetches its front-end packages (htmx, uPlot) from the npm registry "
        "into a local directory it serves; nothing is loaded from a CDN.",
    )
    p.add_argument("--namesrv", "-n", metavar="HOST:PORT", help="the cluster's name server")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--login", action="store_true",
                   help="every user logs in with their tidemq account (aclEnable clusters) and the console "
                   "talks to the nodes as that account; pages that change the cluster need an admin account")
    p.add_argument("--session-lifetime", type=_duration, default="8h", metavar="DURATION",
                   help="with --login: a login lasts this long, then the user logs in again "
                   "(seconds, or 90s, 30m, 8h; default 8h)")
    p.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate (chain) file")
    p.add_argument("--keyfile", metavar="PEM", help="the certificate's private key (with --certfile)")
    p.add_argument("--install-assets", action="store_true",
                   help="fetch the front-end packages from the npm registry (then serve when --namesrv is given)")
    p.set_defaults(handler=_cmd_console)
