"""aclEnable for RocketMQ's clients (node/remoting/acl.py): signed requests (ACL 1.0) from
the real C++ client and the lean RemotingClient, the same permissions as the CBOR ops, and
a name server that wants credentials for a route.

One cluster for the module: a name server with aclEnable, an open one (so a client with a
wrong secret still finds the broker, and it is the broker's check that refuses it) and an
ASYNC_MASTER with aclEnable registered with both. The ACL file has `broker` (admin; the
node logs in with its SCRAM secret, RocketMQ clients sign with its separate remoting
secret, kept in a file) and `app` (PUB|SUB on RmqSecA and RmqSecPull only, SUB on every
group; `tidemq acl add-user --remoting-secret-file` adds it). A second fixture runs name
servers with tlsMode enforcing and permissive, for what TLS means to a remoting client."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from node.security.acl import Acl, AclError, make_verifier
from tests.cluster.helpers import cli, start_namesrv
from tests.node.nodeproc import Nodes, master_conf, write_conf
from tests.remoting.client import RemotingClient
from tests.remoting.cpp import run_cpp
from tests.remoting.test_groups import PushConsumers, wait_received
from tests.waiting import wait_until
from wire.client import NotFound, connect
from wire.credentials import Credentials
from wire.protocol import GetStatus, QueryByKey, Send, TopicCreate, TransactionList
from wire.protocol.namesrv import NamesrvStatus
from wire.remoting.acl import signed_fields
from wire.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.slow  # it starts `tidemq` processes

BROKER_SECRET = "broker-scram-secret"
BROKER_REMOTING = "broker-remoting-secret"
APP_REMOTING = "app-remoting-secret"
TOPIC_A, TOPIC_B, TOPIC_P = "RmqSecA", "RmqSecB", "RmqSecPull"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("rmq-secure")
    (tmp / "broker.secret").write_text(BROKER_SECRET + "\n")
    (tmp / "broker.remoting").write_text(BROKER_REMOTING + "\n")
    (tmp / "acl.toml").write_text(f"""
[[accounts]]
accessKey = "broker"
scram = "{make_verifier(BROKER_SECRET).text()}"
admin = true
remotingSecretFile = "broker.remoting"
""")
    (tmp / "app.remoting").write_text(APP_REMOTING + "\n")
    made = cli("acl", "add-user", "app", "-f", str(tmp / "acl.toml"), "--generate", "--secret-file",
               str(tmp / "app.secret"), "--topic-perm", f"{TOPIC_A}=PUB|SUB",
               "--topic-perm", f"{TOPIC_P}=PUB|SUB", "--default-group-perm", "SUB",
               "--remoting-secret-file", str(tmp / "app.remoting"))
    assert made.returncode == 0, made.stderr.decode()
    assert 'remotingSecretFile = "app.remoting"' in (tmp / "acl.toml").read_text()
    assert APP_REMOTING not in (tmp / "acl.toml").read_text()
    nodes = Nodes()
    try:
        ns_conf = write_conf(tmp, "namesrv", {"listenPort": 0, "aclEnable": True})
        ns = nodes.start(ns_conf, ["namesrv", "start", "-c", str(ns_conf)])
        open_ns = start_namesrv(nodes, tmp)
        master = nodes.start(master_conf(
            tmp, "m", "ASYNC_MASTER", brokerName="broker-sec", aclEnable=True, accessKey="broker",
            secretKeyFile="broker.secret", namesrvAddr=f"{ns.address};{open_ns.address}",
            transactionCheckInterval=200, transactionTimeOut=300))  # checks within a second
        yield {"namesrv": ns.address, "open_namesrv": open_ns.address, "master": master.address, "tmp": tmp}
    finally:
        nodes.cleanup()


def _security(address: str, request: GetStatus | NamesrvStatus | None = None) -> dict[str, Any]:
    """The server's security counters (`status`), read as the admin."""

    async def status() -> dict[str, Any]:
        async with connect(address, credentials=Credentials("broker", BROKER_SECRET)) as conn:
            return dict((await conn.call(request or GetStatus())).security)

    return trio.run(status)


def _admin_query(master: str, topic: str, key: str) -> list[bytes]:
    """The bodies stored under `key` in `topic`, read over the CBOR protocol as the admin."""

    async def query() -> list[bytes]:
        async with connect(master, credentials=Credentials("broker", BROKER_SECRET)) as conn:
            try:
                return [m.body for m in (await conn.call(QueryByKey(topic=topic, key=key))).messages]
            except NotFound:
                return []

    return trio.run(query)


def _produce(secure: dict[str, Any], topic: str, prefix: str, *creds: str, namesrv: str | None = None,
             count: int = 1) -> list[dict[str, Any]]:
    args = ["--namesrv", namesrv or secure["namesrv"], "--topic", topic, "--prefix", prefix,
            "--count", str(count), "--record-errors", "--timeout-ms", "3000"]
    if creds:
        args += ["--access-key", creds[0], "--secret-key", creds[1]]
    sent: list[dict[str, Any]] = run_cpp("produce", *args)["sent"]
    return sent


def test_the_cpp_producer_with_its_account_sends(secure: dict[str, Any]) -> None:
    sent = _produce(secure, TOPIC_A, "ok", "app", APP_REMOTING, count=2)
    assert [s.get("status") for s in sent] == [0, 0], sent
    for i in range(2):
        assert _admin_query(secure["master"], TOPIC_A, f"ok-k{i}") == [f"ok-{i}".encode()]


def test_a_wrong_secret_is_refused_by_the_broker_and_nothing_is_stored(secure: dict[str, Any]) -> None:
    # the open name server gives the route, so the send reaches the broker's check
    before = _security(secure["master"])
    sent = _produce(secure, TOPIC_A, "wrong", "app", "not-the-secret", namesrv=secure["open_namesrv"])
    assert "error" in sent[0], sent
    after = _security(secure["master"])
    assert after["failed_signatures"] > before["failed_signatures"]
    assert after["signed_requests"] == before["signed_requests"]
    assert _admin_query(secure["master"], TOPIC_A, "wrong-k0") == []


def test_no_credentials_are_refused(secure: dict[str, Any]) -> None:
    before = _security(secure["master"])
    sent = _produce(secure, TOPIC_A, "anon", namesrv=secure["open_namesrv"])
    assert "error" in sent[0], sent
    assert _security(secure["master"])["refused"] > before["refused"]
    assert _admin_query(secure["master"], TOPIC_A, "anon-k0") == []
    with RemotingClient(secure["master"]) as c:  # what the client was told
        answer = c.call(RequestCode.SEND_MESSAGE, _send_fields(TOPIC_A, "anon-raw"), b"x")
    assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, "No accessKey is configured")


def test_an_account_without_pub_on_the_topic_is_refused_as_its_cbor_send_would_be(secure: dict[str, Any]) -> None:
    async def create() -> None:
        async with connect(secure["master"], credentials=Credentials("broker", BROKER_SECRET)) as conn:
            await conn.call(TopicCreate(topic=TOPIC_B))

    trio.run(create)
    before = _security(secure["master"])
    sent = _produce(secure, TOPIC_B, "nopub", "app", APP_REMOTING, namesrv=secure["open_namesrv"])
    assert "error" in sent[0], sent
    after = _security(secure["master"])  # signed right, refused for the topic
    assert after["refused"] > before["refused"] and after["failed_signatures"] == before["failed_signatures"]
    assert _admin_query(secure["master"], TOPIC_B, "nopub-k0") == []
    with RemotingClient(secure["master"]) as c:
        fields = _send_fields(TOPIC_B, "nopub-raw")
        answer = c.call(RequestCode.SEND_MESSAGE, signed_fields(fields, "app", APP_REMOTING, b"x"), b"x")
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark == f"send: account 'app' lacks PUB on topic '{TOPIC_B}'"
        # the admin's remoting secret (from its file) may
        answer = c.call(RequestCode.SEND_MESSAGE, signed_fields(fields, "broker", BROKER_REMOTING, b"x"), b"x")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert _admin_query(secure["master"], TOPIC_B, "nopub-raw") == [b"x"]


def _send_fields(topic: str, key: str) -> dict[str, str]:
    """A SEND_MESSAGE header as the C++ client writes it (code 10, long names)."""
    return {"producerGroup": "rmq-sec", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
            "properties": f"KEYS\x01{key}\x02", "reconsumeTimes": "0", "unitMode": "0", "batch": "0"}


def test_a_check_is_pushed_only_to_a_producer_whose_account_may_publish(secure: dict[str, Any]) -> None:
    """`app` (no PUB on the topic) and the admin heartbeat as producers of one group: the
    checks the service picks `app` for are withheld, the admin's channel gets one."""
    topic, group = "RmqSecTx", "PG-sec-tx"
    master = secure["master"]

    async def admin(request: Any) -> Any:
        async with connect(master, credentials=Credentials("broker", BROKER_SECRET)) as conn:
            return await conn.call(request)

    async def check_times() -> int:
        listed = (await admin(TransactionList(topic=topic))).transactions
        return int(listed[0]["check_times"]) if listed else 0

    async def checked_twice() -> bool:
        return await check_times() >= 2

    def beat(c: RemotingClient, client_id: str, account: str, secret: str) -> list[Any]:
        """A signed producer heartbeat; the checks pushed to `c` so far."""
        body = json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": group}]}).encode()
        assert c.call(RequestCode.HEART_BEAT, signed_fields({}, account, secret, body), body).code == ResponseCode.SUCCESS
        return [p for p in c.pushed if p.code == RequestCode.CHECK_TRANSACTION_STATE]

    trio.run(admin, TopicCreate(topic=topic))
    with RemotingClient(master) as app, RemotingClient(master) as broker:
        assert beat(app, "10.0.0.5@app", "app", APP_REMOTING) == []
        fields = {**_send_fields(topic, "tx"), "producerGroup": group,
                  "properties": f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02UNIQ_KEY\x01U-SEC\x02"}
        sent = broker.call(RequestCode.SEND_MESSAGE, signed_fields(fields, "broker", BROKER_REMOTING, b"tx"), b"tx")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        # checked twice with `app` the only producer of the group: withheld both times
        trio.run(lambda: wait_until(checked_twice, what="two checks counted"))
        assert beat(app, "10.0.0.5@app", "app", APP_REMOTING) == [], "app may not see the half message"
        checks = trio.run(lambda: wait_until(lambda: beat(broker, "10.0.0.6@broker", "broker", BROKER_REMOTING),
                                             what="a check pushed to the admin's channel"))
        h = checks[0].ext_fields
        end = {"producerGroup": group, "tranStateTableOffset": h["tranStateTableOffset"],
               "commitLogOffset": h["commitLogOffset"], "commitOrRollback": "12", "fromTransactionCheck": "true",
               "msgId": h["msgId"], "transactionId": h["transactionId"]}
        refused = app.call(RequestCode.END_TRANSACTION, signed_fields(end, "app", APP_REMOTING))
        assert refused.code == ResponseCode.NO_PERMISSION and "lacks PUB" in refused.remark, refused.remark
        ended = broker.call(RequestCode.END_TRANSACTION, signed_fields(end, "broker", BROKER_REMOTING))
        assert ended.code == ResponseCode.SUCCESS, ended.remark
        assert beat(app, "10.0.0.5@app", "app", APP_REMOTING) == []
    assert trio.run(admin, TransactionList(topic=topic)).transactions == []


def test_a_signature_covers_the_body(secure: dict[str, Any]) -> None:
    fields = signed_fields(_send_fields(TOPIC_A, "tampered"), "app", APP_REMOTING, b"what was signed")
    with RemotingClient(secure["master"]) as c:
        answer = c.call(RequestCode.SEND_MESSAGE, fields, b"what was sent")
        assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR,
                                                "Check signature failed for accessKey=app")
        unknown = c.call(RequestCode.SEND_MESSAGE, signed_fields(fields, "nobody", "x", b"x"), b"x")
        assert (unknown.code, unknown.remark) == (ResponseCode.SYSTEM_ERROR, "No acl config for nobody")
        # the same connection goes on: the untampered request is served
        fields = signed_fields(_send_fields(TOPIC_A, "tampered"), "app", APP_REMOTING, b"what was sent")
        assert c.call(RequestCode.SEND_MESSAGE, fields, b"what was sent").code == ResponseCode.SUCCESS
    assert _admin_query(secure["master"], TOPIC_A, "tampered") == [b"what was sent"]


def test_the_name_server_wants_valid_credentials_for_a_route(secure: dict[str, Any]) -> None:
    topic = {"topic": "TBW102"}
    with RemotingClient(secure["namesrv"]) as c:
        anon = c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {**topic, "AccessKey": "", "OnsChannel": "ALIYUN",
                                                           "Signature": ""})
        assert (anon.code, anon.remark, anon.body) == (ResponseCode.SYSTEM_ERROR, "No accessKey is configured", b"")
        wrong = c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed_fields(topic, "app", "wrong"))
        assert (wrong.code, wrong.remark) == (ResponseCode.SYSTEM_ERROR, "Check signature failed for accessKey=app")
        right = c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, signed_fields(topic, "app", APP_REMOTING))
        assert right.code == ResponseCode.SUCCESS and b"broker-sec" in right.body
        info = c.call(RequestCode.GET_BROKER_CLUSTER_INFO, signed_fields(None, "app", APP_REMOTING))
        assert info.code == ResponseCode.SUCCESS and b"broker-sec" in info.body
    # the C++ client with a wrong secret finds no route there (as `broker`: its retries use
    # up that key's failures from this address at the name server for a minute, and the
    # other tests' clients sign as `app`)
    before = _security(secure["namesrv"], NamesrvStatus())
    sent = _produce(secure, TOPIC_A, "noroute", "broker", "not-the-secret")
    assert "error" in sent[0] and "route" in sent[0]["error"].lower(), sent
    assert _security(secure["namesrv"], NamesrvStatus())["failed_signatures"] > before["failed_signatures"]


def test_a_remoting_secret_equal_to_the_scram_secret_is_refused() -> None:
    text = f'[[accounts]]\naccessKey = "x"\nscram = "{make_verifier("same").text()}"\nremotingSecret = "same"\n'
    with pytest.raises(AclError, match="separate one"):
        Acl.from_toml(text)
    assert Acl.from_toml(text.replace('remotingSecret = "same"', 'remotingSecret = "other"')).accounts["x"] \
        .remoting_secret == "other"


def test_the_cpp_pull_consumer_reads_what_its_account_may_and_nothing_else(secure: dict[str, Any]) -> None:
    sent = _produce(secure, TOPIC_P, "pull", "app", APP_REMOTING, count=2)
    assert [s.get("status") for s in sent] == [0, 0], sent
    got = run_cpp("pull", "--namesrv", secure["namesrv"], "--access-key", "app", "--secret-key", APP_REMOTING,
                  "--topic", TOPIC_P, "--count", "2")
    assert sorted(m["body"] for m in got["received"]) == ["pull-0", "pull-1"], got
    # refused pulls, as the lean client sees them (the Python wrapper's PullConsumer.pull
    # retries a failed pull forever, so a refused C++ pull never returns)
    pull = {"consumerGroup": "rmq-sec-pull", "topic": TOPIC_B, "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0"}
    with RemotingClient(secure["master"]) as c:
        refused = c.call(RequestCode.PULL_MESSAGE, signed_fields(pull, "app", APP_REMOTING))
        assert (refused.code, refused.remark, refused.body) == (
            ResponseCode.NO_PERMISSION, f"pull: account 'app' lacks SUB on topic '{TOPIC_B}'", b"")
        # a topic the account may not read is refused before anyone says whether it exists
        unknown = c.call(RequestCode.PULL_MESSAGE, signed_fields({**pull, "topic": "RmqSecNoSuch"}, "app",
                                                                 APP_REMOTING))
        assert unknown.code == ResponseCode.NO_PERMISSION, unknown
        wrong = c.call(RequestCode.PULL_MESSAGE, signed_fields({**pull, "topic": TOPIC_P}, "app", "not-it"))
        assert (wrong.code, wrong.body) == (ResponseCode.SYSTEM_ERROR, b"")
        mine = c.call(RequestCode.PULL_MESSAGE, signed_fields({**pull, "topic": TOPIC_P, "queueId": str(
            got["received"][0]["queue_id"])}, "app", APP_REMOTING))
        assert mine.code == ResponseCode.SUCCESS and b"pull-" in mine.body


def test_the_cpp_push_consumer_with_its_account_consumes(secure: dict[str, Any], tmp_path) -> None:
    """A signed push consumer: heartbeat, rebalance, offsets and long-polled pulls all pass
    the broker's signature and permission checks, and it receives what its account sent."""
    sent = _produce(secure, TOPIC_A, "push", "app", APP_REMOTING, count=3)
    assert [s.get("status") for s in sent] == [0, 0, 0], sent
    before = _security(secure["master"])
    consumers = PushConsumers(tmp_path, secure["namesrv"])
    try:
        out = consumers.start("rmq-sec-push", TOPIC_A, "sec-push", "--access-key", "app", "--secret-key",
                              APP_REMOTING)
        expected = {f"push-{i}" for i in range(3)}
        records = trio.run(wait_received, [out], expected, "the account's messages at its push consumer")
        assert expected <= {r["body"] for r in records}
    finally:
        consumers.stop()
    after = _security(secure["master"])
    assert after["failed_signatures"] == before["failed_signatures"]  # every request it made was signed right
    assert after["refused"] == before["refused"]


def test_a_message_the_account_may_not_read_is_not_shown_by_id(secure: dict[str, Any]) -> None:
    async def store() -> int:
        async with connect(secure["master"], credentials=Credentials("broker", BROKER_SECRET)) as conn:
            await conn.call(TopicCreate(topic=TOPIC_B))
            await conn.call(Send(topic=TOPIC_B, body=b"secret", keys=["by-id"]))
            (m,) = (await conn.call(QueryByKey(topic=TOPIC_B, key="by-id"))).messages
            return int(m.commitlog_offset)

    offset = {"offset": str(trio.run(store))}
    with RemotingClient(secure["master"]) as c:
        # VIEW_MESSAGE_BY_ID names no topic (any account may ask, as CBOR's get_by_msg_id):
        # the answer's message is what is checked
        app = c.call(RequestCode.VIEW_MESSAGE_BY_ID, signed_fields(offset, "app", APP_REMOTING))
        assert (app.code, app.body) == (ResponseCode.NO_PERMISSION, b"")
        assert app.remark == f"account 'app' lacks SUB on topic '{TOPIC_B}'"
        admin = c.call(RequestCode.VIEW_MESSAGE_BY_ID, signed_fields(offset, "broker", BROKER_REMOTING))
        assert admin.code == ResponseCode.SUCCESS and b"secret" in admin.body


@pytest.fixture(scope="module")
def tls_namesrvs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Name servers with tlsMode enforcing and permissive: their port is the ClientServer
    every node has, so remoting connections meet the same TLS check there."""
    tmp = tmp_path_factory.mktemp("rmq-tls")
    made = cli("tls", "make-dev-certs", str(tmp / "certs"))
    assert made.returncode == 0, made.stderr.decode()
    nodes = Nodes()
    try:
        out: dict[str, Any] = {"ca": str(tmp / "certs" / "ca.pem")}
        for mode in ("enforcing", "permissive"):
            conf = write_conf(tmp, mode, {"listenPort": 0, "tlsMode": mode, "tlsCertFile": "certs/node.pem",
                                          "tlsKeyFile": "certs/node-key.pem"})
            out[mode] = nodes.start(conf, ["namesrv", "start", "-c", str(conf)]).address
        yield out
    finally:
        nodes.cleanup()


def test_tls_enforcing_refuses_a_plaintext_remoting_client_in_its_own_terms(tls_namesrvs: dict[str, Any]) -> None:
    route = {"topic": "TBW102", "AccessKey": "", "OnsChannel": "", "Signature": ""}
    with RemotingClient(tls_namesrvs["enforcing"]) as c:
        refused = c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
        assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR,
                                                  "this port accepts TLS only (tlsMode enforcing)")
        with pytest.raises((ConnectionError, OSError)):  # then the connection is closed
            c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
    # the same request over TLS is served (no broker: no route)
    context = ssl.create_default_context(cafile=tls_namesrvs["ca"])
    for address in (tls_namesrvs["enforcing"], tls_namesrvs["permissive"]):
        with RemotingClient(address) as c:
            c.sock = context.wrap_socket(c.sock, server_hostname="127.0.0.1")
            assert c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route).code == ResponseCode.TOPIC_NOT_EXIST
    # permissive serves plaintext too
    with RemotingClient(tls_namesrvs["permissive"]) as c:
        assert c.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route).code == ResponseCode.TOPIC_NOT_EXIST

