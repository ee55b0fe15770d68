"""One ConnectOptions reaches every connection of a client: given as `options=`, as the
keywords the constructors always took (which override it), or left to each class's
defaults."""

from __future__ import annotations

import ssl

import trio

from cluster.client import Admin, ConnectOptions, Consumer, Credentials, Producer, PullConsumer
from wire.client import ConnectionPool

NS = "127.0.0.1:1"


def test_each_class_keeps_its_defaults() -> None:
    assert Producer(namesrv=NS).options == ConnectOptions(connect_timeout=3.0, request_timeout=3.0)
    assert Producer(namesrv=NS).send_timeout == 3.0
    assert PullConsumer(namesrv=NS, group="G", topic="T").options == ConnectOptions(connect_timeout=3.0,
                                                                                      request_timeout=5.0)
    assert Admin(namesrv=NS).options == ConnectOptions(connect_timeout=3.0, request_timeout=5.0)


def test_keywords_override_the_options_given() -> None:
    tls = ssl.create_default_context()
    creds = Credentials("app", "secret")
    base = ConnectOptions(connect_timeout=1.0, request_timeout=2.0, credentials=creds)
    admin = Admin(brokers=[NS], options=base, request_timeout=9.0, tls=tls)
    assert admin.options == ConnectOptions(connect_timeout=1.0, request_timeout=9.0, credentials=creds, tls=tls)
    assert Producer(namesrv=NS, options=base).send_timeout == 2.0, "no send_timeout: the options' request timeout"
    assert Producer(namesrv=NS, options=base, send_timeout=7.0).options.request_timeout == 7.0
    assert "secret" not in repr(base), "the secret never shows"


def test_the_push_consumer_hands_its_options_to_both_pull_consumers() -> None:
    consumer = Consumer("G", "T", lambda msg: None, namesrv=NS, request_timeout=4.0, connect_timeout=0.5)
    expected = ConnectOptions(connect_timeout=0.5, request_timeout=4.0)
    assert consumer.options == expected
    assert consumer._main.options == expected and consumer._retry.options == expected


async def test_a_pool_connects_with_its_options() -> None:
    async with trio.open_nursery() as nursery:
        pool = ConnectionPool(nursery, connect_timeout=5.0, request_timeout=6.0)
        assert pool.options == ConnectOptions(connect_timeout=5.0, request_timeout=6.0)
        assert ConnectionPool(nursery).options == ConnectOptions()
