"""Route a local cluster's links through Toxiproxy proxies (`tidemq cluster up --proxy-url`).

For every broker of the layout the launcher keeps two proxies on a Toxiproxy server:
`<prefix><node>-client` in front of its listenPort and `<prefix><node>-ha` in front of its
haListenPort. The broker starts from a copy of its config (`<base-dir>/proxied-conf/`)
that advertises the proxies (`advertisedAddress`, `haAdvertisedAddress`: registered with
the name server, so producers and consumers routed by it, and slaves that learn their
master there, connect through them) and whose static `haMasterAddress` / `masterAddr`,
naming a broker of the layout, name that broker's proxies instead. A fault tool can then
cut, slow or slice exactly one link by disabling one proxy or adding a toxic to it. The
launcher itself, `cluster status` and the offline tools still reach each node directly.

The server is a real Toxiproxy or `tidemq chaos proxy`; it is spoken to over HTTP with the
toxiproxy-python client (the `chaos` extra), imported only when a proxy URL is given. The
launcher never starts a proxy server: the proxies must outlive any one `up` and belong to
whoever injects the faults, and a cluster/ that spawned the chaos tool would depend on
the layer above it. So the URL names a server that is already running.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NotRequired, TypedDict
from urllib.parse import urlsplit

from node.config import ConfigError, load_config
from store.address import AddressError, format_host_port, split_host_port

from .layout import set_key
from .state import LauncherError, LayoutError, NodeRecord, ProxyRecord, Stage

__all__ = ["LINKS", "ProxyRow", "connect", "describe", "ensure", "plan", "remove", "write_configs"]

LINKS = ("client", "ha")
PROXIED_CONF = "proxied-conf"


CHAOS_EXTRA_INSTALL = ".venv/bin/pip install -e '.[chaos]' (in the repository)"
"""How to install the `chaos` extra (h11, toxiproxy-python, hypothesis) beside scripts/run's
install, for the messages that need it."""


def _client_module() -> Any:
    try:
        import toxiproxy
    except ImportError:
        raise LayoutError(
            "--proxy-url needs the toxiproxy-python client of the `chaos` extra, which is not "
            f"installed: {CHAOS_EXTRA_INSTALL}"
        ) from None
    return toxiproxy


def _errors() -> tuple[type[BaseException], ...]:
    """What the client raises when the server is gone or refuses (requests comes with it)."""
    from requests import RequestException
    from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

    return (RequestException, InvalidToxic, NotFound, ProxyExists, KeyError, ValueError)


def connect(url: str) -> Any:
    """A toxiproxy-python client pointed at `url` (http://host:port); LayoutError for a
    malformed URL or a missing client, LauncherError when no server answers there."""
    toxiproxy = _client_module()
    parts = urlsplit(url if "//" in url else f"http://{url}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if parts.scheme != "http" or not host or parts.path not in ("", "/"):
        raise LayoutError(f"--proxy-url must be http://host:port of a Toxiproxy server, got {url!r}")
    client = toxiproxy.Toxiproxy()
    client.update_api_consumer(host, port or 8474)  # the client's API address is process-wide
    if not client.running():
        raise LauncherError(
            f"no Toxiproxy server answers at {url}; start one (tidemq chaos proxy --port {port or 8474}, "
            "or a real Toxiproxy) or leave out --proxy-url"
        )
    return client


def listen_host(url: str) -> str:
    """Proxies listen on the proxy server's host (it must be reachable from the nodes)."""
    host = urlsplit(url if "//" in url else f"http://{url}").hostname or "127.0.0.1"
    return "127.0.0.1" if host == "localhost" else host


def plan(specs: list[NodeRecord], prefix: str, old: dict[str, ProxyRecord]) -> dict[str, ProxyRecord]:
    """The proxies of a layout's brokers, keeping the listen address of recorded ones.
    LayoutError, before any proxy exists, when a broker's static master address names no
    broker of the layout (that link could not go through a proxy)."""
    out: dict[str, ProxyRecord] = {}
    brokers = [s for s in specs if s.stage is not Stage.NAMESRV]
    for spec in brokers:
        cfg = _config(spec)
        for link, upstream in (("client", cfg.bind_address), ("ha", cfg.ha_bind_address)):
            name = f"{prefix}{spec.name}-{link}"
            kept = old.get(name)
            listen = kept.listen if kept is not None and kept.upstream == upstream else ""
            out[name] = ProxyRecord(name=name, node=spec.name, link=link, upstream=upstream, listen=listen)
    links = {(p.upstream, p.link) for p in out.values()}
    for spec in brokers:
        for key, address, link in _static_masters(_config(spec)):
            if (_normal(address), link) not in links:
                raise LayoutError(
                    f"{spec.config}: {key} {address} names no broker of the layout, so that link "
                    "cannot go through a proxy; leave it to the name server (remove the key) or "
                    "start without --proxy-url"
                )
    return out


def _static_masters(cfg: Any) -> list[tuple[str, str, str]]:
    """(key, address, link) of the master addresses a broker's config names."""
    pairs = (("haMasterAddress", cfg.store.ha_master_address, "ha"), ("masterAddr", cfg.master_addr, "client"))
    return [(key, address, link) for key, address, link in pairs if address is not None]


def ensure(client: Any, proxies: Iterable[ProxyRecord], host: str) -> None:
    """Make each proxy exist on the server, filling in `listen`: one that exists with the
    same upstream is kept as it is (enabled or not: a fault may be in progress); a missing
    one is created at its recorded listen address, or on a free port of `host`."""
    for rec in proxies:
        try:
            existing = client.get_proxy(rec.name)
            if existing is not None:
                if existing.upstream != rec.upstream:
                    raise LauncherError(
                        f"proxy {rec.name} exists with upstream {existing.upstream}, not {rec.upstream} "
                        "(another cluster's?); delete it or choose another --proxy-prefix"
                    )
                rec.listen = existing.listen
                continue
            created = client.create(upstream=rec.upstream, name=rec.name,
                                    listen=rec.listen or format_host_port(host, 0))
        except LauncherError:
            raise
        except _errors() as e:
            raise LauncherError(
                f"cannot create proxy {rec.name} ({rec.listen or host + ':0'} → {rec.upstream}): "
                f"{type(e).__name__} {e}"
            ) from None
        rec.listen = created.listen


def remove(client: Any, proxies: Iterable[ProxyRecord]) -> list[str]:
    """Delete the proxies (a missing one is fine); the problems, as sentences."""
    problems = []
    for rec in proxies:
        try:
            existing = client.get_proxy(rec.name)
            if existing is not None and existing.upstream == rec.upstream:
                existing.destroy()
        except _errors() as e:
            problems.append(f"cannot delete proxy {rec.name}: {type(e).__name__} {e}")
    return problems


class ProxyRow(TypedDict):
    """One proxy in `cluster status` (a line, or an object of its JSON): the record, then
    what the server says now: `enabled` and `toxics`, or `error`."""

    name: str
    node: str
    link: str
    listen: str
    upstream: str
    enabled: NotRequired[bool]
    toxics: NotRequired[list[str]]
    error: NotRequired[str]


def describe(url: str, proxies: Iterable[ProxyRecord]) -> list[ProxyRow]:
    """Each proxy as recorded plus what the server says now: enabled, toxics, or error."""
    rows: list[ProxyRow] = [
        {"name": p.name, "node": p.node, "link": p.link, "listen": p.listen, "upstream": p.upstream}
        for p in proxies]
    try:
        client = connect(url)
        live = client.proxies()
    except LauncherError as e:
        return [{**row, "error": str(e)} for row in rows]
    except _errors() as e:
        return [{**row, "error": f"{type(e).__name__} {e}"} for row in rows]
    for row in rows:
        proxy = live.get(row["name"])
        if proxy is None:
            row["error"] = "missing on the proxy server"
            continue
        row["enabled"] = bool(proxy.enabled)
        try:
            row["toxics"] = sorted(proxy.toxics())
        except _errors() as e:
            row["error"] = f"{type(e).__name__} {e}"
    return rows


def write_configs(specs: list[NodeRecord], proxies: dict[str, ProxyRecord], base: Path) -> None:
    """Write each broker's proxied config under `<base>/proxied-conf/` and point its
    record there (`plan` checked that every static master address has a proxy)."""
    by_link = {(p.upstream, p.link): p.listen for p in proxies.values()}
    out = base / PROXIED_CONF
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        if spec.stage is Stage.NAMESRV:
            continue
        cfg = _config(spec)
        values = {"advertisedAddress": by_link[(cfg.bind_address, "client")],
                  "haAdvertisedAddress": by_link[(cfg.ha_bind_address, "ha")]}
        for key, address, link in _static_masters(cfg):
            values[key] = by_link[(_normal(address), link)]
        # files named relative to the original config: the copy lives elsewhere, so name them whole
        for key, path in (("aclFile", cfg.acl_file if cfg.acl_enable else None), ("secretKeyFile", cfg.secret_key_file),
                          ("tlsCertFile", cfg.tls_cert_file), ("tlsKeyFile", cfg.tls_key_file),
                          ("tlsCaFile", cfg.tls_ca_file)):
            if path:
                values[key] = path
        source = Path(spec.config)
        text = source.read_text(encoding="utf-8")
        for key, value in values.items():
            text = set_key(text, key, value, properties=source.suffix == ".properties")
        target = out / source.name
        target.write_text(f"# {source} with its links through proxies (tidemq cluster up --proxy-url)\n"
                          + text, encoding="utf-8")
        spec.config = str(target)


def _config(spec: NodeRecord) -> Any:
    try:
        return load_config(spec.config)  # only its addresses are used
    except ConfigError as e:
        raise LayoutError(str(e)) from None


def _normal(address: str) -> str:
    try:
        return format_host_port(*split_host_port(address))
    except AddressError:
        return address
