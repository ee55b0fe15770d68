"""Security for the client protocol: the ACL file (`acl`), what each op needs (`rules`),
the per-server gate (`guard`) and a client's account (`credentials`). docs/security.md
explains the model."""

from wire.credentials import (
           Credentials,
           CredentialsError,
           default_credentials,
           set_default_credentials,
)

from .acl import Acl, AclError, Perm, load_acl, make_verifier
from .guard import AUTH_FAILED, Guard, Session

__all__ = ["AUTH_FAILED", "Acl", "AclError", "Credentials", "CredentialsError", "Guard", "Perm", "Session",
           "default_credentials", "load_acl", "make_verifier", "set_default_credentials"]
