"""TLS on every port: the settings, the contexts, and the server's first look at a connection.

`tlsMode` is RocketMQ's: `disabled` (plaintext only), `permissive` (TLS and plaintext on the
same port, for a rolling switch), `enforcing` (TLS only). A server peeks at a new
connection's first byte, without consuming it: 0x16 opens a TLS handshake record, anything else
is plaintext. So a plaintext client of an enforcing port gets a clear error, not a stream of
handshake garbage. On the HA port the master asks for a client certificate signed by the
cluster's CA (mutual TLS), so a process without one gets no CommitLog bytes. The bytes inside
stay RocketMQ's HA wire.

A client uses TLS when it has a CA file to check servers with. That comes from the caller,
the process default (`set_default_client_tls`: a node's own tlsCaFile, or the CLI's
`--tls-ca`), or `TIDEMQ_TLS_CA` (with `TIDEMQ_TLS_CERT` and `TIDEMQ_TLS_KEY` to present a
certificate).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl

import attrs
import trio

log = logging.getLogger("tidemq.security")

__all__ = ["TLS_MODES", "TlsError", "TlsHandshakeFailed", "TlsSettings", "accept_replica", "accept_tls", "client_tls_from_env", "default_client_tls",
           "set_default_client_tls", "wrap_client"]

TLS_MODES = ("disabled", "permissive", "enforcing")
TLS_HANDSHAKE_RECORD = 0x16
HANDSHAKE_TIMEOUT_S = 10.0
"""How long a server waits for a new connection's first byte and TLS handshake."""


class TlsError(ValueError):
    """Unusable TLS settings: a missing or unreadable certificate, key or CA file."""


@attrs.frozen
class TlsSettings:
    """One process's TLS files (absolute paths) and mode."""

    mode: str = "disabled"
    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def problem(self) -> str | None:
        """What is wrong with the settings, or None (files are checked by the contexts)."""
        if self.mode not in TLS_MODES:
            return f"tlsMode must be one of {', '.join(TLS_MODES)}, got {self.mode!r}"
        if self.enabled and not (self.cert_file and self.key_file):
            return f"tlsMode {self.mode} needs tlsCertFile and tlsKeyFile"
        return None

    def server_context(self, *, client_certs: bool = False) -> ssl.SSLContext:
        """For a listening port; `client_certs`: require a certificate signed by ca_file."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        _load_chain(context, self.cert_file, self.key_file)
        if client_certs:
            if not self.ca_file:
                raise TlsError("mutual TLS (the HA port) needs tlsCaFile to check slaves' certificates")
            _load_ca(context, self.ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self) -> ssl.SSLContext:
        """For this process's own connections: check servers with ca_file, present cert_file."""
        if not self.ca_file:
            raise TlsError(f"tlsMode {self.mode} needs tlsCaFile: the CA that signed the other processes' certificates")
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        _load_ca(context, self.ca_file)
        if self.cert_file and self.key_file:
            _load_chain(context, self.cert_file, self.key_file)
        return context


def _load_chain(context: ssl.SSLContext, cert_file: str | None, key_file: str | None) -> None:
    try:
        context.load_cert_chain(cert_file or "", key_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(f"cannot load the certificate {cert_file} with key {key_file}: {_reason(e)}") from None


def _load_ca(context: ssl.SSLContext, ca_file: str) -> None:
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise TlsError(f"cannot load the CA file {ca_file}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)


async def _first_byte(stream: trio.SocketStream) -> int | None:
    """The first byte the peer sent, left in the socket; None at EOF or when it says nothing."""
    with trio.move_on_after(HANDSHAKE_TIMEOUT_S):
        try:
            data = await stream.socket.recv(1, socket.MSG_PEEK)
        except OSError:
            return None
        return data[0] if data else None
    return None


async def accept_tls(
    stream: trio.SocketStream, context: ssl.SSLContext | None, mode: str
) -> tuple[trio.abc.Stream | None, str | None]:
    """A new connection as the server should read it: (the stream to serve, None), or
    (None, why) when it must be refused (plaintext on an enforcing port, a failed
    handshake: no certificate, a foreign or expired one). The caller closes `stream`. It
    never raises but Cancelled: one bad connection must not cost the listener."""
    if mode == "disabled" or context is None:
        return stream, None
    try:
        return await _accept_tls(stream, context, mode)
    except Exception as e:  # a bug here costs this connection, not the port
        log.exception("TLS accept failed")
        return None, f"unexpected error: {type(e).__name__}: {e}"


async def _accept_tls(
    stream: trio.SocketStream, context: ssl.SSLContext, mode: str
) -> tuple[trio.abc.Stream | None, str | None]:
    first = await _first_byte(stream)
    if first is None:
        return None, "closed before sending anything"
    if first != TLS_HANDSHAKE_RECORD:
        if mode == "permissive":
            return stream, None
        return None, "plaintext on a TLS port (tlsMode enforcing)"
    tls = trio.SSLStream(stream, context, server_side=True)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await tls.do_handshake()
    except trio.TooSlowError:
        _failed[0] += 1
        return None, "TLS handshake timed out"
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as e:
        _failed[0] += 1
        return None, f"TLS handshake failed: {_reason(e.__cause__ or e)}"
    return tls, None


_failed = [0]  # server-side handshakes that failed in this process (a list: no `global`)


def handshake_failures() -> int:
    """Server-side TLS handshakes that failed or timed out in this process, on every port
    (rocketmq_tls_handshake_failures_total)."""
    return _failed[0]


async def wrap_client(stream: trio.abc.Stream, context: ssl.SSLContext, host: str) -> trio.SSLStream[trio.abc.Stream]:
    """The client side of a TLS connection, handshake done (the caller bounds the time).
    TlsHandshakeFailed says why in terms an operator can act on."""
    tls = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await tls.do_handshake()
    except (trio.BrokenResourceError, ssl.SSLError, OSError) as e:
        cause = e.__cause__ or e
        reason = _reason(cause)
        if isinstance(cause, ssl.SSLCertVerificationError):
            hint = "its certificate is not signed by the CA this client trusts, has expired, or names another host"
        else:
            hint = "the server may not speak TLS (tlsMode disabled), or it refused this client's certificate"
        raise TlsHandshakeFailed(f"TLS handshake failed: {reason}; {hint}") from None
    return tls


async def accept_replica(context: ssl.SSLContext, mode: str, stream: trio.SocketStream) -> trio.abc.Stream | None:
    """The HA port's check of a new slave connection (`context` requires a client
    certificate; bind the first two with functools.partial): the stream to replicate
    over, or None (logged) to drop it."""
    served, why = await accept_tls(stream, context, mode)
    if served is None:
        log.warning("HA connection from %s refused: %s", _peer(stream), why)
    return served


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


class TlsHandshakeFailed(Exception):
    """The client's TLS handshake did not complete; the message says why."""


_default: ssl.SSLContext | None = None


def set_default_client_tls(context: ssl.SSLContext | None) -> None:
    """The TLS context this process's connections use unless told otherwise."""
    global _default
    _default = context


def default_client_tls() -> ssl.SSLContext | None:
    """The process default, else one from TIDEMQ_TLS_CA (+ TIDEMQ_TLS_CERT/KEY), else None."""
    return _default if _default is not None else client_tls_from_env()


_env_cache: dict[tuple[str, ...], ssl.SSLContext] = {}


def client_tls_from_env() -> ssl.SSLContext | None:
    ca = os.environ.get("TIDEMQ_TLS_CA")
    if not ca:
        return None
    key = (ca, os.environ.get("TIDEMQ_TLS_CERT", ""), os.environ.get("TIDEMQ_TLS_KEY", ""))
    if key not in _env_cache:  # building a context reads and parses files: once per process
        _env_cache[key] = TlsSettings("enforcing", key[1] or None, key[2] or None, ca).client_context()
    return _env_cache[key]
