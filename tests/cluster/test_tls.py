"""TLS with real processes: a name server, a SYNC_MASTER and its slave with tlsMode enforcing
and aclEnable, certificates from `tidemq tls make-dev-certs`; what a client without TLS,
with a foreign CA, or against a plaintext port is told; mutual TLS on the HA port."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
import trio
import trustme

from ha.protocol import encode_report
from node.security import Credentials
from tests.cluster.helpers import cli, wait_for
from tests.node.nodeproc import Nodes, master_conf, slave_conf, write_conf
from wire.client import ConnectionLost, connect
from wire.protocol import GetStatus, Pull, Send, TopicCreate
from wire.tls import TlsSettings

pytestmark = pytest.mark.slow  # every test here starts `tidemq` processes


def _certs(directory: Path, ca: trustme.CA | None = None) -> trustme.CA:
    """ca.pem, node.pem and node-key.pem as `tidemq tls make-dev-certs` writes them, from a
    CA the test keeps (to sign an expired certificate with it)."""
    ca = ca or trustme.CA()
    directory.mkdir(parents=True, exist_ok=True)
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    leaf.cert_chain_pems[0].write_to_path(str(directory / "node.pem"))
    leaf.private_key_pem.write_to_path(str(directory / "node-key.pem"))
    return ca


def test_make_dev_certs_writes_files_a_node_can_use(tmp_path):
    result = cli("tls", "make-dev-certs", str(tmp_path), "--days", "30")
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / "node-key.pem").stat().st_mode & 0o777 == 0o600
    settings = TlsSettings("enforcing", str(tmp_path / "node.pem"), str(tmp_path / "node-key.pem"),
                           str(tmp_path / "ca.pem"))
    settings.server_context(client_certs=True)
    settings.client_context()


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    ca = _certs(tmp / "certs")
    certs = tmp / "certs"
    acl = tmp / "acl.toml"
    for name, flags in (("broker", ["--admin"]), ("app", ["--default-topic-perm", "PUB|SUB"])):
        made = cli("acl", "add-user", name, "-f", str(acl), "--generate", "--secret-file", str(tmp / f"{name}.secret"),
                   *flags)
        assert made.returncode == 0, made.stderr.decode()
    tls = {"tlsMode": "enforcing", "tlsCertFile": "certs/node.pem", "tlsKeyFile": "certs/node-key.pem"}
    nodes = Nodes()
    try:
        ns_conf = write_conf(tmp, "namesrv", {"listenPort": 0, "aclEnable": True, **tls})
        ns = nodes.start(ns_conf, ["namesrv", "start", "-c", str(ns_conf)])
        plain_conf = write_conf(tmp, "plain-namesrv", {"listenPort": 0})
        plain = nodes.start(plain_conf, ["namesrv", "start", "-c", str(plain_conf)])
        node = {"aclEnable": True, "accessKey": "broker", "secretKeyFile": "broker.secret",
                "namesrvAddr": ns.address, "tlsCaFile": "certs/ca.pem", **tls}
        mconf = master_conf(tmp, "m", "SYNC_MASTER", **node)
        master = nodes.start(mconf)
        slave = nodes.start(slave_conf(tmp, mconf, "s", **node))
        ha_port = int(mconf.read_text().split("haListenPort = ")[1].split()[0])
        yield {"namesrv": ns.address, "plain": plain.address, "master": master.address, "slave": slave.address,
               "ha": ("127.0.0.1", ha_port), "tmp": tmp, "certs": certs, "ca": ca,
               "app": Credentials.from_file("app", str(tmp / "app.secret")),
               "admin": Credentials.from_file("broker", str(tmp / "broker.secret")),
               "tls": TlsSettings("enforcing", ca_file=str(certs / "ca.pem")).client_context()}
    finally:
        nodes.cleanup()


async def _call(address, request, *, credentials=None, tls=None):
    async with connect(address, connect_timeout=5.0, request_timeout=10.0, credentials=credentials, tls=tls) as conn:
        return await conn.call(request)


async def test_a_tls_client_sends_and_the_slave_replicates_over_mutual_tls(secure):
    master, tls = secure["master"], secure["tls"]
    await _call(master, TopicCreate(topic="secure"), credentials=secure["admin"], tls=tls)

    async def replicated() -> bool:
        status = await _call(master, GetStatus(), credentials=secure["app"], tls=tls)
        return any(s.ack_offset >= 0 for s in status.ha.slaves or ())

    await wait_for(replicated, what="the slave replicating over TLS")
    sent = await _call(master, Send(topic="secure", body=b"sealed"), credentials=secure["app"], tls=tls)
    assert sent.status.value == "PUT_OK"  # SYNC_MASTER: the slave acknowledged it over mutual TLS

    async def on_slave() -> bool:
        pulled = await _call(secure["slave"], Pull(topic="secure", queue_id=sent.queue_id, offset=0),
                             credentials=secure["app"], tls=tls)
        return [m.body for m in pulled.messages] == [b"sealed"]

    await wait_for(on_slave, what="the message on the slave")


async def test_plaintext_to_a_tls_port_and_tls_to_a_plaintext_port_get_clear_errors(secure):
    with pytest.raises(ConnectionLost, match="accepts TLS only"):
        await _call(secure["master"], GetStatus(), credentials=secure["app"])
    with pytest.raises(ConnectionLost, match="TLS handshake failed.*may not speak TLS"):
        await _call(secure["plain"], GetStatus(), tls=secure["tls"])
    foreign = secure["tmp"] / "foreign"
    _certs(foreign)
    other_ca = TlsSettings("enforcing", ca_file=str(foreign / "ca.pem")).client_context()
    with pytest.raises(ConnectionLost, match="certificate verify failed.*not signed by the CA"):
        await _call(secure["namesrv"], GetStatus(), tls=other_ca)
    # the node served the refused clients' neighbours all along
    status = await _call(secure["master"], GetStatus(), credentials=secure["app"], tls=secure["tls"])
    assert status.role == "SYNC_MASTER"


async def _ha_bytes(secure, context: ssl.SSLContext | None) -> bytes:
    """What the master's HA port sends a would-be slave that reports offset 0."""
    host, port = secure["ha"]
    stream = await trio.open_tcp_stream(host, port)
    received = b""
    try:
        if context is not None:
            stream = trio.SSLStream(stream, context, server_hostname=host)
        with trio.move_on_after(3):
            await stream.send_all(encode_report(0))
            while chunk := await stream.receive_some(65536):
                received += chunk
    except (trio.BrokenResourceError, ssl.SSLError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)
    return received


async def test_a_fake_slave_gets_no_commitlog_bytes(secure):
    await _call(secure["master"], Send(topic="secure", body=b"x" * 100), credentials=secure["app"], tls=secure["tls"])
    assert await _ha_bytes(secure, None) == b""  # plaintext
    server_only = TlsSettings("enforcing", ca_file=str(secure["certs"] / "ca.pem")).client_context()
    assert await _ha_bytes(secure, server_only) == b""  # TLS without a client certificate
    foreign_ca = trustme.CA()
    with_foreign = TlsSettings("enforcing", ca_file=str(secure["certs"] / "ca.pem")).client_context()
    foreign_ca.issue_cert("127.0.0.1").configure_cert(with_foreign)
    assert await _ha_bytes(secure, with_foreign) == b""  # a certificate the cluster's CA did not sign
    expired = TlsSettings("enforcing", ca_file=str(secure["certs"] / "ca.pem")).client_context()
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    secure["ca"].issue_cert("127.0.0.1", not_before=past - datetime.timedelta(days=2),
                                   not_after=past).configure_cert(expired)
    assert await _ha_bytes(secure, expired) == b""  # expired
    valid = TlsSettings("enforcing", ca_file=str(secure["certs"] / "ca.pem")).client_context()
    secure["ca"].issue_cert("127.0.0.1").configure_cert(valid)
    assert len(await _ha_bytes(secure, valid)) > 100  # the control: a certified slave is served
    # the real slave, with the cluster's certificate, is still replicating
    status = await _call(secure["master"], GetStatus(), credentials=secure["app"], tls=secure["tls"])
    assert len(status.ha.slaves or ()) == 1



def test_the_cli_connects_with_tls_ca(secure):
    tmp = secure["tmp"]
    login = ["--user", "app", "--secret-file", str(tmp / "app.secret")]
    sent = cli("send", "--namesrv", secure["namesrv"], "--topic", "secure", "via-cli", *login,
               "--tls-ca", str(secure["certs"] / "ca.pem"))
    assert sent.returncode == 0, sent.stderr.decode()
    refused = cli("send", "--namesrv", secure["namesrv"], "--topic", "secure", "x", *login)
    err = refused.stderr.decode()
    assert refused.returncode == 1 and "accepts TLS only" in err and "Traceback" not in err, err


async def test_a_permissive_port_takes_tls_and_plaintext(tmp_path):
    _certs(tmp_path / "certs")
    conf = write_conf(tmp_path, "namesrv", {"listenPort": 0, "tlsMode": "permissive",
                                            "tlsCertFile": "certs/node.pem", "tlsKeyFile": "certs/node-key.pem"})
    nodes = Nodes()
    try:
        ns = nodes.start(conf, ["namesrv", "start", "-c", str(conf)])
        tls = TlsSettings("enforcing", ca_file=str(tmp_path / "certs" / "ca.pem")).client_context()
        for context in (None, tls):
            assert (await _call(ns.address, GetStatus(), tls=context)).role == "NAMESRV"
    finally:
        nodes.cleanup()


def test_make_secrets_writes_a_secure_layout_s_files_once(tmp_path):
    layout = tmp_path / "layout"
    layout.mkdir()
    made = cli("cluster", "make-secrets", str(layout))
    assert made.returncode == 0, made.stderr.decode()
    out = made.stdout.decode()
    assert "TIDEMQ_USER=app" in out and "TIDEMQ_TLS_CA=" in out
    exported = dict(kv.split("=", 1) for kv in out.split("export ", 1)[1].split())
    assert all(Path(v).is_absolute() and Path(v).exists() for k, v in exported.items() if k != "TIDEMQ_USER")
    secrets = layout / "secrets"
    assert sorted(p.name for p in secrets.iterdir()) == [
        "acl.toml", "app.secret", "broker.secret", "ca.pem", "node-key.pem", "node.pem"]
    again = cli("cluster", "make-secrets", str(layout))
    assert again.returncode == 2 and "--force replaces it" in again.stderr.decode()
    assert cli("cluster", "make-secrets", str(layout), "--force").returncode == 0
