"""A secure layout's files (conf/2m-2s-secure): certificates, the ACL file and two accounts.

`make_dev_secrets(layout)` writes `secrets/` beside the layout's config files, which name
them relative to themselves:
- `ca.pem`, `node.pem`, `node-key.pem`: a new local CA and one certificate for every
  process;
- `acl.toml` with two accounts: `broker` (admin: the nodes log in as it, and so do the
  launcher and the drills) and `app` (PUB|SUB on every topic, SUB on every group: for a
  user's clients);
- `broker.secret` and `app.secret`.

The directory is git-ignored: each checkout makes its own. `use_layout_secrets(layout)`
makes this process's connections log in as `broker` with TLS, when the layout has
secrets, so `tidemq cluster up/status` and the drills work on it as on any layout.
"""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import attrs

from node.config import ConfigError, load_config
from node.security.files import new_secret, put_account, write_dev_certs
from wire.credentials import Credentials, CredentialsError, set_default_credentials
from wire.tls import TlsSettings, set_default_client_tls

from .layout import node_files

__all__ = ["NAMESRV_KEYS", "NODE_KEYS", "DevSecrets", "forget_layout_secrets", "layout_secrets", "make_dev_secrets",
           "use_layout_secrets"]

SECRETS_DIR = "secrets"
NAMESRV_KEYS = {"aclEnable": True, "aclFile": "secrets/acl.toml", "tlsMode": "enforcing",
                "tlsCertFile": "secrets/node.pem", "tlsKeyFile": "secrets/node-key.pem"}
"""What turns security on in a name server's file, with the files `make_dev_secrets` writes."""
NODE_KEYS = {**NAMESRV_KEYS, "tlsCaFile": "secrets/ca.pem", "accessKey": "broker",
             "secretKeyFile": "secrets/broker.secret"}
"""The same for a node's file (conf/2m-2s-secure spells them out)."""


@attrs.frozen
class DevSecrets:
    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    def account(self, name: str) -> Credentials:
        return Credentials.from_file(name, str(self.directory / f"{name}.secret"))

    def env(self, name: str = "app") -> dict[str, str]:
        """The environment a client process logs in as `name` with."""
        return {"TIDEMQ_USER": name, "TIDEMQ_SECRET_FILE": str(self.directory / f"{name}.secret"),
                "TIDEMQ_TLS_CA": str(self.ca_file)}


def make_dev_secrets(layout: str | os.PathLike[str], *, force: bool = False) -> DevSecrets:
    """Write the layout's `secrets/` (FileExistsError when it exists, unless `force`)."""
    directory = Path(layout).resolve() / SECRETS_DIR  # absolute: the export line works from anywhere
    if directory.exists():
        if not force:
            raise FileExistsError(f"{directory} exists; --force replaces it (running nodes keep the old files)")
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    os.chmod(directory, 0o700)
    write_dev_certs(str(directory))
    acl = str(directory / "acl.toml")
    put_account(acl, "broker", new_secret(str(directory / "broker.secret")), admin=True)
    put_account(acl, "app", new_secret(str(directory / "app.secret")), default_topic_perm="PUB|SUB",
                default_group_perm="SUB")
    return DevSecrets(directory)


def layout_secrets(layout: str | os.PathLike[str]) -> DevSecrets | None:
    """The layout's secrets, when it has them."""
    directory = Path(layout) / SECRETS_DIR
    return DevSecrets(directory) if (directory / "broker.secret").is_file() else None


def use_layout_secrets(layout: str | os.PathLike[str]) -> DevSecrets | None:
    """Log this process's connections in as the layout's `broker` account with TLS, when it
    has secrets; else as its nodes log in (a hand-made secure layout: a node file's
    `accessKey`/`secretKeyFile`, and its TLS to peers); else change nothing."""
    secrets = layout_secrets(layout)
    if secrets is not None:
        set_default_credentials(secrets.account("broker"))
        set_default_client_tls(TlsSettings("enforcing", ca_file=str(secrets.ca_file)).client_context())
        return secrets
    login = _node_login(Path(layout))
    if login is not None:
        credentials, tls = login
        if credentials is not None:
            set_default_credentials(credentials)
        if tls is not None:
            set_default_client_tls(tls)
    return None


def _node_login(layout: Path) -> tuple[Credentials | None, ssl.SSLContext | None] | None:
    """How the layout's first node that logs in does (its admin account, its client TLS),
    or None when none does. A file that cannot be read is left to the launcher to name."""
    for name, path in sorted(node_files(layout).items()):
        if name == "namesrv":
            continue
        try:
            cfg = load_config(str(path))
            credentials, tls = cfg.credentials, cfg.client_tls
        except (ConfigError, CredentialsError, OSError, ValueError):
            continue
        if credentials is not None or tls is not None:
            return credentials, tls
    return None


def forget_layout_secrets() -> None:
    """Undo `use_layout_secrets`: this process's connections go back to the environment's
    login and TLS (a harness that ran a secure cluster before a plain one)."""
    set_default_credentials(None)
    set_default_client_tls(None)
