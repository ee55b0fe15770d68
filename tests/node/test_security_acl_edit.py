"""`acl_put` / `acl_remove`'s file edit (node/security/files.py `edit_account`, the console's
ACL page): an account added with a verifier logs in; its permissions change with its
verifier kept; a bad rule or a new account without a verifier is refused and the file
stays byte for byte; the node's Guard sees the edit at once (`recheck`), with its clock
standing still."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from node.security import Guard, Session, make_verifier
from node.security.acl import AclError, load_acl
from node.security.files import edit_account, remove_account
from tests.node.test_security import _login, acl_file  # noqa: F401 (a fixture)


def test_an_added_account_logs_in_and_a_change_keeps_its_secret(acl_file: Path) -> None:  # noqa: F811
    guard = Guard(str(acl_file), clock=lambda: 0.0)
    assert not edit_account(str(acl_file), "ops", scram=make_verifier("ops-secret").text(),
                            default_topic_perm="SUB", topic_perms=["orders=PUB|SUB"])
    guard.recheck()
    assert "error" not in _login(guard, Session("127.0.0.1"), "ops", "ops-secret")
    # new permissions, no verifier given: the old one stays
    assert edit_account(str(acl_file), "ops", admin=True, topic_perms=["orders=DENY"])
    guard.recheck()
    ops = load_acl(str(acl_file)).accounts["ops"]
    assert ops.admin and ops.default_topic_perm is None  # DENY: what was not given is the default
    assert [(r.pattern, r.perm) for r in ops.topic_rules] == [("orders", None)]
    assert "error" not in _login(guard, Session("127.0.0.1"), "ops", "ops-secret")
    assert guard.acl.accounts["ops"].admin


@pytest.mark.parametrize(("changes", "problem"), [
    ({"scram": None}, "ops is a new account: give it a secret"),
    ({"scram": "SCRAM-SHA-256$1:abc$def:ghi"}, "verifier"),
    ({"scram": make_verifier("x").text(), "topic_perms": ["orders=MAYBE"]}, "'MAYBE' is not a permission"),
    ({"scram": make_verifier("x").text(), "white_remote_address": ["10.0.0.300"]}, "10.0.0.300"),
])
def test_a_bad_edit_is_refused_and_the_file_stays(acl_file: Path, changes: dict, problem: str) -> None:  # noqa: F811
    before = acl_file.read_bytes()
    with pytest.raises(AclError, match=problem.replace("$", r"\$")):
        edit_account(str(acl_file), "ops", **changes)
    assert acl_file.read_bytes() == before


def test_remove_says_whether_the_account_was_there(acl_file: Path) -> None:  # noqa: F811
    edit_account(str(acl_file), "ops", scram=make_verifier("ops-secret").text())
    assert remove_account(str(acl_file), "ops")
    assert "ops" not in load_acl(str(acl_file)).accounts
    assert not remove_account(str(acl_file), "ops")


def test_edits_at_once_keep_each_other_s_changes(acl_file: Path) -> None:  # noqa: F811
    """Two writers of one file (two nodes sharing it, or two requests on one node) each read,
    change and replace it: without the lock one would write the file without the other's
    account."""
    scram = make_verifier("s").text()

    def add(prefix: str) -> None:
        for i in range(8):
            edit_account(str(acl_file), f"{prefix}{i}", scram=scram)

    threads = [threading.Thread(target=add, args=(p,)) for p in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    accounts = load_acl(str(acl_file)).accounts
    assert {f"{p}{i}" for p in "ab" for i in range(8)} <= set(accounts)
