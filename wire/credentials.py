"""A client's account: who it logs in as, and the SCRAM client side of the handshake.

Where the secret comes from, first that is set: the caller (`Credentials`), the process's
default (`set_default_credentials`: the node's own `accessKey`/`secretKeyFile`, or the
CLI's `--user`/`--secret-file`), the environment (`TIDEMQ_USER` with `TIDEMQ_SECRET_FILE`,
or `TIDEMQ_SECRET`). The secret is read from a file so it stays out of process lists and
shell history; it is never logged or put in an error (the repr hides it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from .protocol.auth import SCRAM_MECHANISM

if TYPE_CHECKING:
    from scramp import ScramClient

__all__ = ["Credentials", "CredentialsError", "default_credentials", "read_secret_file", "set_default_credentials"]


class CredentialsError(ValueError):
    """The account settings are incomplete or the secret file cannot be read."""


@attrs.frozen
class Credentials:
    user: str
    secret: str = attrs.field(repr=False)

    def scram_client(self) -> ScramClient:
        from scramp import ScramClient  # here: scramp (~60 ms) is for secured clusters only

        return ScramClient([SCRAM_MECHANISM], self.user, self.secret)

    @classmethod
    def from_file(cls, user: str, secret_file: str) -> Credentials:
        return cls(user, read_secret_file(secret_file))


def read_secret_file(path: str) -> str:
    """The secret in `path` (its first line, without the line end)."""
    try:
        with open(path, encoding="utf-8") as f:
            secret = f.readline().rstrip("\r\n")
    except OSError as e:
        raise CredentialsError(f"cannot read the secret file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"the secret file {path} is not UTF-8 text") from None
    if not secret:
        raise CredentialsError(f"the secret file {path} is empty")
    return secret


_default: Credentials | None = None


def set_default_credentials(credentials: Credentials | None) -> None:
    """The account this process's connections log in with unless told otherwise."""
    global _default
    _default = credentials


def default_credentials() -> Credentials | None:
    """The process default, else the environment's (`TIDEMQ_USER` + `TIDEMQ_SECRET_FILE` or
    `TIDEMQ_SECRET`), else None (no login)."""
    if _default is not None:
        return _default
    user = os.environ.get("TIDEMQ_USER")
    if not user:
        return None
    secret_file = os.environ.get("TIDEMQ_SECRET_FILE")
    if secret_file:
        return Credentials.from_file(user, secret_file)
    secret = os.environ.get("TIDEMQ_SECRET")
    if not secret:
        raise CredentialsError("TIDEMQ_USER is set but neither TIDEMQ_SECRET_FILE nor TIDEMQ_SECRET is")
    return Credentials(user, secret)
