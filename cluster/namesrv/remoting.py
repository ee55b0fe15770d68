"""The name server's answers to RocketMQ's remoting clients: GET_ROUTEINFO_BY_TOPIC,
GET_BROKER_CLUSTER_INFO and GET_ALL_TOPIC_LIST_FROM_NAMESERVER, from the same route table
the CBOR ops read (J-namesrv DefaultRequestProcessor).

A route lists the brokers the name server believes alive, by brokerId, at the client port
each registered: that port answers remoting too. A topic no broker serves is TOPIC_NOT_EXIST,
and a RocketMQ client then asks for `TBW102`'s route, which every node with
autoCreateTopicEnable registers, to send a topic's first message (node/registration.py).

With aclEnable every request must be signed (ACL 1.0, node/remoting/acl.py), and is held
to what the CBOR op it stands for needs (get_route, get_cluster_info: any account).
"""

from __future__ import annotations

import logging
from typing import Any

from node.ops.puts import PendingPut
from node.remoting.acl import Refused, screened, signed_session
from node.remoting.channel import Finish, RemotingChannel
from node.security.guard import Guard
from wire.protocol import InvalidRequest, parse_with
from wire.protocol.namesrv import NAMESRV_REQUESTS
from wire.remoting.bodies import json_body, route_body
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import HeaderError, ext_str
from wire.remoting.plain_send import RemotingSend

from .route_table import RouteTable

log = logging.getLogger("tidemq.namesrv")

__all__ = ["NamesrvRemoting"]


class NamesrvRemoting:
    """The name server's RemotingService (node/remoting/channel.py)."""

    ordered: frozenset[int] = frozenset()
    plain_topics: set[str] | None = None  # no sends here

    async def plain_sends(self, sends: list[RemotingSend], channel: RemotingChannel) -> list[PendingPut | None]:
        return [None] * len(sends)  # never called: no plain_topics

    def plain_answer(self, send: RemotingSend, response: dict[str, Any]) -> RemotingCommand:
        raise AssertionError("the name server begins no sends")

    def __init__(self, table: RouteTable, guard: Guard | None = None) -> None:
        self.table = table
        self.guard = guard

    def closed(self, channel: RemotingChannel) -> None:
        pass

    async def start(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish | None:
        try:
            if self.guard is not None:
                refusal = self._refusal(self.guard, cmd, channel)
                if refusal is not None:
                    return refusal
            if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                return self._route(cmd)
            if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                return cmd.response(ResponseCode.SUCCESS, body=json_body(self._cluster_info()))
            if cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
                return cmd.response(ResponseCode.SUCCESS, body=json_body({"topicList": self._topics()}))
        except HeaderError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")

    def _refusal(self, guard: Guard, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | None:
        """Why a request is refused (its signature, or what its CBOR op needs); None: it may run."""
        session = signed_session(guard, cmd, channel.peer)
        if isinstance(session, RemotingCommand):
            return session
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            frame: dict[str, Any] = {"op": "get_route", "topic": ext_str(cmd.ext_fields, "topic")}
        elif cmd.code in (RequestCode.GET_BROKER_CLUSTER_INFO, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER):
            frame = {"op": "get_cluster_info"}  # the topic list is part of the cluster's info
        else:
            return None  # not answered: REQUEST_CODE_NOT_SUPPORTED
        try:
            screened(guard, session, parse_with({"v": 1, "id": 0, **frame}, NAMESRV_REQUESTS))
        except InvalidRequest as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, e.message)
        except Refused as e:
            return cmd.response(e.code, e.remark)
        return None

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd.ext_fields, "topic")
        self.table.expire()
        groups = self.table.route(topic)
        brokers, queues = [], []
        for g in groups:
            addrs = {str(b.broker_id): b.address for b in g.brokers if b.alive}
            brokers.append({"brokerAddrs": addrs, "brokerName": g.broker_name, "cluster": g.cluster})
            if g.queue_data is not None:
                q = g.queue_data
                queues.append({"brokerName": g.broker_name, "perm": q.perm, "readQueueNums": q.read_queue_nums,
                               "topicSysFlag": 0, "writeQueueNums": q.write_queue_nums})
        if not groups:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}")
        return cmd.response(ResponseCode.SUCCESS, body=route_body(brokers, queues))

    def _cluster_info(self) -> dict[str, Any]:
        self.table.expire()
        groups: dict[str, dict[str, Any]] = {}
        clusters: dict[str, list[str]] = {}
        for b in self.table.cluster_info():
            name = b["broker_name"]
            group = groups.setdefault(name, {"brokerAddrs": {}, "brokerName": name, "cluster": b["cluster"]})
            if b.get("alive", True):
                group["brokerAddrs"][str(b["broker_id"])] = b["address"]
            names = clusters.setdefault(b["cluster"], [])
            if name not in names:
                names.append(name)
        return {"brokerAddrTable": groups, "clusterAddrTable": clusters}

    def _topics(self) -> list[str]:
        return sorted({t for b in self.table.cluster_info() for t in b["topics"]})
